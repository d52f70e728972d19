"""A run that cannot start leaves its folder as it was, a run that diverges stops with one line, Ctrl-C to a run in
several processes saves it and says so in one line, and a folder that cannot be written is found before the work that
would fill it."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from timestep_embed import cli, files
from timestep_embed.cli import main
from timestep_embed.ddpm import ConfigError, RunConfig, UNet, run_training, sample_run
from timestep_embed.ddpm import trained as trained_module
from timestep_embed.ddpm.checkpoint import load_checkpoint, read_metadata

from .test_faults import FAST, SMOKE, fast


class FailsAtTheFirstStep(nn.Module):
    """A time embedder that cannot embed what the training gives it, found at the first forward pass."""

    def forward(self, t):
        raise ValueError("this time embedder cannot embed t")


def state(folder: Path):
    """Everything in ``folder`` (names and bytes), or None when it does not exist."""
    if not folder.exists():
        return None
    return sorted((p.relative_to(folder).as_posix(), p.read_bytes() if p.is_file() else b"") for p in folder.rglob("*"))


# ---- 1: every failure before the first training step
FAILURES = [  # (overrides, time embedder, flags, error, message)
    (["model.image_size=32"], None, {}, ConfigError, "model.image_size = 32, but the data's images are 1x28x28"),
    (["model.in_channels=3"], None, {}, ConfigError, "model.in_channels = 3"),
    (["diffusion.beta_end=1.0"], None, {}, ConfigError, r"diffusion.beta_end = 1.0: expected \(0, 1\)"),
    (["model.time_embedding={num_timesteps: 100000000000}"], None, {}, ValueError, "model.time_embedding.*3.2 TB"),
    ([], FailsAtTheFirstStep(), {}, ValueError, "cannot embed t"),
    ([], None, {"resume": True, "overwrite": True}, ValueError, "contradict each other"),
]


def test_a_start_that_fails_before_its_first_step_leaves_the_folder_as_it_was(tmp_path, capsys):
    new, empty, previous = tmp_path / "new", tmp_path / "empty", tmp_path / "previous"
    empty.mkdir()
    run_training(SMOKE, previous, overrides=FAST, progress=False)  # a finished run, snapshots and samples included
    for folder, overwrite in ((new, False), (empty, False), (previous, True)):
        before = state(folder)
        for overrides, embedder, flags, error, message in FAILURES:
            options = {"overwrite": overwrite, **flags}
            with pytest.raises(error, match=message):
                run_training(SMOKE, folder, embedder, fast(*overrides), progress=False, **options)
            assert state(folder) == before, (folder.name, overrides, options)
    # the same through the command line, then the command with its mistake fixed runs
    assert main(["train", "--config", SMOKE, "--out-dir", str(new), "--quiet", *fast("model.image_size=32")]) == 2
    assert "model.image_size = 32" in capsys.readouterr().err and not new.exists()
    assert main(["train", "--config", SMOKE, "--out-dir", str(new), "--quiet", *FAST]) == 0
    assert run_training(SMOKE, empty, overrides=FAST, progress=False)["finished"]


def test_an_overwrite_that_fails_at_its_first_step_puts_the_previous_run_back(tmp_path):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=FAST, progress=False)
    before = state(run)
    other = fast("train.steps=6", "train.snapshot_every=3")
    with pytest.raises(ValueError, match="cannot embed t"):  # config.yaml and log.jsonl were written by then
        run_training(SMOKE, run, FailsAtTheFirstStep(), other, overwrite=True, progress=False)
    assert state(run) == before
    metrics = run_training(SMOKE, run, overrides=other, overwrite=True, progress=False)
    assert metrics["train_steps"] == 6 and not (run / ".overwritten.tmp").exists()
    snapshots = sorted(p.name for p in run.glob("snapshot_*.png"))  # the previous run's went once a step was trained
    assert snapshots == ["snapshot_000003.png", "snapshot_000006.png"]


class InterruptedAtTheFirstStep(nn.Module):
    """Ctrl-C while the first step runs (a long torch.compile, say)."""

    def forward(self, t):
        raise KeyboardInterrupt


def test_ctrl_c_before_the_first_step_of_an_overwrite_puts_the_previous_run_back(tmp_path):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=FAST, progress=False)
    before = state(run)
    with pytest.raises(KeyboardInterrupt):  # the loop stops and saves at a step; before the first, nothing to keep
        run_training(SMOKE, run, InterruptedAtTheFirstStep(), fast("train.lr=5e-4"), overwrite=True, progress=False)
    assert state(run) == before
    with pytest.raises(KeyboardInterrupt):
        run_training(SMOKE, tmp_path / "new", InterruptedAtTheFirstStep(), FAST, progress=False)
    assert not (tmp_path / "new").exists()


# ---- 2: a diverging run
def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_finite_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    overrides = fast("train.steps=50", "train.lr=1e10", "train.checkpoint_minutes=1e-9")  # a checkpoint every step
    assert main(["train", "--config", SMOKE, "--out-dir", str(run), "--quiet", *overrides]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(r"timestep-embed train: error: the loss is .* at step \d+: the run diverged; lower train.lr", err)
    diverged = int(re.search(r"at step (\d+)", err)[1])
    tensors, meta = load_checkpoint(run / "checkpoint.safetensors")
    assert 1 <= meta["step"] < diverged
    assert all(torch.isfinite(v).all() for k, v in tensors.items() if k.startswith(("model.", "ema.")))
    assert not (run / "samples.npy").exists() and not (run / "metrics.json").exists()  # no noise sampled or scored


# ---- 10: Ctrl-C to a run in two processes
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_ctrl_c_to_a_two_process_run_saves_it_and_the_launcher_says_one_line(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    overrides = fast("train.steps=100000", "train.batch_size=8", "train.snapshot_every=0")
    cmd = [sys.executable, "-m", "timestep_embed", "train", "--nproc-per-node", "2", "--config", SMOKE, "--out-dir",
           str(run), "--quiet", *overrides]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    log, deadline = run / "log.jsonl", time.time() + 120
    while proc.poll() is None and time.time() < deadline and not (log.is_file() and log.read_text().count("\n") >= 2):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the launcher and its processes alike
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err and "death signal" not in err, err[-3000:]
    assert err.count("timestep-embed train: interrupted") == 1 and "continue with --resume" in err
    logged = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert read_metadata(run / "checkpoint.safetensors")["step"] >= logged[-1] >= 5  # rank 0 saved where it stopped


# ---- 11: a folder that cannot be written
def test_a_read_only_output_folder_is_found_before_the_work(tmp_path, monkeypatch, capsys):
    cfg = RunConfig.load(SMOKE)
    folder = UNet(cfg.model).save_pretrained(tmp_path / "exp", run_config=cfg)

    def read_only(*args, **kwargs):  # what a read-only file system answers (also to root, unlike chmod)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    monkeypatch.setattr(trained_module, "generate", lambda *a, **k: pytest.fail("sampled before the check"))
    with pytest.raises(OSError, match=r"samples' folder '.*exp' cannot be written \(Read-only file system\)"):
        sample_run(folder, ["sample.num_samples=2"], device="cpu", progress=False)
    assert main(["sample", str(folder)]) == 2
    assert "cannot be written (Read-only file system)" in capsys.readouterr().err
    with pytest.raises(OSError, match=r"out_dir '.*run' cannot be written"):
        run_training(SMOKE, tmp_path / "run", overrides=FAST, progress=False)
    assert not (tmp_path / "run").exists()
    assert main(["evaluate", str(tmp_path / "none.npy"), "--out", str(folder / "m.json")]) == 2
    assert "--out's folder" in capsys.readouterr().err
    monkeypatch.setattr(cli, "run_comparison", lambda *a, **k: pytest.fail("compared before the check"))
    assert main(["compare", "--out", str(tmp_path / "cmp"), "-n", "4"]) == 2
    assert "--out" in capsys.readouterr().err
