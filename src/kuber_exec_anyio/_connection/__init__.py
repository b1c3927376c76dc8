"""The exec connection: opening the WebSocket through a runtime's transport (the seam every
binding implements), the negotiated subprotocol, keepalive pings shared by a backend's
connections, a bounded close, and the blocks that hand an opened connection on."""
