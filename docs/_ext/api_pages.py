"""MkDocs hook: the API reference's pages, one per layer of ``src/teng_eq/``.

The list of modules lives in one place, the layers contract of pyproject.toml
(``[[tool.importlinter.contracts]]`` on ``containers = ["teng_eq"]``), which
``lint-imports`` already requires to name every module (``exhaustive = true``). This
hook turns each layer into a page, lowest layer first, holding ``::: teng_eq.<module>``
for each of its modules — and, for a subpackage, the package's own docstring and
functions, then each of its modules in the order of the subpackage's own contract.
Renaming, adding or splitting a module is therefore followed by the site once the
contract says so; a module that no contract names fails the build (a warning, which
``mkdocs build --strict`` turns into an error).

The pages are added to the nav section that lists ``api/index.md``, and the marker
``<!-- layers -->`` on that page becomes a table of the layers: each module with the
first sentence of its docstring.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from mkdocs.structure.files import File

ROOT = "teng_eq"
INDEX = "api/index.md"

MARKER = "<!-- layers -->"
ROLE = re.compile(r":(?:py:)?[a-z]+:`([^`]+)`")
SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]])\.\s+(?=[A-Z])")
log = logging.getLogger(f"mkdocs.hooks.{__name__}")

_pages: dict[str, str] = {}  # src_uri → Markdown, built in on_config
_table: list[str] = []       # the layers table of api/index.md, built in on_config


def _contracts(config) -> dict[str, list[list[str]]]:
    """Each container's layers, top layer first, as lists of module names."""
    pyproject = Path(config.config_file_path).parent / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    return {
        c["containers"][0]: [[m.strip() for m in layer.split("|")] for layer in c["layers"]]
        for c in contracts if c.get("type") == "layers" and len(c.get("containers", [])) == 1
    }


def _own_members(init: Path) -> list[str]:
    """Public names a package's ``__init__.py`` defines itself (not its imports)."""
    names = []
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def _summary(path: str, src: Path, limit: int = 160) -> str:
    """The first sentence of the module's (or package's) docstring, on one line, its
    reST roles as code, cut at ``limit`` characters."""
    file = src.joinpath(*path.split("."))
    file = file / "__init__.py" if file.is_dir() else file.with_suffix(".py")
    paragraph = (ast.get_docstring(ast.parse(file.read_text())) or "").split("\n\n")[0]
    doc = " ".join(paragraph.split())
    doc = ROLE.sub(lambda m: f"`{m[1].lstrip('~!.').rsplit('.', 1)[-1] if m[1].startswith('~') else m[1]}`", doc)
    sentence = SENTENCE_END.split(doc, maxsplit=1)[0].rstrip(".")
    if len(sentence) > limit:
        sentence = sentence[:limit].rsplit(" ", 1)[0] + " …"
    return sentence.replace("``", "`").replace("|", "\\|")


def _directives(path: str, src: Path, contracts) -> list[str]:
    """``:::`` blocks for the module ``path`` (``teng_eq.x`` or ``teng_eq.x.y``)."""
    file = src.joinpath(*path.split("."))
    if not file.is_dir():
        return [f"::: {path}"]
    members = _own_members(file / "__init__.py")
    block = [f"::: {path}", "    options:", f"      members: {members if members else 'false'}"]
    if path in contracts:
        modules = [f"{path}.{m}" for layer in reversed(contracts[path]) for m in layer]
    else:
        modules = sorted(f"{path}.{p.stem}" for p in file.glob("*.py") if p.stem != "__init__")
    return [*block, *(d for m in modules for d in ["", *_directives(m, src, contracts)])]


def on_config(config, **kwargs):
    src = Path(config.config_file_path).parent / "src"
    contracts = _contracts(config)
    _pages.clear()
    _table[:] = ["| layer | module | what it holds |", "|---|---|---|"]
    nav_entries = []
    named = set()
    for number, layer in enumerate(reversed(contracts[ROOT]), start=1):
        slug = "-".join(layer)
        title = ", ".join(layer)
        body = [f"# {title}", "",
                f"Layer {number} of {len(contracts[ROOT])}, counted from the bottom: these modules import "
                "only from the layers before them (the layers contract in `pyproject.toml`; "
                "[overview](index.md)).", ""]
        for i, module in enumerate(layer):
            named.add(module)
            body += [*_directives(f"{ROOT}.{module}", src, contracts), ""]
            path = f"{ROOT}.{module}"
            _table.append(f"| {f'[{number}]({slug}.md)' if i == 0 else ''} | [`{module}`][{path}] "
                          f"| {_summary(path, src)} |")
        _pages[f"api/{slug}.md"] = "\n".join(body)
        nav_entries.append({title: f"api/{slug}.md"})
    on_disk = {p.stem for p in (src / ROOT).iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    for missing in sorted(on_disk - named):
        log.warning(f"{ROOT}.{missing} is in no layer of the importlinter contract: it has no API page")
    if not _attach(config.nav or [], nav_entries):
        log.warning(f"no nav section lists {INDEX}: the API pages are not in the navigation")
    return config


def _attach(nav: list, entries: list) -> bool:
    """Append ``entries`` to the nav section that lists ``api/index.md``."""
    for item in nav:
        if isinstance(item, dict):
            for value in item.values():
                if isinstance(value, list):
                    if any(v == INDEX or (isinstance(v, dict) and INDEX in v.values()) for v in value):
                        value.extend(e for e in entries if e not in value)
                        return True
                    if _attach(value, entries):
                        return True
    return False


def on_page_markdown(markdown, page, **kwargs):
    if page.file.src_uri == INDEX:
        if MARKER not in markdown:
            log.warning(f"{INDEX} lacks the marker {MARKER} where the layers table goes")
        return markdown.replace(MARKER, "\n".join(_table))
    return markdown


def on_files(files, config, **kwargs):
    for uri, content in _pages.items():
        files.append(File.generated(config, uri, content=content))
    return files
