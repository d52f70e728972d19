"""The porting scripts (the port-bug zoo, diffusers' coverage) run end to end on a small selection."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("diffusers")


def test_port_bug_zoo_smoke(tmp_path):
    cmd = [sys.executable, str(ROOT / "scripts" / "port_bug_zoo.py"), "--bugs", "halves_swapped", "scaled_twice",
           "--families", "stable_diffusion", "flux_dev"]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert "| halves_swapped |" in result.stdout and "0 false alarms" in result.stdout
    assert "detected with the expected stage and cause" in result.stdout


def test_diffusers_coverage_smoke(tmp_path):
    out = tmp_path / "coverage.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "diffusers_coverage.py"), "--classes", "SD3Transformer2DModel",
           "TransformerTemporalModel", "--json", str(out)]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("1 / 2 diffusers model classes with a time argument covered")
    rows = {r["class"]: r for r in json.loads(out.read_text())}
    assert rows["SD3Transformer2DModel"]["from_state_dict"] == "ok"
    assert rows["TransformerTemporalModel"]["trace"].startswith("no time path")
