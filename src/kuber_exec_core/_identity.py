"""On whose behalf an exec runs: Kubernetes user impersonation, validated, as HTTP headers.

``ExecRequest(..., on_behalf_of=Impersonation("alice", groups=("dev",)))`` makes every request
of that exec (the REST reads and the exec upgrade, and the access review before it) carry
``Impersonate-User``, one ``Impersonate-Group`` per group and one
``Impersonate-Extra-<key>`` per extra value, so the cluster's RBAC and audit log see the user,
not the service. The service's own credentials then need the ``impersonate`` verb on ``users``
(and ``groups``, ``userextras/<key>``).

Values go into HTTP headers, so construction refuses what could break out of one: a user,
group or extra value must be 1..256 printable ASCII characters (no control character, so no
CR/LF header injection) without leading or trailing spaces; an extra key must be 1..63
lowercase letters, digits, ``.``, ``_``, ``-`` or ``/`` (percent-encoded in the header name, as
the API server decodes it). Every refusal is ``ExecError(EXEC_INVALID)``, never quoting the
value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import attrs

from ._errors import ExecError, ExecErrorCode

__all__ = ["Impersonation"]

_MAX_VALUE = 256
_MAX_GROUPS = 64
_EXTRA_KEY = re.compile(r"[a-z0-9._/-]{1,63}")
_PRINTABLE = re.compile(r"[\x20-\x7e]+")


def _invalid(message: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, message)


def _value(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _invalid(f"{what} must be a string, not {type(value).__name__}")
    if not value or len(value) > _MAX_VALUE:
        raise _invalid(f"{what} must be 1 to {_MAX_VALUE} characters long")
    if _PRINTABLE.fullmatch(value) is None or value != value.strip():
        raise _invalid(
            f"{what} must be printable ASCII without control characters or surrounding spaces"
        )
    return value


def _user(value: object) -> str:
    return _value(value, "on_behalf_of.user")


def _groups(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise _invalid("on_behalf_of.groups must be a sequence of strings")
    groups = tuple(_value(g, "each of on_behalf_of.groups") for g in value)
    if len(groups) > _MAX_GROUPS:
        raise _invalid(f"on_behalf_of.groups may name at most {_MAX_GROUPS} groups")
    return groups


def _extras(value: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if _pairs(value):
        # The kept form, (key, values) pairs (attrs.evolve and copies pass it back).
        assert isinstance(value, tuple)
        value = dict(value)
    if not isinstance(value, Mapping):
        raise _invalid("on_behalf_of.extras must be a mapping of key to strings")
    extras: list[tuple[str, tuple[str, ...]]] = []
    items: Mapping[Any, Any] = value
    for key, values in sorted(items.items(), key=lambda item: str(item[0])):
        if not isinstance(key, str) or _EXTRA_KEY.fullmatch(key) is None:
            raise _invalid(
                "each key of on_behalf_of.extras must be 1 to 63 lowercase letters, digits, "
                "'.', '_', '-' or '/'"
            )
        if isinstance(values, str):
            values = (values,)
        if not isinstance(values, Iterable):
            raise _invalid("each value of on_behalf_of.extras must be a string or strings")
        extras.append((key, tuple(_value(v, f"on_behalf_of.extras[{key!r}]") for v in values)))
    return tuple(extras)


def _pairs(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value)


@attrs.frozen
class Impersonation:
    """A user to act as (see the module docstring for the rules on values).

    Attributes:
        user: the user name (``Impersonate-User``).
        groups: its groups (``Impersonate-Group`` each); the API server adds
            ``system:authenticated``.
        extras: extra user info, key to values (``Impersonate-Extra-<key>`` each); given as
            any mapping, kept as sorted ``(key, values)`` pairs.

    Raises:
        ExecError: ``EXEC_INVALID`` for a value a header cannot carry safely.
    """

    user: str = attrs.field(converter=_user)
    groups: tuple[str, ...] = attrs.field(default=(), converter=_groups)
    extras: tuple[tuple[str, tuple[str, ...]], ...] = attrs.field(default=(), converter=_extras)

    def __repr__(self) -> str:
        return f"Impersonation(user={self.user!r}, groups={self.groups!r})"

    def headers(self) -> list[tuple[str, str]]:
        """The impersonation headers, in order: user, groups, extras (key percent-encoded)."""
        headers = [("Impersonate-User", self.user)]
        headers += [("Impersonate-Group", group) for group in self.groups]
        for key, values in self.extras:
            name = "Impersonate-Extra-" + quote(key, safe="")
            headers += [(name, value) for value in values]
        return headers
