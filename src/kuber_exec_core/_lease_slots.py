"""Session slots held as ``coordination.k8s.io/v1`` Leases: names, bodies and expiry (pure).

A workspace limited to ``N`` sessions has ``N`` slots, the Leases ``<project>-0`` ..
``<project>-<N-1>`` in the service's Lease namespace. A session holds one: taken by creating it
(``409 AlreadyExists``: taken), or, when the one there has expired (its ``renewTime`` plus
``leaseDurationSeconds`` is past), by replacing it with an update that carries the read
``resourceVersion`` (``409 Conflict``: another replica took it first). The holder renews it while
the session lives and deletes it (with that ``resourceVersion`` as precondition) at the end; a
replica that dies leaves it to expire. The async layer does the I/O; this module only says what
to send and what an answer means. Times are POSIX seconds (wall clock: holders on different
machines compare them, so their clocks must agree to well within a lease duration).
"""

from __future__ import annotations

import calendar
import re
from typing import Any

__all__ = [
    "is_expired",
    "lease_body",
    "parse_micro_time",
    "format_micro_time",
    "slot_names",
    "transitions_of",
]

JSON = dict[str, Any]


def slot_names(project: str, limit: int) -> list[str]:
    """The Lease names of a workspace's ``limit`` slots, in the order they are tried."""
    return [f"{project}-{index}" for index in range(limit)]


_MICRO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})"
)


def format_micro_time(seconds: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, UTC (pure: no clock, no ``datetime``)."""
    micros = round(seconds * 1_000_000)
    whole, fraction = divmod(micros, 1_000_000)
    days, second_of_day = divmod(whole, 86_400)
    year, month, day = _civil_from_days(days)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}Z"


def _civil_from_days(days: int) -> tuple[int, int, int]:
    # Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def parse_micro_time(value: object) -> float | None:
    """POSIX seconds of a ``MicroTime`` (or RFC 3339 ``Time``); ``None`` if it is not one."""
    if not isinstance(value, str):
        return None
    match = _MICRO_TIME.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    fraction = match.group(7) or "0"
    offset = match.group(8)
    shift = 0
    if offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        shift = sign * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
    whole: int = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    return whole - shift + int(fraction) / 10.0 ** len(fraction)


def lease_body(
    name: str,
    holder: str,
    duration_seconds: int,
    now: float,
    *,
    resource_version: str | None = None,
    acquired_at: float | None = None,
    transitions: int = 0,
) -> JSON:
    """The Lease to create (no ``resource_version``) or to update (renew or take over: with
    the ``resourceVersion`` read, the API server's precondition)."""
    metadata: JSON = {"name": name, "labels": {"app.kubernetes.io/managed-by": "kuber-exec"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_seconds,
            "acquireTime": format_micro_time(now if acquired_at is None else acquired_at),
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        },
    }


def is_expired(lease: JSON, now: float) -> bool:
    """Whether ``lease`` may be taken over at ``now``: released (no holder), or not renewed for
    its ``leaseDurationSeconds``. A Lease without a readable renew time or duration is treated
    as expired only once it has no holder (another tool's Lease is never stolen)."""
    spec = lease.get("spec")
    if not isinstance(spec, dict):
        return False
    if not spec.get("holderIdentity"):
        return True
    renewed = parse_micro_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or isinstance(duration, bool) or not isinstance(duration, int):
        return False
    return now >= renewed + duration


def transitions_of(lease: JSON) -> int:
    """``spec.leaseTransitions`` (0 when absent)."""
    spec = lease.get("spec")
    value = spec.get("leaseTransitions") if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
