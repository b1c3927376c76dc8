"""The exec WebSocket's client side, without I/O: the upgrade on ``websockets``' sans-IO
``ClientProtocol``, and the server's frames parsed into messages.

Both runtime bindings move bytes their own way (``kuber_exec_trio`` reads in the receiving task,
``kuber_exec_asyncio`` in a protocol's ``data_received``) and share what lies between the bytes
and the messages the connection code wants: the upgrade request and what its answer means
(:func:`open_protocol`, :class:`UpgradeAnswer`), and :class:`ReceivedFrames`, which parses the
server's frames into whole messages, answers pings, matches pongs to pings and notes how the
connection ended. The ``ClientProtocol`` writes every frame the client sends (masked).

Nothing here awaits or imports a runtime: events a runtime must wake (a ping's pong, the
server's Close) are handed in as objects with a ``set()`` method.
"""

from __future__ import annotations

from kuber_exec_websocket._received import ReceivedFrames, Wakeable
from kuber_exec_websocket._upgrade import UpgradeAnswer, open_protocol

__all__ = [
    "CLOSE_NORMAL",
    "RECEIVE_BYTES",
    "ReceivedFrames",
    "UpgradeAnswer",
    "Wakeable",
    "open_protocol",
]

#: What one read takes from the kernel at most: a syscall per 4 KiB (trio-websocket's default)
#: was most of a transfer's cost; 256 KiB is asyncio's own read size.
RECEIVE_BYTES = 256 * 1024
CLOSE_NORMAL = 1000
