"""The Python code blocks of the README and of every page in docs/ run as written, one script a page."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page: Path) -> str:
    return "\n\n".join(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path):
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", python_blocks(page)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_page_is_linked_from_the_readme_or_from_a_page_it_links():
    readme = (ROOT / "README.md").read_text()
    pages = [p for p in PAGES[1:] if p.name != "index.md"]  # index.md: the landing page of the docs site
    linked = {p.name for p in pages if f"docs/{p.name}" in readme}
    text = readme + "".join((ROOT / "docs" / name).read_text() for name in linked)
    assert [p.name for p in pages if p.name not in text] == []
