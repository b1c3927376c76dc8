"""Port-forward: connections to a pod's ports over the tunnel (many per WebSocket, half-close)
or the legacy channels (one WebSocket each), a forward to a workspace's Deployment that moves
to the next ready pod when its pod goes away, and local listeners, over the core's codecs
(``kuber_exec_core.portforward``)."""
