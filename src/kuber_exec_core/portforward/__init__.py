"""Port-forward's wire protocols without I/O: the SPDY/3.1 tunnel and the legacy channels.

- :class:`TunnelClient` / :class:`TunnelServer`: ``SPDY/3.1+portforward.k8s.io`` (kubectl ≥
  1.31): one WebSocket whose binary messages are slices of one SPDY/3.1 byte stream; each
  forwarded TCP connection is an error and a data stream sharing a ``requestID``, with
  half-close. Built on :class:`SpdySession` (frames, zlib header blocks with the SPDY/3
  dictionary, stream ids, flow-control windows).
- :class:`LegacyClient` / :class:`LegacyServer`: ``v4.channel.k8s.io`` with ``?ports=``: a
  2-byte port prefix on each channel, one connection per port per WebSocket, no half-close.

A server without the tunnel answers its upgrade with 400 ``query parameter "port" is required``
(:func:`is_tunnel_refusal`): the client's signal to fall back to the legacy channels.
"""

from ._errors import PortForwardProtocolError as PortForwardProtocolError
from ._legacy import LEGACY_SUBPROTOCOL as LEGACY_SUBPROTOCOL
from ._legacy import LegacyClient as LegacyClient
from ._legacy import LegacyData as LegacyData
from ._legacy import LegacyServer as LegacyServer
from ._legacy import legacy_query as legacy_query
from ._refusal import PORT_REQUIRED_MESSAGE as PORT_REQUIRED_MESSAGE
from ._refusal import is_tunnel_refusal as is_tunnel_refusal
from ._spdy_session import Role as Role
from ._spdy_session import SpdySession as SpdySession
from ._tunnel import TUNNEL_SUBPROTOCOL as TUNNEL_SUBPROTOCOL
from ._tunnel import ConnectionData as ConnectionData
from ._tunnel import ConnectionEnded as ConnectionEnded
from ._tunnel import ConnectionEOF as ConnectionEOF
from ._tunnel import ConnectionErrorStreamEnded as ConnectionErrorStreamEnded
from ._tunnel import ConnectionFailed as ConnectionFailed
from ._tunnel import ConnectionReady as ConnectionReady
from ._tunnel import ConnectionRequested as ConnectionRequested
from ._tunnel import ConnectionWritable as ConnectionWritable
from ._tunnel import TunnelClient as TunnelClient
from ._tunnel import TunnelEvent as TunnelEvent
from ._tunnel import TunnelGoingAway as TunnelGoingAway
from ._tunnel import TunnelPong as TunnelPong
from ._tunnel import TunnelServer as TunnelServer
from ._tunnel import check_port as check_port

__all__ = [
    "LEGACY_SUBPROTOCOL",
    "PORT_REQUIRED_MESSAGE",
    "TUNNEL_SUBPROTOCOL",
    "ConnectionData",
    "ConnectionEOF",
    "ConnectionEnded",
    "ConnectionErrorStreamEnded",
    "ConnectionFailed",
    "ConnectionReady",
    "ConnectionRequested",
    "ConnectionWritable",
    "LegacyClient",
    "LegacyData",
    "LegacyServer",
    "PortForwardProtocolError",
    "Role",
    "SpdySession",
    "TunnelClient",
    "TunnelEvent",
    "TunnelGoingAway",
    "TunnelPong",
    "TunnelServer",
    "check_port",
    "is_tunnel_refusal",
    "legacy_query",
]
