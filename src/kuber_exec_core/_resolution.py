"""Target resolution as a sans-IO plan over the backend seam (the seed's ``resolveTarget``).

The plan validates the request, then asks its driver for the Deployment and for the pods matching
the Deployment's selector, and ends with a :class:`ResolvedTarget` or the seed's error::

    plan = TargetResolution(request, limits)
    while True:
        match plan.next_event():
            case FetchDeployment(namespace=ns, name=name):
                plan.deployment_received(await backend.get_deployment(ns, name))
            case FetchPods(namespace=ns, selector=selector):
                plan.pods_received(await backend.list_pods(ns, selector))
            case TargetResolved(target=target):
                return target
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from ._errors import ExecError, ExecErrorCode
from ._limits import ExecLimits
from ._objects import Deployment, Pod
from ._request import ExecRequest, validate_request
from ._selection import check_deployment, choose_pod
from ._selector import LabelSelector
from ._target import ResolvedTarget

__all__ = ["FetchDeployment", "FetchPods", "ResolutionStep", "TargetResolution", "TargetResolved"]


@attrs.frozen(kw_only=True)
class FetchDeployment:
    """The driver must fetch this Deployment (``None`` when it does not exist)."""

    namespace: str
    name: str


@attrs.frozen(kw_only=True)
class FetchPods:
    """The driver must list the pods matching ``selector``, owners resolved."""

    namespace: str
    selector: LabelSelector


@attrs.frozen(kw_only=True)
class TargetResolved:
    """The plan is done."""

    target: ResolvedTarget


ResolutionStep = FetchDeployment | FetchPods | TargetResolved


class _Stage(enum.Enum):
    NEED_DEPLOYMENT = enum.auto()
    NEED_PODS = enum.auto()
    DONE = enum.auto()


class TargetResolution:
    """One resolution. Raises ``ExecError`` from the constructor (validation) or the feeders.

    ``avoid`` names a pod to rank last (see :func:`~kuber_exec_core.kube.rank_pods`).
    """

    def __init__(
        self, request: ExecRequest, limits: ExecLimits, *, avoid: str | None = None
    ) -> None:
        validate_request(request, limits)
        self._request = request
        self._avoid = avoid
        self._stage = _Stage.NEED_DEPLOYMENT
        self._deployment: Deployment | None = None
        self._container = ""
        self._target: ResolvedTarget | None = None

    def next_event(self) -> ResolutionStep:
        """What the driver must do next."""
        request = self._request
        match self._stage:
            case _Stage.NEED_DEPLOYMENT:
                return FetchDeployment(namespace=request.workspace.project, name=request.deployment)
            case _Stage.NEED_PODS:
                assert self._deployment is not None
                return FetchPods(
                    namespace=request.workspace.project, selector=self._deployment.selector
                )
            case _Stage.DONE:
                assert self._target is not None
                return TargetResolved(target=self._target)

    def deployment_received(self, deployment: Deployment | None) -> None:
        """Feed the answer to :class:`FetchDeployment`."""
        self._expect(_Stage.NEED_DEPLOYMENT)
        self._container = check_deployment(self._request, deployment)
        self._deployment = deployment
        self._stage = _Stage.NEED_PODS

    def pods_received(self, pods: Iterable[Pod]) -> None:
        """Feed the answer to :class:`FetchPods`."""
        self._expect(_Stage.NEED_PODS)
        assert self._deployment is not None
        self._target = choose_pod(
            self._request, self._deployment, self._container, pods, avoid=self._avoid
        )
        self._stage = _Stage.DONE

    def _expect(self, stage: _Stage) -> None:
        if self._stage is not stage:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"target resolution was fed out of order (it is at {self._stage.name})",
            )
