"""The exec WebSocket's client side, without I/O: the upgrade on ``websockets``' sans-IO
``ClientProtocol``, and the server's frames parsed into messages.

Both runtime bindings move bytes their own way (``kuber_exec_trio`` reads in the receiving task,
``kuber_exec_asyncio`` in a protocol's ``data_received``) and share what lies between the bytes
and the messages the connection code wants: the upgrade request and what its answer means
(:func:`open_protocol`, :class:`UpgradeAnswer`, :func:`upgrade_failed`); :class:`ReceivedFrames`,
which parses the server's frames into whole messages, answers pings, matches pongs to pings and
notes how the connection ended (:class:`ConnectionEnded`, which each binding turns into the
async layer's ``TransportClosed`` at its edge); and :class:`ClientConnection`, which decides
what a send, a ping and our Close may queue once the connection has ended or is closing. The
``ClientProtocol`` writes every frame the client sends (masked).

Nothing here awaits or imports a runtime, nor the async layer: it depends on the core and
``websockets``' sans-IO protocol only. Events a runtime must wake (a ping's pong, the server's
Close) are handed in as objects with a ``set()`` method.
"""

from __future__ import annotations

from ._connection import ClientConnection as ClientConnection
from ._limits import CLOSE_NORMAL as CLOSE_NORMAL
from ._limits import RECEIVE_BYTES as RECEIVE_BYTES
from ._received import DROPPED as DROPPED
from ._received import ConnectionEnded as ConnectionEnded
from ._received import ReceivedFrames as ReceivedFrames
from ._received import Wakeable as Wakeable
from ._upgrade import UpgradeAnswer as UpgradeAnswer
from ._upgrade import open_protocol as open_protocol
from ._upgrade import upgrade_failed as upgrade_failed

__all__ = [
    "CLOSE_NORMAL",
    "DROPPED",
    "RECEIVE_BYTES",
    "ClientConnection",
    "ConnectionEnded",
    "ReceivedFrames",
    "UpgradeAnswer",
    "Wakeable",
    "open_protocol",
    "upgrade_failed",
]
