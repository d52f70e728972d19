"""The docs site builds with --strict and shows no raw Sphinx roles; scripts/docs_roles.py converts them."""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RAW_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):`?")
DOCS_TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "griffe")
needs_docs = pytest.mark.skipif(
    any(importlib.util.find_spec(name.split(".")[0]) is None for name in DOCS_TOOLS),
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)


def docs_roles():
    spec = importlib.util.spec_from_file_location("docs_roles", ROOT / "scripts" / "docs_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_docs
def test_site_builds_strict_and_shows_no_raw_roles(tmp_path):
    site = tmp_path / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]  # no --quiet: it hides the
    # warnings that --strict counts, and the build passes with them
    result = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert len(list(site.glob("api/*/index.html"))) == len(list((ROOT / "docs" / "api").glob("*.md")))
    found = []
    for page in pages:
        text = re.sub(r"<(pre|script)\b.*?</\1>", "", page.read_text(), flags=re.S)  # code shows what it shows
        found += [f"{page.relative_to(site)}: {m.group(0)}" for m in RAW_ROLE.finditer(text)]
        found += [f"{page.relative_to(site)}: a backslash before |" for _ in re.finditer(r"\\\|", text)]
        found += [f"{page.relative_to(site)}: a paragraph ending in ::" for _ in re.finditer(r"::</p>", text)]
    assert found == []
    assert "autorefs-internal" in (site / "api" / "core" / "index.html").read_text()  # the references link


@needs_docs
def test_the_package_docstrings_hold_no_roles():
    assert docs_roles().convert_package(write=False) == []


FAKE = '''
"""A module: :class:`Thing` and :func:`~rolespkg.mod.helper`; :func:`_private` and :data:`LIMIT`; see
:mod:`rolespkg.mod` and :meth:`Thing.run`. Use::

    helper()
"""

LIMIT = 3


def helper():
    """Calls :meth:`.run` and :func:`helper`, which is a function with a long name that pushes this line LONG."""


def _private():
    """Hidden."""


class Thing:
    """A thing; :meth:`run` runs it.

    Args:
        x: the input, a value passed on to :func:`helper` and to :meth:`run`, at a length that needs a wrapped line.
    """

    def run(self):
        """Run, see :class:`Thing`."""
'''


@pytest.mark.skipif(importlib.util.find_spec("griffe") is None, reason="griffe comes with the docs extra")
def test_converter_links_what_the_site_renders_and_is_idempotent(tmp_path):
    (tmp_path / "rolespkg").mkdir()
    (tmp_path / "rolespkg" / "__init__.py").write_text('"""The package."""\n')
    source = tmp_path / "rolespkg" / "mod.py"
    source.write_text(textwrap.dedent(FAKE).lstrip().replace("LONG", "over the limit of 120"))
    (tmp_path / "docs" / "api").mkdir(parents=True)
    (tmp_path / "docs" / "api" / "mod.md").write_text("# Mod\n\n::: rolespkg.mod\n")
    convert = docs_roles().convert_package

    report = convert(tmp_path, "rolespkg")
    text = source.read_text()
    assert len(report) == 13 and not RAW_ROLE.search(text)
    assert "[`Thing`][rolespkg.mod.Thing] and [`helper`][rolespkg.mod.helper]" in text  # "~": the last name
    assert "`_private` and `LIMIT`" in text  # private, and no docstring: not on the site, so plain code
    assert "[`rolespkg.mod`][rolespkg.mod]" in text and "[`Thing.run`][rolespkg.mod.Thing.run]" in text
    assert "Calls [`run`][rolespkg.mod.Thing.run]" in text  # ".run": the one documented object of that name
    assert "[`run`][rolespkg.mod.Thing.run] runs it" in text  # a method from its class's docstring
    assert "Use:\n\n    helper()" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "at a\n            length that needs" in text  # an Args item goes on deeper
    assert "with a long name\n    that pushes" in text  # a summary line goes on at the docstring's indent
    compile(text, str(source), "exec")
    assert convert(tmp_path, "rolespkg") == [] and source.read_text() == text  # a second run changes nothing
