"""Reading a kubeconfig: the files, their merge, the chosen context, and every error named.

Contract of :func:`read_kubeconfig`: it finds the files as kubectl does (the ``path`` given, else
each file of ``$KUBECONFIG``, else ``~/.kube/config``), parses each (JSON or YAML), merges them
(the first file to name a cluster, user or context wins; the first ``current-context`` wins),
and returns the chosen context's :class:`Kubeconfig`: its cluster and user entries with every
relative path made absolute against the file that held it. It blocks (it reads files) and never
runs anything: a user's ``exec`` plugin or ``auth-provider`` is left for the caller, who hands
those to the ``kubernetes`` package's loaders (:attr:`Kubeconfig.needs_official_loader`).

Every problem is an ``ExecError(EXEC_FAILED)`` naming the file and what is wrong with it: a
missing or unreadable file, a directory, YAML that does not parse (with its line and column), a
field of the wrong type, a context, cluster or user that is not there. The messages quote names
and paths, never a field's value: a kubeconfig holds tokens and keys.

Why not the ``kubernetes`` package for everything: importing ``kubernetes.config`` costs about
200 ms (it imports the whole generated client), more than the rest of a ``kuber-exec exec``
start-up; a kubeconfig with a certificate or a token needs none of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kuber_exec_core import ExecError, ExecErrorCode

__all__ = ["Kubeconfig", "default_kubeconfig_paths", "read_kubeconfig"]

#: The fields of a cluster and a user that hold a path, made absolute against their file.
_CLUSTER_PATHS = ("certificate-authority",)
_USER_PATHS = ("client-certificate", "client-key", "tokenFile")
#: The fields that must be strings when present (checked before anything reads them).
_CLUSTER_STRINGS = (
    "server", "certificate-authority", "certificate-authority-data", "tls-server-name",
    "proxy-url",
)  # fmt: skip
_USER_STRINGS = (
    "token", "tokenFile", "username", "password", "client-certificate", "client-certificate-data",
    "client-key", "client-key-data",
)  # fmt: skip


@dataclass(frozen=True)
class Kubeconfig:
    """The chosen context of a kubeconfig: where it came from, its cluster and its user.

    ``cluster`` and ``user`` are the entries as written (``server``, ``certificate-authority``,
    ``token``, ``exec``...), paths already absolute. The repr names the files and the context
    only: the entries hold credentials.
    """

    files: tuple[str, ...]
    context: str
    cluster: Mapping[str, Any] = field(repr=False)
    user: Mapping[str, Any] = field(repr=False)
    namespace: str | None = None

    @property
    def needs_official_loader(self) -> bool:
        """Whether the user authenticates through a plugin (``exec``) or an ``auth-provider``
        (OIDC, cloud providers): those run code and refresh tokens, which the ``kubernetes``
        package's loaders do with full fidelity."""
        return "exec" in self.user or "auth-provider" in self.user

    @property
    def described(self) -> str:
        """The files, for messages: ``a`` or ``a:b``."""
        return os.pathsep.join(self.files)


def default_kubeconfig_paths() -> list[str]:
    """Where kubectl looks without ``--kubeconfig``: each file of ``$KUBECONFIG``, or
    ``~/.kube/config``."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed
    return [os.path.join(os.path.expanduser("~"), ".kube", "config")]


def read_kubeconfig(path: str | None = None, context: str | None = None) -> Kubeconfig:
    """Read, merge and pick a context (``context``, else the ``current-context``).

    Raises:
        ExecError: ``EXEC_FAILED`` naming the file and the problem.
    """
    if path is not None:
        files = [path]
        documents = [(path, _load_file(path))]
    else:
        files = default_kubeconfig_paths()
        # kubectl skips the files of $KUBECONFIG that do not exist, but not the other errors.
        present = [p for p in files if os.path.lexists(p)]
        if not present:
            if len(files) == 1:
                raise _error(f"no kubeconfig found: {files[0]} does not exist")
            raise _error(
                f"no kubeconfig found: none of $KUBECONFIG's files exists ({', '.join(files)})"
            )
        documents = [(p, _load_file(p)) for p in present]
        files = present
    merged = _merge(documents)
    name = context or merged.current_context
    described = os.pathsep.join(files)
    if not name:
        raise _error(f"{described} has no current-context; give a context")
    entry = merged.contexts.get(name)
    if entry is None:
        raise _error(f"{described} has no context named {name!r}")
    context_body, origin = entry
    cluster_name = _string(context_body, "cluster", origin, f"context {name!r}")
    user_name = _string(context_body, "user", origin, f"context {name!r}", required=False)
    cluster = merged.clusters.get(cluster_name or "")
    if cluster is None:
        raise _error(f"{described}: context {name!r} names cluster {cluster_name!r}, not defined")
    user: tuple[dict[str, Any], str] = ({}, origin)
    if user_name:
        found = merged.users.get(user_name)
        if found is None:
            raise _error(f"{described}: context {name!r} names user {user_name!r}, not defined")
        user = found
    namespace = _string(context_body, "namespace", origin, f"context {name!r}", required=False)
    for key in _CLUSTER_STRINGS:
        _string(cluster[0], key, cluster[1], f"cluster {cluster_name!r}", required=False)
    for key in _USER_STRINGS:
        _string(user[0], key, user[1], f"user {user_name!r}", required=False)
    cluster_body = _absolute(cluster[0], cluster[1], _CLUSTER_PATHS)
    user_body = _absolute(user[0], user[1], _USER_PATHS)
    server = _string(cluster_body, "server", cluster[1], f"cluster {cluster_name!r}")
    if not server:
        raise _error(f"{cluster[1]}: cluster {cluster_name!r} has no server")
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _error(f"{cluster[1]}: cluster {cluster_name!r}: server must be https://host[:port]")
    for key in ("exec", "auth-provider"):
        if key in user_body and not isinstance(user_body[key], dict):
            raise _error(f"{user[1]}: user {user_name!r}: {key} must be a mapping")
    return Kubeconfig(
        files=tuple(files),
        context=name,
        cluster=cluster_body,
        user=user_body,
        namespace=namespace or None,
    )


@dataclass
class _Merged:
    clusters: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    contexts: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    current_context: str | None = None


def _merge(documents: Sequence[tuple[str, dict[str, Any]]]) -> _Merged:
    merged = _Merged()
    for origin, document in documents:
        current = document.get("current-context")
        if current is not None and not isinstance(current, str):
            raise _error(f"{origin}: current-context must be a string")
        if current and merged.current_context is None:
            merged.current_context = current
        for section, inner, target in (
            ("clusters", "cluster", merged.clusters),
            ("users", "user", merged.users),
            ("contexts", "context", merged.contexts),
        ):
            for name, body in _named_entries(document, section, inner, origin):
                target.setdefault(name, (body, origin))
    return merged


def _named_entries(
    document: Mapping[str, Any], section: str, inner: str, origin: str
) -> list[tuple[str, dict[str, Any]]]:
    entries = document.get(section)
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise _error(f"{origin}: {section} must be a list")
    named = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _error(f"{origin}: {section}[{index}] must be a mapping")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise _error(f"{origin}: {section}[{index}] has no name")
        body = entry.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise _error(f"{origin}: {section}[{index}] ({name!r}): {inner} must be a mapping")
        named.append((name, body))
    return named


def _string(
    body: Mapping[str, Any], key: str, origin: str, owner: str, *, required: bool = True
) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise _error(f"{origin}: {owner} has no {key}")
        return None
    if not isinstance(value, str):
        # Never the value: it may be a token.
        raise _error(f"{origin}: {owner}: {key} must be a string")
    return value


def _absolute(body: dict[str, Any], origin: str, keys: Sequence[str]) -> dict[str, Any]:
    # kubectl resolves a relative path against the directory of the file that holds it.
    base = os.path.dirname(os.path.abspath(origin))
    resolved = dict(body)
    for key in keys:
        value = resolved.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            resolved[key] = os.path.join(base, os.path.expanduser(value))
    return resolved


def _load_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise _error(f"the kubeconfig {path} does not exist") from None
    except IsADirectoryError:
        raise _error(f"the kubeconfig {path} is a directory, not a file") from None
    except PermissionError:
        raise _error(f"the kubeconfig {path} cannot be read (permission denied)") from None
    except OSError as error:
        raise _error(f"the kubeconfig {path} cannot be read ({error.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _error(f"the kubeconfig {path} is not UTF-8 text (byte {error.start})") from None
    document = _parse(text, path)
    if document is None:
        return {}  # kubectl takes an empty file as an empty config.
    if not isinstance(document, dict):
        raise _error(f"the kubeconfig {path} is not a mapping (found {_kind(document)})")
    return document


def _parse(text: str, path: str) -> Any:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        # JSON is YAML too; json is much faster, and its errors have a position.
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # Perhaps YAML's flow style after all: YAML says.
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # A safe loader (C when built).
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "invalid YAML"
        raise _error(f"the kubeconfig {path} is not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as error:
        raise _error(f"the kubeconfig {path} is not valid YAML ({type(error).__name__})") from None


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean"}.get(type(value), type(value).__name__)  # fmt: skip


def _error(message: str) -> ExecError:
    return ExecError(ExecErrorCode.FAILED, f"Loading the kubeconfig failed: {message}")
