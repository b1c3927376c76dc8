"""What of an untrusted archive may be extracted, and where: pure rules, no file system.

``kubectl cp`` trusted the archive a container's ``tar c`` wrote, and a hostile container wrote
outside the destination five times over: with ``..`` (CVE-2018-1002100), with a symlink and then
a file through it (CVE-2019-1002101, CVE-2019-11246), with ``..`` inside symlink targets
(CVE-2019-11249) and with two symlinks combined (CVE-2019-11251). :class:`ExtractionPolicy` is
the rule set that makes those shapes impossible.
It sees only the members (``TarMember``); it remembers what it has allowed so far (its view of
the destination, built from this archive alone) and answers each member with an
:class:`Extraction` (what to create, at which safe relative path) or a :class:`Skipped`, or
raises a :class:`TarError` naming the member. The async layer does the I/O it decides.

The rules, in the order they are checked:

1. Budgets: members, and bytes of file data (a member's declared size counts at its header).
2. Kinds: files, directories, symlinks and hard links only; device nodes, FIFOs, sparse files
   and unknown types are refused (tar has no type for sockets).
3. Names: no NUL; not absolute; no ``..`` component (as GNU tar, which skips such members);
   ``.`` and empty components dropped; ``strip_components`` leading components removed; the
   path and each component within their byte budgets. With ``windows=True``, ``\\`` is a
   separator too, drive letters count as absolute, and the characters and names Windows gives a
   meaning to (``:``, ``*``, ``CON``, a trailing dot …) are refused.
4. Parents: every parent of the path is a directory this archive created, or unknown to the
   view; never a file, and never a symlink, extracted or skipped. Nothing is ever written through
   a symlink. The unknown parents come back in ``Extraction.new_parents``: the I/O layer creates
   them, and must find each one a real directory (``lstat``) if it already exists.
5. The path itself: not extracted before (a directory may repeat as a directory).
6. Symlinks (``symlink_rule``): a target must be relative, may climb with leading ``..`` only
   (``a/../b`` is refused: ``a`` could be a symlink, so ``..`` would not undo it) and no higher
   than the link's own directory is deep. Such a link resolves inside the destination wherever
   it is followed, whatever the other links are, because every link's parents are real
   directories (rule 4) and every target only climbs from there: two links cannot combine into
   an escape (CVE-2019-11251).
7. Hard links: the target is an earlier member's path (the same rules as names) that this
   archive extracted as a file; a directory, a symlink, something skipped or not yet extracted
   is refused.
8. Modes: setuid, setgid and sticky bits are stripped; owners are the I/O layer's own user.

The view costs one dictionary entry per path (about 150 bytes), bounded by ``max_members``.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Callable

import attrs

from .._errors import ExecError, ExecErrorCode
from ._format import TarError, TarKind, TarLimits, TarMember

__all__ = ["Extraction", "ExtractionPolicy", "Skipped", "SymlinkRule"]

#: The ``refuse`` helper of one decision: a reason in, the member's error out.
_Refuse = Callable[[str], TarError]


class SymlinkRule(enum.Enum):
    """What the policy does with symlinks."""

    #: Extract the links whose targets stay inside the destination (rule 6); a link whose target
    #: does not ends the extraction with a :class:`TarError`. The default.
    CONTAINED = "contained"
    #: Extract the links that stay inside; skip the others (each a :class:`Skipped`, for the
    #: caller to report), as for a tree holding absolute links, such as a virtualenv.
    SKIP_ESCAPING = "skip-escaping"
    #: Extract no symlink at all (each a :class:`Skipped`): what ``kubectl cp`` does since 1.16
    #: (the fix for CVE-2019-11251).
    SKIP_ALL = "skip-all"


@attrs.frozen(kw_only=True)
class Extraction:
    """A member the policy allows: what to create, and where.

    Attributes:
        member: the member, as the reader gave it (``mtime``, ``size``, … are there).
        kind: ``FILE``, ``DIRECTORY``, ``SYMLINK`` or ``HARDLINK``.
        path: the path to create, relative to the destination: ``/``-separated components, none
            empty, ``.`` or ``..``; never empty.
        new_parents: the parents of ``path`` that this extraction has not created yet, from the
            top down: create each as a directory, or, if it exists, check it is a directory and
            not a symlink (the destination's own contents are the I/O layer's to check).
        mode: the permission bits to apply, setuid, setgid and sticky stripped (0 for links).
            Apply a directory's mode after its contents: a read-only directory would refuse them.
        link_target: a symlink's target, stored as is (``\\`` made ``/`` when ``windows``); a
            hard link's existing file, as a path relative to the destination. ``""`` otherwise.
    """

    member: TarMember = attrs.field(repr=False)
    kind: TarKind
    path: str
    new_parents: tuple[str, ...] = ()
    mode: int = 0
    link_target: str = ""


@attrs.frozen(kw_only=True)
class Skipped:
    """A member the policy leaves out, harmlessly; ``reason`` says why (for a warning)."""

    member: TarMember = attrs.field(repr=False)
    reason: str


class _Node(enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"
    SKIPPED_SYMLINK = "symlink that was not extracted"


_NODES = {
    TarKind.DIRECTORY: _Node.DIRECTORY,
    TarKind.FILE: _Node.FILE,
    TarKind.HARDLINK: _Node.FILE,
    TarKind.SYMLINK: _Node.SYMLINK,
}
_REFUSED_KINDS = {
    TarKind.CHAR_DEVICE: "device nodes are never extracted",
    TarKind.BLOCK_DEVICE: "device nodes are never extracted",
    TarKind.FIFO: "FIFOs are never extracted",
    TarKind.SPARSE: "sparse files are not supported",
}
_PERMISSIONS = 0o777
_DRIVE = re.compile(r"[A-Za-z]:")
_WINDOWS_CHARACTERS = re.compile(r'[<>:"|?*\x00-\x1f]')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{digit}" for digit in "123456789"}
    | {f"LPT{digit}" for digit in "123456789"}
)


class ExtractionPolicy:
    """Decides, member by member, what of one archive is extracted; see the module's rules.

    Args:
        limits: the budgets (``max_members``, ``max_total_bytes``, ``max_path_bytes``,
            ``max_component_bytes``).
        symlink_rule: what to do with symlinks.
        strip_components: leading path components to remove from every name (and hard link
            target), as GNU tar's ``--strip-components``; members left with nothing are skipped.
        case_insensitive: the destination's file system ignores case and Unicode normalisation
            (macOS, Windows): ``A/x`` and ``a/x`` are then one path, so a symlink ``A`` cannot
            be written through as ``a``.
        windows: the destination is Windows: ``\\`` separates components, drive letters are
            absolute, names Windows reserves are refused. Implies ``case_insensitive``.

    Raises:
        ExecError: ``EXEC_INVALID`` for arguments of the wrong type or a negative
            ``strip_components``.
    """

    def __init__(
        self,
        limits: TarLimits | None = None,
        *,
        symlink_rule: SymlinkRule = SymlinkRule.CONTAINED,
        strip_components: int = 0,
        case_insensitive: bool = False,
        windows: bool = False,
    ) -> None:
        if limits is None:
            limits = TarLimits()
        elif not isinstance(limits, TarLimits):
            raise ExecError(
                ExecErrorCode.INVALID, f"limits must be a TarLimits, not {type(limits).__name__}"
            )
        if not isinstance(symlink_rule, SymlinkRule):
            raise ExecError(ExecErrorCode.INVALID, "symlink_rule must be a SymlinkRule")
        if (
            isinstance(strip_components, bool)
            or not isinstance(strip_components, int)
            or strip_components < 0
        ):
            raise ExecError(ExecErrorCode.INVALID, "strip_components must be an integer >= 0")
        for flag, label in ((case_insensitive, "case_insensitive"), (windows, "windows")):
            if not isinstance(flag, bool):
                raise ExecError(ExecErrorCode.INVALID, f"{label} must be True or False")
        self._limits = limits
        self._symlink_rule = symlink_rule
        self._strip = strip_components
        self._windows = windows
        self._fold = case_insensitive or windows
        self._view: dict[str, _Node] = {}
        self._members = 0
        self._total_bytes = 0

    @property
    def members(self) -> int:
        """Members decided so far (allowed, skipped or refused)."""
        return self._members

    @property
    def total_bytes(self) -> int:
        """Bytes of file data allowed so far."""
        return self._total_bytes

    def decide(self, member: TarMember) -> Extraction | Skipped:
        """What to do with ``member``: an :class:`Extraction` or a :class:`Skipped`.

        An allowed or skipped member is remembered: later members are checked against it. A
        refused one changes nothing but the member count.

        Raises:
            TarError: ``EXEC_FAILED``, naming the member and why it is refused. The archive is
                hostile or broken: stop extracting it.
            ExecError: ``EXEC_INVALID`` if ``member`` is not a :class:`TarMember`.
        """
        if not isinstance(member, TarMember):
            raise ExecError(
                ExecErrorCode.INVALID, f"decide() takes a TarMember, not {type(member).__name__}"
            )

        def refuse(reason: str) -> TarError:
            return TarError(reason, member=member.name, offset=member.offset)

        limits = self._limits
        self._members += 1
        if self._members > limits.max_members:
            raise refuse(f"more than the {limits.max_members}-member budget")
        kind = member.kind
        if kind in _REFUSED_KINDS:
            raise refuse(_REFUSED_KINDS[kind])
        if kind not in _NODES:
            raise refuse(f"members of type {member.typeflag!r} are not supported")

        parts = self._components(member.name, refuse)
        if parts is None:
            return Skipped(member=member, reason="no name left after strip_components")
        if not parts:
            if kind is TarKind.DIRECTORY:
                return Skipped(member=member, reason="the destination directory itself")
            raise refuse(f"a {kind.value} cannot be the destination directory itself")
        path = "/".join(parts)
        keys = self._key(path).split("/")
        key = "/".join(keys)

        if kind is TarKind.FILE:
            total = self._total_bytes + member.size
            if total > limits.max_total_bytes:
                raise refuse(
                    f"its {member.size} bytes would take the archive past the "
                    f"{limits.max_total_bytes}-byte budget"
                )

        new_parents = self._parents(parts, keys, refuse)
        existing = self._view.get(key)
        if existing is not None and not (existing is _Node.DIRECTORY and kind is TarKind.DIRECTORY):
            raise refuse(f"{path!r} was already extracted (as a {existing.value})")

        link_target = ""
        node = _NODES[kind]
        if kind is TarKind.SYMLINK:
            link_target, escape = self._symlink_target(member.linkname, len(parts) - 1)
            if escape is not None:
                if self._symlink_rule is SymlinkRule.CONTAINED:
                    raise refuse(f"a symlink to {member.linkname!r}: {escape}")
                node = _Node.SKIPPED_SYMLINK
            elif self._symlink_rule is SymlinkRule.SKIP_ALL:
                node = _Node.SKIPPED_SYMLINK
                escape = "symlinks are not extracted"
            if node is _Node.SKIPPED_SYMLINK:
                # Remembered, so that nothing is later written through where it would be; its
                # parents are not, since nothing creates them: a later member under them gets
                # them in its own new_parents.
                self._view[key] = node
                return Skipped(member=member, reason=f"symlink to {member.linkname!r}: {escape}")
        elif kind is TarKind.HARDLINK:
            link_target = self._hardlink_target(member.linkname, refuse)

        self._record(keys, new_parents, node)
        if kind is TarKind.FILE:
            self._total_bytes += member.size
        mode = member.mode & _PERMISSIONS if kind in (TarKind.FILE, TarKind.DIRECTORY) else 0
        return Extraction(
            member=member,
            kind=kind,
            path=path,
            new_parents=new_parents,
            mode=mode,
            link_target=link_target,
        )

    # -- the rules --------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        if not self._fold:
            return path
        return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())

    def _components(self, name: str, refuse: _Refuse, what: str = "the name") -> list[str] | None:
        """The normalised components of an archive path (``None``: all stripped away)."""
        if "\0" in name:
            raise refuse(f"{what} holds a NUL byte")
        if self._windows:
            name = name.replace("\\", "/")
            if _DRIVE.match(name):
                raise refuse(f"{what} is an absolute path (a drive letter)")
        if name.startswith("/"):
            raise refuse(f"{what} is an absolute path")
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise refuse(f"{what} has a '..' component (CVE-2018-1002100)")
        if self._strip and parts:
            if len(parts) <= self._strip:
                return None
            parts = parts[self._strip :]
        limits = self._limits
        try:
            encoded = [part.encode("utf-8", "surrogateescape") for part in parts]
        except UnicodeEncodeError:
            raise refuse(f"{what} is not valid text") from None
        if sum(map(len, encoded)) + len(encoded) - 1 > limits.max_path_bytes:
            raise refuse(f"{what} is longer than {limits.max_path_bytes} bytes")
        if any(len(part) > limits.max_component_bytes for part in encoded):
            raise refuse(f"a component of {what} is longer than {limits.max_component_bytes} bytes")
        if self._windows:
            for part in parts:
                self._windows_component(part, refuse)
        return parts

    @staticmethod
    def _windows_component(part: str, refuse: _Refuse) -> None:
        if _WINDOWS_CHARACTERS.search(part):
            raise refuse(f"the component {part!r} holds a character Windows reserves")
        if part.endswith((".", " ")):
            raise refuse(f"the component {part!r} ends with a dot or space, which Windows drops")
        if part.split(".", 1)[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
            raise refuse(f"the component {part!r} is a Windows device name")

    def _parents(self, parts: list[str], keys: list[str], refuse: _Refuse) -> tuple[str, ...]:
        """The parents of the path that are new to the view; refuses any that is not a directory.

        Every directory and extracted member in the view has all its ancestors in the view as
        directories (a skipped symlink may not), so the walk up stops at the first directory.
        """
        view = self._view
        missing: list[str] = []
        for depth in range(len(parts) - 1, 0, -1):
            node = view.get("/".join(keys[:depth]))
            if node is _Node.DIRECTORY:
                break
            parent = "/".join(parts[:depth])
            if node is _Node.SYMLINK or node is _Node.SKIPPED_SYMLINK:
                raise refuse(
                    f"its parent {parent!r} is a {node.value}: nothing is written through a "
                    "symlink (CVE-2019-1002101, CVE-2019-11246)"
                )
            if node is not None:
                raise refuse(f"its parent {parent!r} is a {node.value}, not a directory")
            missing.append(parent)
        return tuple(reversed(missing))

    def _record(self, keys: list[str], new_parents: tuple[str, ...], node: _Node) -> None:
        view = self._view
        first_new = len(keys) - 1 - len(new_parents)
        for depth in range(first_new + 1, len(keys)):
            view["/".join(keys[:depth])] = _Node.DIRECTORY
        view["/".join(keys)] = node

    def _symlink_target(self, target: str, depth: int) -> tuple[str, str | None]:
        """The target as stored, and why it escapes (``None`` if it stays inside)."""
        if not target:
            return target, "an empty target"
        if "\0" in target:
            return target, "the target holds a NUL byte"
        if self._windows:
            target = target.replace("\\", "/")
            if _DRIVE.match(target):
                return target, "the target is absolute (a drive letter)"
        if target.startswith("/"):
            return target, "the target is absolute"
        climbs = 0
        named = False
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part != "..":
                named = True
            elif named:
                return target, (
                    "the target climbs back out of a directory it named ('a/../b'), "
                    "which a symlink at 'a' would redirect (CVE-2019-11249, CVE-2019-11251)"
                )
            else:
                climbs += 1
        if climbs > depth:
            return target, "the target points outside the destination"
        return target, None

    def _hardlink_target(self, target: str, refuse: _Refuse) -> str:
        parts = self._components(target, refuse, "the hard link's target") if target else []
        if not parts:
            raise refuse(f"a hard link to {target!r}, which is not a file in the archive")
        path = "/".join(parts)
        node = self._view.get(self._key(path))
        if node is None:
            raise refuse(f"a hard link to {path!r}, which was not extracted before it")
        if node is not _Node.FILE:
            raise refuse(f"a hard link to {path!r}, which is a {node.value}, not a file")
        return path
