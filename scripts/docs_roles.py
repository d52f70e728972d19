"""Rewrite the Sphinx roles of the package's docstrings into cross-references the docs site renders.

mkdocstrings renders docstrings as Markdown, so ``:func:`x``` shows as raw text. This rewrites
``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:data:``, ``:attr:`` and ``:exc:`` (also the
``~`` form, which shows the last name only, and a leading ``.``) into autorefs links,
``[`x`][full.path.of.x]``, when the target is an object the site documents; any other target (a
private helper, an undocumented module, a name that does not resolve) becomes plain code, `` `x` ``.
A trailing ``::`` (reST's literal-block marker) becomes ``:``. Run it again and nothing changes.

A name resolves as Python would from the docstring's object (its members, then its parents'
members, imports included), then as an absolute path, then as the one documented object whose path
ends with it. "Documented" is what ``mkdocs.yml``'s mkdocstrings options render from the ``:::``
lines of ``docs/api/*.md``: public members (filter ``!^_``) with a docstring, imported names only
when the module exports them. A line pushed past 120 columns is broken at a space.

    python scripts/docs_roles.py            # rewrite timestep_embed/ in place, list the changes
    python scripts/docs_roles.py --check    # change nothing; exit 1 while a role is left

Needs griffe (the ``docs`` extra).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "timestep_embed"
WIDTH = 120  # ruff's line-length
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`(~?)(\.?)([\w.]+)`")
LITERAL_MARK = re.compile(r"(\S)::$")  # "Python use::" before an indented block


def documented_paths(package, api_dir: Path = ROOT / "docs" / "api") -> set[str]:
    """The paths the site has an anchor for: every object rendered under a ``::: module`` line."""
    paths: set[str] = set()

    def visit(obj) -> None:
        paths.update({obj.path, obj.canonical_path})
        if obj.is_alias or not (obj.is_module or obj.is_class):
            return
        for member in obj.members.values():
            if member.name.startswith("_") or (member.is_alias and not member.is_public):
                continue  # private, or an import the module does not export
            target = _final(member)
            if target is not None and not target.is_module and target.has_docstrings:
                visit(member)

    for page in sorted(api_dir.glob("*.md")):
        for target in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M):
            visit(package.modules_collection[target])
    return paths


def _final(obj):
    """The object an alias points to (None when it leaves the package or does not resolve)."""
    try:
        return obj.final_target if obj.is_alias else obj
    except Exception:  # griffe's AliasResolutionError / CyclicAliasError: an external or broken import
        return None


def _member_path(start, parts: list[str]):
    obj = start
    for part in parts:
        obj = _final(obj)
        if obj is None or part not in obj.members:
            return None
        obj = obj.members[part]
    return _final(obj)


def resolve(name: str, scope, package, documented: set[str]) -> str | None:
    """The path to link for ``name`` in the docstring of ``scope``, or None when the site lacks it.

    The path is the shortest public one (``timestep_embed.Convention`` rather than
    ``timestep_embed.conventions.Convention``); mkdocstrings registers those aliases too.
    """
    parts = name.split(".")
    owner = scope
    while owner is not None and parts[0] not in owner.members:  # Python's lookup: own members, then parents'
        owner = owner.parent
    if owner is not None:
        found = _member_path(owner, parts)
    elif parts[0] == package.name:
        found = _member_path(package, parts[1:])
    else:  # not in scope: the one documented object whose path ends with the name
        ends = [path for path in documented if path.endswith("." + name)]
        found = package.modules_collection[ends[0]] if len(ends) == 1 else None
    if found is None or found.canonical_path not in documented:
        return None
    public = [path for path, alias in found.aliases.items() if alias.is_public]
    return min([found.canonical_path, *public], key=lambda path: (len(path), path))


def _outside(line: str, i: int) -> bool:
    """True when column ``i`` is neither inside backticks nor inside a ``[...][...]`` link."""
    before = line[:i]
    return before.count("`") % 2 == 0 and before.count("[") == before.count("]")


def _split(line: str, base: int | None = None) -> tuple[str, str, int] | None:
    """``(head, rest, indent of rest)`` for a line over WIDTH, cut at its last space outside code and links.

    A line indented deeper than ``base`` (the docstring's own indent; None: a continuation line) may
    start an Args-style item or a list item, whose rest goes deeper."""
    indent = len(line) - len(line.lstrip())
    cuts = [i for i, ch in enumerate(line[: WIDTH + 1]) if ch == " " and i > indent + 3 and _outside(line, i)]
    if len(line) <= WIDTH or not cuts:
        return None
    item = base is not None and indent > base and re.match(r"\s*(?:\*{0,2}\w+(?: \([^)]*\))?: |([-*]) )", line)
    extra = 0 if not item else 2 if item.group(1) else 4
    return line[: cuts[-1]], line[cuts[-1] + 1 :], indent + extra


def _continues(line: str, indent: int) -> bool:
    """True when ``line`` carries on the paragraph (or item) whose next line is indented ``indent``."""
    body = line.lstrip()
    return (
        bool(body)
        and len(line) - len(body) == indent
        and not re.match(r'([-*|>] |\d+\. |"""|[A-Z]\w*( \w+)?:$)', body)  # a list, a table, a section
    )


def convert_docstring(text: str, scope, package, documented: set[str]) -> tuple[str, list[str]]:
    """``text`` (docstring lines as in the file) with its roles rewritten, and one note per change."""
    notes: list[str] = []

    def replace(match: re.Match) -> str:
        short, _dot, name = match.groups()
        target = resolve(name, scope, package, documented)
        notes.append(f"{match.group(0)} -> {target or 'plain code'}")
        if target is None:
            return f"`{name}`"
        shown = name.rsplit(".", 1)[-1] if short else name
        return f"[`{shown}`][{target}]"

    out: list[str] = []
    carry: tuple[str, int] | None = None  # (words pushed off a long line, the indent they go to)
    indent = len(text) - len(text.lstrip(" "))  # the docstring's own: that of its opening quotes
    for line in text.split("\n"):
        new, base = ROLE.sub(replace, line), indent
        if LITERAL_MARK.search(new):
            notes.append("a trailing '::' -> ':'")
            new = LITERAL_MARK.sub(r"\1:", new)
        if carry and _continues(new, carry[1]):
            new, base = " " * carry[1] + carry[0] + " " + new.lstrip(), None
        elif carry:
            out.extend(_wrap(" " * carry[1] + carry[0]))
        carry = None
        split = _split(new, base) if new != line else None
        if split:
            out.append(split[0])
            carry = split[1:]
        else:
            out.append(new)
    if carry:
        out.extend(_wrap(" " * carry[1] + carry[0]))
    return "\n".join(out), notes


def _wrap(line: str) -> list[str]:
    """A continuation line broken until every piece fits."""
    lines = []
    while split := _split(line):
        lines.append(split[0])
        line = " " * split[2] + split[1]
    return [*lines, line]


def docstring_owners(obj):
    """Every object of the package that owns a docstring, the modules' own included."""
    if obj.is_alias:
        return
    if obj.docstring is not None:
        yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from docstring_owners(member)


def convert_package(root: Path = ROOT, name: str = PACKAGE, write: bool = True) -> list[str]:
    """Convert every docstring of the package ``root/name``; returns one ``file:line: note`` per change."""
    import griffe  # the docs extra; only this tool needs it

    package = griffe.load(name, search_paths=[str(root)])
    documented = documented_paths(package, root / "docs" / "api")
    by_file: dict[Path, list] = {}
    for obj in docstring_owners(package):
        by_file.setdefault(Path(obj.docstring.parent.filepath), []).append(obj)
    report = []
    for path, owners in sorted(by_file.items()):
        old = path.read_text()
        lines = old.split("\n")
        for obj in sorted(owners, key=lambda o: -o.docstring.lineno):  # bottom up: line numbers stay valid
            first, last = obj.docstring.lineno - 1, obj.docstring.endlineno
            new, notes = convert_docstring("\n".join(lines[first:last]), obj, package, documented)
            lines[first:last] = new.split("\n")
            report += [f"{path.relative_to(root)}:{obj.docstring.lineno}: {note}" for note in notes]
        if write and "\n".join(lines) != old:
            path.write_text("\n".join(lines))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 while a role is left")
    args = parser.parse_args(argv)
    try:
        report = convert_package(write=not args.check)
    except ModuleNotFoundError as err:
        print(f"docs_roles: {err.name} is missing: pip install -e '.[docs]'", file=sys.stderr)
        return 2
    print("\n".join(report) or "no roles left")
    return 1 if args.check and report else 0


if __name__ == "__main__":
    raise SystemExit(main())
