"""The resolved exec target: where a command runs."""

from __future__ import annotations

import attrs

__all__ = ["ResolvedTarget"]


@attrs.frozen(kw_only=True)
class ResolvedTarget:
    """The pod and container a request resolved to, with the uids that prove ownership."""

    namespace: str
    deployment: str
    deployment_uid: str
    pod: str
    pod_uid: str
    container: str
