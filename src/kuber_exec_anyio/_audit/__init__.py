"""What an exec, a session or a copy leaves behind: its audit record and events, the JSON lines
log that writes them off the event loop, and a session's asciicast recording."""
