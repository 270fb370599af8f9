"""A Griffe extension for the API pages: the docstrings' reST roles as Markdown.

The library's docstrings are written reST-style (``:class:`~teng_eq.domains.quadrature.Quadrature```,
``:meth:`plan```, a paragraph ending in ``::`` before an indented block), and
mkdocstrings renders Markdown. When the package is loaded this rewrites each docstring:

* ``:role:`target``` becomes a cross-reference ``[`shown`][path]`` when ``target``
  names an object of the package that the API pages render — resolved in the
  docstring's own scope, as Python resolves a name (a method's class, its module, the
  module's imports), or as an absolute or relative (``.fourier``) module path — and
  plain code ``shown`` otherwise (a private helper, a library's object). ``~`` shows
  the last component only, as in Sphinx. A name that resolves to nothing (a renamed or
  removed object) is a warning, and so is a cross-reference the site then cannot find:
  ``mkdocs build --strict`` fails on both.
* ``text::`` at the end of a line becomes ``text:`` (the indented block after it is
  code in Markdown as in reST).

Written for this project's docstrings, not as a general reST converter.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import griffe

logger = logging.getLogger("mkdocs.plugins.griffe.rst_roles")

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(?P<target>[^`]+)`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", flags=re.M)


def _lookup(root: griffe.Object, path: str) -> griffe.Object | None:
    """The object at the dotted ``path`` under the package ``root``, aliases followed."""
    if path != root.path and not path.startswith(root.path + "."):
        return None
    obj: Any = root
    try:
        for name in path.split(".")[1:]:
            obj = obj.members[name]
            if obj.is_alias:
                obj = obj.final_target
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return obj


def _rendered(obj: griffe.Object) -> bool:
    """Whether the API pages show ``obj``: public all the way down (mkdocs.yml filters
    private names out and shows undocumented objects)."""
    return not any(part.startswith("_") and not part.startswith("__") for part in obj.path.split("."))


def _resolve(scope: griffe.Object, root: griffe.Object, target: str) -> griffe.Object | str | None:
    """The object of the package that ``target`` names in a docstring of ``scope``; the
    path it names elsewhere (an import from another library) as a string; None when it
    names nothing at all."""
    module = scope if scope.is_module else scope.module
    if target.startswith("."):  # relative to the package, as in an import
        package = module if module.is_init_module else module.parent
        candidates = [f"{package.path}{target}"]
    else:
        head, _, rest = target.partition(".")
        candidates = []
        for where in (scope, *_parents(scope)):
            try:
                candidates.append(where.resolve(head) + (f".{rest}" if rest else ""))
                break
            except griffe.NameResolutionError:
                continue
        candidates.append(target)
    for path in candidates:
        obj = _lookup(root, path)
        if obj is not None:
            return obj
    # A dotted name used without its import in this module (``Equation.rhs``): the
    # package's one object whose path ends with it.
    if "." in target and not target.startswith("."):
        found = [o for o in _walk(root) if o.path.endswith(f".{target}")]
        if len(found) == 1:
            return found[0]
    external = [c for c in candidates[:-1] if not c.startswith(f"{root.path}.")]
    return external[0] if external else None


def _parents(obj: griffe.Object):
    while obj.parent is not None:
        obj = obj.parent
        yield obj


def convert(text: str, scope: griffe.Object, root: griffe.Object) -> str:
    """``text`` (a docstring of ``scope``) with its roles and literal-block markers as Markdown."""

    def role(match: re.Match) -> str:
        target = match["target"]
        short = target.startswith("~")
        target = target.lstrip("~!")
        shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        obj = _resolve(scope, root, target)
        if obj is None:
            logger.warning(f"{scope.path}: {match[0]} names nothing in {root.path} (renamed or removed?)")
        elif not isinstance(obj, str) and _rendered(obj):
            return f"[`{shown}`][{obj.path}]"
        return f"`{shown}`"

    return LITERAL_BLOCK.sub(":", ROLE.sub(role, text))


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            yield from _walk(member)


class RstRoles(griffe.Extension):
    """Rewrite every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, obj, pkg)

    # Griffe before 2.0 calls the same event by this name.
    on_package_loaded = on_package
