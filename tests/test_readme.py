"""The README's API examples run as written (the core and the modules sections)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SECTIONS = ("## The sinusoidal core", "## Modules that plug into diffusion UNets")


def section_code(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    body = text[start:] if end < 0 else text[start:end]
    return "\n\n".join(re.findall(r"```python\n(.*?)```", body, re.S))


@pytest.mark.parametrize("title", SECTIONS)
def test_readme_examples_run(title, tmp_path):
    code = section_code(title)
    if title == SECTIONS[1]:
        code = "import torch\nfrom timestep_embed import sinusoidal_embedding\n" + code
    else:  # the intro example above the section defines `t`
        intro = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
        code = intro + "\n" + code
    assert code.strip(), f"no python blocks under {title!r}"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
