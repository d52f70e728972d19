"""Every Python code block of the README and of docs/ runs pasted alone; the README's links work off the repository."""

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO = "https://github.com/timestep-embed/timestep_embed"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


BLOCKS = [(page, i, block) for page in PAGES for i, block in enumerate(python_blocks(page), 1)]


def run_alone(block: str, folder: Path) -> subprocess.CompletedProcess:
    """``block`` in a fresh interpreter in ``folder``, with a cache of its own."""
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(folder / "cache")}
    return subprocess.run([sys.executable, "-c", block], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def block_runs(request, tmp_path_factory):
    """The selected blocks, run two at a time (each spends seconds importing torch and diffusers on one core):
    ``{(page name, number): Future of the finished process}``."""
    selected = [item.callspec.params for item in request.session.items
                if getattr(item, "originalname", None) == "test_code_block_runs_alone"]  # fmt: skip
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {(p["page"].name, p["number"]): pool.submit(run_alone, p["block"], tmp_path_factory.mktemp("block"))
               for p in selected}  # fmt: skip


@pytest.mark.parametrize(("page", "number", "block"), BLOCKS, ids=[f"{p.name}-{i}" for p, i, _ in BLOCKS])
def test_code_block_runs_alone(page, number, block, block_runs):
    result = block_runs[(page.name, number)].result()
    assert result.returncode == 0, f"{page.name}, python block {number}:\n{result.stderr[-3000:]}"


def test_every_page_is_linked_from_the_readme_or_from_a_page_it_links():
    readme = (ROOT / "README.md").read_text()
    pages = [p for p in PAGES[1:] if p.name != "index.md"]  # index.md: the landing page of the docs site
    linked = {p.name for p in pages if f"docs/{p.name}" in readme}
    text = readme + "".join((ROOT / "docs" / name).read_text() for name in linked)
    assert [p.name for p in pages if p.name not in text] == []


def github_slugs(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_links_are_absolute_and_point_at_files_that_exist():
    """The README is also the package index's page, where a relative link leads nowhere."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links and [link for link in links if not link.startswith("https://")] == []
    for link in links:
        if link.startswith(f"{REPO}/blob/main/"):
            path, _, anchor = link.removeprefix(f"{REPO}/blob/main/").partition("#")
            assert (ROOT / path).is_file(), link
            assert not anchor or anchor in github_slugs(ROOT / path), link


def test_one_repository_url_everywhere():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert all(url.startswith(REPO) for url in urls.values())
    assert f"repo_url: {REPO}\n" in (ROOT / "mkdocs.yml").read_text()
    assert f"{REPO}#readme" in (ROOT / "docs" / "index.md").read_text()
