"""Ending what an exec left running: the supervised start of a command, and the cleanup exec.

:class:`~kuber_exec_core.ExecSession` takes a :class:`Supervision` to strip the start mark;
docs/cleanup.md has the contract.

The exec protocol has no signal channel: closing the connection does not stop the command
(kubernetes-client/javascript#2532, rancher/rancher#16192). So the command is started under a
short prologue (``/bin/sh -c PROLOGUE kuber-exec-<id> ARGV...``) that

1. checks that ``ARGV[0]`` is an executable (``PATH`` search in shell builtins, no fork) and
   prints the *start mark* ``K<id>.`` on stdout, or ``K<id>!`` and exits when it is not (the
   caller then runs the command unsupervised, so the user sees the runtime's own error);
2. exports ``KUBER_EXEC_SESSION=<id>`` and ``exec``\\ s ``ARGV``: the user's command replaces the
   shell (same pid, same exit code, signals and stdin), and every process it starts inherits the
   variable.

The session strips the mark from stdout (:class:`~kuber_exec_core.ExecSession`'s
``supervision``); the user's argv, output and exit are unchanged. When the session ends without
the process's own end (the caller left, a timeout, a cap, a lost connection, a limit), the layer
above runs :meth:`Supervision.cleanup_command` in the same container: it finds the processes
whose environment holds the variable (and the prologue's shell by its ``$0``), sends TERM, waits
up to the grace period, sends KILL to what is left, and prints what it did
(:class:`CleanupOutcome`). A process that clears its environment (``env -i``) escapes it; that
is documented in docs/cleanup.md.

Sessions that end together are cleaned together: :func:`batch_cleanup_command` builds one
cleanup exec for up to :data:`MAX_SESSIONS_PER_CLEANUP` sessions of one container (each a
:class:`CleanupRequest`), which finds all their processes in one pass over ``/proc`` per poll
and prints one verdict line per session (:func:`parse_batch_cleanup_output`). The async layer
queues the sessions of each container and runs these batches (docs/cleanup.md).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence

import attrs

from ._errors import ExecErrorCode
from ._frames import Error
from ._quoting import quote_once

__all__ = [
    "CLEANUP_MARKER",
    "MAX_SESSIONS_PER_CLEANUP",
    "SESSION_ENVIRONMENT_VARIABLE",
    "SHELL",
    "CleanupOutcome",
    "CleanupRequest",
    "StartMark",
    "Supervision",
    "batch_cleanup_command",
    "is_missing_shell",
    "is_start_failure",
    "parse_batch_cleanup_output",
    "parse_cleanup_output",
]

#: The shell the prologue and the cleanup run in; an image without it (distroless) runs the
#: command unsupervised (:func:`is_missing_shell`).
SHELL = "/bin/sh"
#: The environment variable that marks a session's processes.
SESSION_ENVIRONMENT_VARIABLE = "KUBER_EXEC_SESSION"
#: The prologue shell's ``$0`` prefix (also how the cleanup finds a shell that has not yet
#: ``exec``\\ ed: a process's ``/proc/PID/environ`` is the environment it was started with).
CLEANUP_MARKER = "kuber-exec-"

# $1... is the user's argv. Everything is a builtin up to the exec: the prologue costs one
# shell start and no fork. `[ -f ] && [ -x ]` as execve(2) would find it (a directory or a
# builtin's name does not count: the runtime would not have run those either).
_PROLOGUE_TEMPLATE = (
    # The session id is $0's tail, so the script is the same text for every exec (and is
    # percent-encoded once, not per exec: see below).
    "session=${0#{marker}}; found=\n"
    "case $1 in\n"
    '*/*) [ -f "$1" ] && [ -x "$1" ] && found=1 ;;\n'
    "*) saved_ifs=$IFS; IFS=:\n"
    '   for dir in $PATH; do [ -f "${dir:-.}/$1" ] && [ -x "${dir:-.}/$1" ] && '
    "{ found=1; break; }; done\n"
    "   IFS=$saved_ifs ;;\n"
    "esac\n"
    'if [ -z "$found" ]; then printf \'K%s!\' "$session"; exit 127; fi\n'
    "printf 'K%s.' \"$session\"\n"
    "{variable}=$session; export {variable}\n"
    'exec "$@"\n'
)

# $1 the session id, $2 the grace period and $3 how long to wait for a process to appear, both in
# tenths of a second; $4 the signals to send first (TERM, or HUP and TERM for a terminal).
# `grep -l -z -x` reads each /proc/PID/environ and cmdline as NUL-separated
# lines (GNU and busybox grep). The cmdline pattern is a bracket expression so that grep's own
# command line (which holds the pattern) does not match it.
_CLEANUP_TEMPLATE = (
    "id=$1; grace=$2; appear=$3; signals=$4\n"
    'rest=${id#?}; first=${id%"$rest"}\n'
    "pids() {\n"
    '  { grep -l -s -z -x -F "{variable}=$id" /proc/[0-9]*/environ\n'
    '    grep -l -s -z -x -E "{marker}[$first]$rest" /proc/[0-9]*/cmdline\n'
    "  } 2>/dev/null | sed -n 's|^/proc/\\([0-9]*\\)/.*|\\1|p' | sort -u\n"
    "}\n"
    "nap() { sleep 0.1 2>/dev/null || sleep 1; }\n"
    "found=$(pids); waited=0\n"
    'while [ -z "$found" ] && [ "$waited" -lt "$appear" ]; do '
    "nap; waited=$((waited + 1)); found=$(pids); done\n"
    'if [ -z "$found" ]; then echo none; exit 0; fi\n'
    "for signal in $signals; do kill -$signal $found 2>/dev/null; done\n"
    "waited=0\n"
    'while [ "$waited" -lt "$grace" ]; do\n'
    '  left=$(pids); if [ -z "$left" ]; then echo terminated; exit 0; fi\n'
    "  nap; waited=$((waited + 1))\n"
    "done\n"
    'left=$(pids); if [ -z "$left" ]; then echo terminated; exit 0; fi\n'
    "kill -KILL $left 2>/dev/null\n"
    # KILL is delivered at once but a process takes a moment to die: report it once gone.
    'waited=0; while [ -n "$(pids)" ] && [ "$waited" -lt 10 ]; do\n'
    "  nap; waited=$((waited + 1))\n"
    "done\n"
    "echo killed\n"
)


# The batch cleanup: one exec for several sessions of one container. $1 is the grace period in
# tenths of a second; then the sessions, each a 16-hex-digit id, preceded by a class token
# whenever the class changes: `t<tenths>` (TERM, wait up to <tenths> for a process to appear)
# or `h<tenths>` (HUP then TERM: a terminal). Each poll is one pass over /proc for every session
# still in progress: one grep over the environments (`-F -e VAR=id1 -e VAR=id2 ...`) and one
# over the command lines (the prologue's `$0`; bracket expressions, so that grep's own command
# line does not match). `-H -o -z -x` prints `/proc/PID/FILE:match` per hit, NUL-terminated
# (GNU and busybox grep), turned into `id pid` lines. Each session then moves on its own:
#   wait -> (a process seen) signals sent: term -> (none left) terminated
#                                              -> (grace over) KILL: kill -> (gone or 1 s) killed
#   wait -> (nothing seen by its wait) none
# Per-session state lives in shell variables named after the (validated, hex) id; no temporary
# files (read-only root filesystems) and no here-documents (some shells make temporary files).
# Prints `<id> <verdict>` per session, in argument order, once every session is settled.
_BATCH_CLEANUP_TEMPLATE = (
    "grace=$1; shift; ids=; appear=0; signals=TERM\n"
    "for arg do\n"
    "  case $arg in\n"
    "  [th]*) tenths=${arg#?}\n"
    "    case $tenths in ''|*[!0-9]*) continue ;; esac\n"
    "    appear=$tenths; case $arg in h*) signals='HUP TERM' ;; *) signals=TERM ;; esac ;;\n"
    "  *) case $arg in ''|*[!0-9a-f]*) continue ;; esac\n"
    "    [ ${#arg} -eq 16 ] || continue\n"
    '    ids="$ids $arg"\n'
    '    eval "a_$arg=\\$appear; s_$arg=\\$signals; v_$arg=wait; t_$arg=0" ;;\n'
    "  esac\n"
    "done\n"
    "scan() {\n"
    "  set --\n"
    '  for id in $active; do set -- "$@" -e "{variable}=$id"; done\n'
    '  grep -H -o -s -z -x -F "$@" /proc/[0-9]*/environ\n'
    "  set --\n"
    "  for id in $active; do rest=${id#?}; "
    'set -- "$@" -e "{marker}[${id%"$rest"}]$rest"; done\n'
    '  grep -H -o -s -z -x -E "$@" /proc/[0-9]*/cmdline\n'
    "}\n"
    "nap() { sleep 0.1 2>/dev/null || sleep 1; }\n"
    "newline='\n"
    "'\n"
    "active=$ids; now=0\n"
    'while [ -n "$active" ]; do\n'
    "  list=$(scan 2>/dev/null | tr '\\000' '\\n' | "
    "sed -n 's|^/proc/\\([0-9]*\\)/[a-z]*:.*\\([0-9a-f]\\{16\\}\\)$|\\2 \\1|p' | sort -u)\n"
    '  for id in $active; do eval "p_$id="; done\n'
    "  saved_ifs=$IFS; IFS=$newline\n"
    "  for line in $list; do id=${line%% *}; pid=${line#* }; "
    'eval "p_$id=\\"\\$p_$id \\$pid\\""; done\n'
    "  IFS=$saved_ifs; next=\n"
    "  for id in $active; do\n"
    '    eval "state=\\$v_$id; pids=\\$p_$id; since=\\$t_$id"\n'
    "    case $state in\n"
    '    wait) if [ -n "$pids" ]; then\n'
    '        eval "signals=\\$s_$id"\n'
    "        for signal in $signals; do kill -$signal $pids 2>/dev/null; done\n"
    '        eval "v_$id=term; t_$id=$now"; next="$next $id"\n'
    '      else eval "limit=\\$a_$id"\n'
    '        if [ "$now" -ge "$limit" ]; then eval "v_$id=none"; else next="$next $id"; fi\n'
    "      fi ;;\n"
    '    term) if [ -z "$pids" ]; then eval "v_$id=terminated"\n'
    '      elif [ $((now - since)) -ge "$grace" ]; then\n'
    '        kill -KILL $pids 2>/dev/null; eval "v_$id=kill; t_$id=$now"; next="$next $id"\n'
    '      else next="$next $id"; fi ;;\n'
    # KILL is delivered at once but a process takes a moment to die: report it once gone.
    '    kill) if [ -z "$pids" ] || [ $((now - since)) -ge 10 ]; then eval "v_$id=killed"\n'
    '      else next="$next $id"; fi ;;\n'
    "    esac\n"
    "  done\n"
    '  active=$next; [ -n "$active" ] || break\n'
    "  nap; now=$((now + 1))\n"
    "done\n"
    "for id in $ids; do eval \"printf '%s %s\\\\n' $id \\$v_$id\"; done\n"
)

#: The most sessions one cleanup exec takes. Each adds 25 bytes to the exec URL
#: (``&command=`` and 16 hex digits): 128 keep the whole URL (the script, the longest names
#: Kubernetes allows, the stream flags) under 8 KiB, the request-line limit of nginx's default
#: ``large_client_header_buffers``, the tightest common proxy in front of an API server (the
#: API server itself takes 1 MiB). More sessions make several execs. A larger batch would save
#: little more: each poll's cost is one pass over ``/proc``, whatever the number of ids.
MAX_SESSIONS_PER_CLEANUP = 128


def _fill(template: str) -> str:
    return template.replace("{variable}", SESSION_ENVIRONMENT_VARIABLE).replace(
        "{marker}", CLEANUP_MARKER
    )


_PROLOGUE = _fill(_PROLOGUE_TEMPLATE)
_CLEANUP = _fill(_CLEANUP_TEMPLATE)
_BATCH_CLEANUP = _fill(_BATCH_CLEANUP_TEMPLATE)
# The scripts are constant: their query encoding is computed here, once.
quote_once(_PROLOGUE)
quote_once(_CLEANUP)
quote_once(_BATCH_CLEANUP)


class StartMark(enum.Enum):
    """What the prologue printed first."""

    #: The command was found and is being ``exec``\\ ed.
    STARTED = "."
    #: ``ARGV[0]`` is not an executable: nothing ran (run it unsupervised for the real error).
    MISSING = "!"


class CleanupOutcome(enum.Enum):
    """What the cleanup did (the audit event's ``cleanup`` field)."""

    #: Nothing was left running.
    NONE = "none"
    #: Processes were left; TERM ended them within the grace period.
    TERMINATED = "terminated"
    #: Processes outlived the grace period; KILL ended them.
    KILLED = "killed"
    #: The cleanup exec failed or did not finish in time (logged; the outcome is unknown).
    FAILED = "failed"
    #: Not run: the image has no shell, so the command ran unsupervised (logged).
    UNSUPERVISED = "unsupervised"
    #: Not settled within the caller's bound: the cleanup continues in the background (its
    #: verdict is logged, and counted in the service's ``cleanup_status``).
    PENDING = "pending"


_VERDICTS = {
    outcome.value: outcome
    for outcome in (CleanupOutcome.NONE, CleanupOutcome.TERMINATED, CleanupOutcome.KILLED)
}


def parse_cleanup_output(stdout: bytes, exit_code: int) -> CleanupOutcome:
    """The cleanup script's verdict; :attr:`CleanupOutcome.FAILED` for anything else."""
    text = stdout.decode("ascii", errors="replace").strip()
    if exit_code == 0:
        for outcome in (CleanupOutcome.NONE, CleanupOutcome.TERMINATED, CleanupOutcome.KILLED):
            if text == outcome.value:
                return outcome
    return CleanupOutcome.FAILED


def _tenths(seconds: float) -> str:
    return str(max(0, round(seconds * 10)))


def _check_session_id(value: str) -> None:
    if not isinstance(value, str) or len(value) != 16 or value.strip("0123456789abcdef"):
        raise ValueError("a supervision id is 16 lowercase hex digits")


def _check_seconds(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("wait_for_start is a finite number of seconds")
    if value < 0:
        raise ValueError("wait_for_start is not negative")
    return float(value)


@attrs.frozen
class CleanupRequest:
    """One session to clean up in a batch: its supervision id (16 lowercase hex digits), how long
    to wait for a process of it to appear when none is there yet (the start mark had not
    arrived: the command may still be starting), and whether to send HUP before TERM (a
    terminal: an interactive shell ignores TERM). Raises ``ValueError`` for a bad id or wait."""

    session_id: str = attrs.field()
    wait_for_start: float = attrs.field(default=0.0, converter=_check_seconds)
    hangup: bool = attrs.field(default=False, converter=bool)

    @session_id.validator
    def _check_id(self, _attribute: attrs.Attribute[str], value: str) -> None:
        _check_session_id(value)


def batch_cleanup_command(requests: Sequence[CleanupRequest], *, grace: float) -> list[str]:
    """The argv of one cleanup exec for ``requests`` (sessions of one container): for each, it
    waits up to its ``wait_for_start`` for a process to appear, sends TERM (HUP first with
    ``hangup``), KILLs what is left ``grace`` seconds after, and prints one ``<id> <verdict>``
    line (``none``, ``terminated`` or ``killed``; :func:`parse_batch_cleanup_output`). The
    script is the same text for every batch; the ids travel as arguments.

    Raises:
        ValueError: no request, more than :data:`MAX_SESSIONS_PER_CLEANUP`, or one id twice.
    """
    if not requests:
        raise ValueError("a batch cleanup needs at least one session")
    if len(requests) > MAX_SESSIONS_PER_CLEANUP:
        raise ValueError(f"a batch cleanup takes at most {MAX_SESSIONS_PER_CLEANUP} sessions")
    if len({request.session_id for request in requests}) != len(requests):
        raise ValueError("a session appears twice in one batch cleanup")
    argv = [SHELL, "-c", _BATCH_CLEANUP, "kuber-exec-cleanup", _tenths(grace)]
    current = None
    # Grouped by class (stable), so each class token is sent once.
    classes = [("h" if r.hangup else "t") + _tenths(r.wait_for_start) for r in requests]
    for kind, request in sorted(zip(classes, requests, strict=True), key=lambda pair: pair[0]):
        if kind != current:
            argv.append(kind)
            current = kind
        argv.append(request.session_id)
    return argv


def parse_batch_cleanup_output(
    stdout: bytes, exit_code: int, session_ids: Iterable[str]
) -> dict[str, CleanupOutcome]:
    """Each of ``session_ids``' verdict in a batch cleanup's output: exactly one entry per id,
    :attr:`CleanupOutcome.FAILED` for an id without a well-formed line, with two different
    lines, or when the script did not exit 0. Lines for other ids are ignored. Never raises,
    whatever ``stdout`` holds."""
    wanted = list(session_ids)
    outcomes = dict.fromkeys(wanted, CleanupOutcome.FAILED)
    if exit_code != 0:
        return outcomes
    seen: dict[str, CleanupOutcome] = {}
    conflicting: set[str] = set()
    for line in stdout.decode("ascii", errors="replace").splitlines():
        fields = line.split()
        if len(fields) != 2 or fields[0] not in outcomes or fields[1] not in _VERDICTS:
            continue
        session_id, verdict = fields[0], _VERDICTS[fields[1]]
        if seen.setdefault(session_id, verdict) is not verdict:
            conflicting.add(session_id)
    for session_id, verdict in seen.items():
        if session_id not in conflicting:
            outcomes[session_id] = verdict
    return outcomes


@attrs.frozen(repr=False)
class Supervision:
    """One exec's supervision: its random id, the command that starts the user's argv under the
    prologue, the mark to strip, and the cleanup command.

    ``session_id`` is 16 lowercase hex digits, drawn at random by the caller (the core does
    no I/O, randomness included): ``Supervision(secrets.token_hex(8))``.
    """

    session_id: str = attrs.field()
    #: The user's ``ARGV[0]``, named in the error when the prologue finds it missing.
    executable: str = ""

    @session_id.validator
    def _check_id(self, _attribute: attrs.Attribute[str], value: str) -> None:
        _check_session_id(value)

    def __repr__(self) -> str:
        return f"Supervision({self.session_id!r}, executable={self.executable!r})"

    @property
    def missing_message(self) -> str:
        """The error for an ``ARGV[0]`` the prologue did not find, for a session that was
        handed over before the mark arrived and so cannot be re-run unsupervised to get the
        runtime's own error. It says what kuber-exec's start check found, in kuber-exec's
        words: no container runtime said it, so it does not borrow a runtime's wording."""
        return (
            f'kuber-exec\'s start check: "{self.executable}": executable file not found on the '
            "container's $PATH (the command did not start)"
        )

    @property
    def mark_length(self) -> int:
        """The start mark's length in bytes: ``K``, the id, and ``.`` or ``!``."""
        return len(self.session_id) + 2

    def supervised_command(self, command: Sequence[str]) -> list[str]:
        """The argv that runs ``command`` under the prologue (the user's argv is unchanged, as
        ``$1``...)."""
        return [SHELL, "-c", _PROLOGUE, CLEANUP_MARKER + self.session_id, *command]

    def read_mark(self, head: bytes) -> StartMark | None:
        """The mark that ``head`` (the first :attr:`mark_length` stdout bytes) is, or ``None``
        when it is not this session's mark (a protocol error: not our prologue's output)."""
        if len(head) != self.mark_length or head[:-1] != b"K" + self.session_id.encode("ascii"):
            return None
        try:
            return StartMark(chr(head[-1]))
        except ValueError:
            return None

    def cleanup_command(
        self, *, grace: float, wait_for_start: float = 0.0, hangup: bool = False
    ) -> list[str]:
        """The argv of the cleanup exec: TERM to the session's processes (with ``hangup``, HUP
        first, as a closed terminal sends: an interactive shell ignores TERM), KILL to those
        left after ``grace`` seconds; first waiting up to ``wait_for_start`` seconds for one to
        appear (when the start mark had not arrived: the command may still be starting).
        Prints ``none``, ``terminated`` or ``killed`` (:func:`parse_cleanup_output`).

        The service cleans up with :func:`batch_cleanup_command` (one exec for the sessions of
        a container that end together); this one-session form stays for other callers."""
        return [
            SHELL,
            "-c",
            _CLEANUP,
            "kuber-exec-cleanup",
            self.session_id,
            _tenths(grace),
            _tenths(wait_for_start),
            "HUP TERM" if hangup else "TERM",
        ]


def is_missing_shell(frame: Error) -> bool:
    """Whether ``frame`` is the runtime's refusal to start :data:`SHELL` (an image without a
    shell): a server-reported ``InternalError`` (500) whose message names the exec of the shell.
    Both runc (``exec: "/bin/sh": stat /bin/sh: no such file or directory``) and the sandbox
    (``exec: "/bin/sh": executable file not found in $PATH``) say it so."""
    return (
        frame.code is ExecErrorCode.FAILED
        and frame.status_reason == "InternalError"
        and frame.status_code == 500
        and f'exec: "{SHELL}"' in frame.message
        and ("no such file" in frame.message or "not found" in frame.message)
    )


def is_start_failure(frame: Error) -> bool:
    """Whether ``frame`` is a server-reported failure to start the command at all (the runtime's
    ``InternalError``, 500: a stopped container during a rollout, "unable to start container
    process"): judged by the Status's structure, not its text. Safe to retry only when no output
    and no start mark arrived before it (the caller checks)."""
    return (
        frame.code is ExecErrorCode.FAILED
        and frame.status_reason == "InternalError"
        and frame.status_code == 500
    )
