"""Which verbs on ``pods/exec`` a WebSocket exec needs, as the real server decides it.

Two ServiceAccounts (made by cluster.py ``up``) hold the reads and one verb each on
``pods/exec``: ``exec-get`` and ``exec-create``. For each, the test records the server's own answer
to a raw upgrade, then checks that the library's pre-flight (``ExecPreflight``) predicts exactly
that answer, and that with the pre-flight off the refusal is still ``EXEC_TARGET_FORBIDDEN`` naming
the verb the server refused (the server's words for ``get``; for ``create`` the server gives no
reason on 1.37, and the library says what it means).

- 1.20 authorizes the upgrade as ``get`` only: ``exec-get`` may exec, ``exec-create`` may not.
- 1.35+ (gate ``AuthorizePodWebsocketUpgradeCreatePermission``) checks ``get`` in the
  authorization filter, then ``create`` in the exec handler: neither may exec.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from .kube import WS_MAIN, Cluster, service_for
from .wire import Refusal, Session, run

pytestmark = pytest.mark.anyio

USERS = ["exec-get", "exec-create"]


def refused_verb(user: str, server_minor: int) -> str | None:
    """The verb the server refuses ``user`` (``None``: allowed)."""
    if user == "exec-create":
        return "get"  # every release checks the GET's own verb
    return "create" if server_minor >= 35 else None


def preflight_for(adapter: ModuleType, server_minor: int) -> Any:
    """The pre-flight configured for the release: the default (1.35+) or ``("get",)``."""
    if server_minor >= 35:
        return adapter.ExecPreflight()
    return adapter.ExecPreflight(verbs=("get",))


def request(adapter: ModuleType) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["sh", "-c", "echo allowed"],
    )


async def exec_as(adapter: ModuleType, service: Any, *, refused: bool) -> Any:
    """Exec once: the ``ExecError`` when ``refused``, else ``None`` after checking it ran."""
    if not refused:
        assert (await service.execute(request(adapter))).stdout == b"allowed\n"
        return None
    with pytest.raises(adapter.ExecError) as raised:
        await service.execute(request(adapter))
    return raised.value


@pytest.mark.parametrize("user", USERS)
def test_what_the_server_answers_each_single_verb_user(
    cluster: Cluster, workloads: Any, server_minor: int, user: str
) -> None:
    answer = run(cluster, ["true"], protocols=["v5.channel.k8s.io", "v4.channel.k8s.io"], user=user)
    verb = refused_verb(user, server_minor)
    if verb is None:
        assert isinstance(answer, Session), answer
        return
    assert isinstance(answer, Refusal), answer
    status = answer.status_json
    assert answer.status == 403
    assert status is not None
    assert (status["reason"], status["code"]) == ("Forbidden", 403)
    account = f"system:serviceaccount:kx-target:{user}"
    if verb == "get":
        # The authorization filter's words: user, verb, resource.
        assert f'User "{account}" cannot get resource "pods/exec"' in status["message"]
    else:
        # The exec handler's own `create` check (1.35+) gives no reason at all.
        assert status["message"].endswith(" is forbidden: "), status["message"]


@pytest.mark.parametrize("user", USERS)
async def test_the_preflight_predicts_the_servers_answer(
    adapter: ModuleType, cluster: Cluster, workloads: Any, server_minor: int, user: str
) -> None:
    verb = refused_verb(user, server_minor)
    preflight = preflight_for(adapter, server_minor)
    backend = adapter.KubernetesBackend.from_kubeconfig(
        cluster.kubeconfig(user), preflight=preflight
    )
    async with backend:
        error = await exec_as(adapter, adapter.ExecService(backend), refused=verb is not None)
    if error is None:
        return
    assert error.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    assert error.http_status is None  # refused before any upgrade was tried
    assert error.message.startswith(
        f"the service's own identity may not {verb} pods/exec in namespace 'kx-target'"
    )


@pytest.mark.parametrize("user", USERS)
async def test_without_the_preflight_the_refusal_names_the_verb(
    adapter: ModuleType, cluster: Cluster, workloads: Any, server_minor: int, user: str
) -> None:
    verb = refused_verb(user, server_minor)
    async with service_for(adapter, cluster, user) as service:
        error = await exec_as(adapter, service, refused=verb is not None)
    if error is None:
        return
    assert error.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    assert (error.http_status, error.status_reason) == (403, "Forbidden")
    if verb == "get":
        assert 'cannot get resource "pods/exec"' in error.message
    else:
        assert "may 'get' pods/exec but not 'create' it" in error.message
