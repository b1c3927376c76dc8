"""A griffe extension for the API reference: the docstrings' Sphinx roles become cross-references.

The docstrings cite other objects the Sphinx way (``:class:`ExecLimits```,
``:func:`~kuber_exec_core.state.state_diagram```, ``:mod:`.testing```). mkdocstrings renders
Markdown, where these would show as literal text; this extension resolves each role's target in
the scope of the object whose docstring it is in (as Python would resolve the name there) and
rewrites it as an autorefs link:

- a target that resolves becomes a link when the reference documents it, and plain code when it
  is private (for instance a helper of a private module);
- a target that does not resolve at all is a broken reference: it is logged as a warning, so the
  strict build (``mkdocs build --strict``) fails and names the docstring to fix.

It also turns reStructuredText's literal-block marker (a paragraph ending in ``::``) into a
colon, since the block below it is already an indented code block in Markdown.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import griffe

#: Warnings on this logger count as warnings of the strict MkDocs build.
logger = logging.getLogger("mkdocs.plugins.sphinx_roles")

ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`<>]+)`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::(?=\n\n)")


def _module_of(obj: griffe.Object) -> griffe.Module:
    current: griffe.Object = obj
    while not isinstance(current, griffe.Module):
        assert current.parent is not None
        current = current.parent
    return current


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path ``target`` names in ``obj``'s scope, or ``None`` when it names nothing."""
    if target.startswith("."):
        module = _module_of(obj)
        package = module if module.is_package else module.parent
        if package is None:
            return None
        candidate = f"{package.path}{target}"
        return candidate if _exists(obj, candidate) else None
    first, _, rest = target.partition(".")
    try:
        resolved = obj.resolve(first)
    except griffe.NameResolutionError:
        resolved = None
    if resolved is None and obj.parent is not None:
        try:
            resolved = obj.parent.resolve(first)
        except griffe.NameResolutionError:
            resolved = None
    if resolved is not None:
        candidate = f"{resolved}.{rest}" if rest else resolved
        if _exists(obj, candidate):
            return candidate
    return target if "." in target and _exists(obj, target) else None


def _exists(obj: griffe.Object, path: str) -> bool:
    modules = obj.modules_collection
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in modules:
            current: Any = modules[head]
            try:
                for part in parts[cut:]:
                    current = current.members[part]
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                return False
            return True
    return False


def _canonical(obj: griffe.Object, path: str) -> str:
    """Where the object at ``path`` is defined (autorefs knows rendered objects by that too)."""
    try:
        found = obj.modules_collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return path
    try:
        return str(found.canonical_path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return path


def rewrite(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        role, short, target = match.groups()
        target = target.strip()
        shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        if role in ("func", "meth"):
            shown += "()"
        path = resolve(obj, target)
        if path is None:
            logger.warning(
                "%s: the docstring's :%s:`%s` names nothing (fix the reference or drop the role)",
                obj.path,
                role,
                match.group(3),
            )
            return f"`{shown}`"
        identifier = html.escape(_canonical(obj, path), quote=True)
        code = f"<code>{html.escape(shown)}</code>"
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    return LITERAL_BLOCK.sub(":", ROLE.sub(replace, text))


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias and isinstance(member, griffe.Object):
                self._walk(member, seen)
