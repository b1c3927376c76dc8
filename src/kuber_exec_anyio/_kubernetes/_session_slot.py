"""A session's place in its workspace's record (:class:`SessionSlot`), and the slot of a
session nothing records (:data:`NO_SLOT`).

Apart from the Lease machinery (``_lease_slots``) so that the service, which holds a slot for
every session, loads that machinery only for a backend with ``cluster_slots``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import anyio

    from kuber_exec_core import ResolvedTarget

__all__ = ["NO_SLOT", "SessionSlot"]


class SessionSlot:
    """A session's place in its workspace's record, for the service to note where each attempt
    runs (what another replica needs to clean up after it)."""

    def note_attempt(
        self, target: ResolvedTarget, supervision: str | None, *, hangup: bool
    ) -> None:
        """Record (in the background) that the session's command now runs in ``target``
        under ``supervision`` (``None``: unsupervised)."""

    def release_after(self, settled: anyio.Event) -> None:
        """Keep the session recorded after its block until ``settled`` (its cleanup goes on in
        the background): should this replica die meanwhile, another finishes the cleanup."""


#: The slot of a session nothing records (no cluster slots, or the in-process limit).
NO_SLOT: Final = SessionSlot()
