"""Run folders survive concurrent runs, kills, resumes and mistakes; every failure is one line on stderr.

Each test plants one fault of a hostile user (two runs on one folder, a kill during a write, a full
disk, a resume of a finished run, an edited config...) and checks that nothing is lost or silently wrong.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from timestep_embed import TimestepEmbedder, files
from timestep_embed.cli import main
from timestep_embed.ddpm import (
    CheckpointError,
    ClassifierConfig,
    ConfigError,
    UNet,
    UNetConfig,
    load_classifier,
    run_training,
)
from timestep_embed.ddpm import train as train_module
from timestep_embed.ddpm.checkpoint import load_checkpoint, save_checkpoint
from timestep_embed.ddpm.runtime import signals_held

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
FAST = ["eval.enabled=false", "sample.num_samples=4", "sample.batch_size=4", "sample.steps=3", "train.bf16=false",
        "train.threads=1", "train.steps=4", "train.snapshot_every=2"]  # fmt: skip


def fast(*extra: str) -> list[str]:
    """FAST with ``extra`` overrides in place of its own for the same keys (a key may be given once)."""
    keys = {e.partition("=")[0] for e in extra}
    return [o for o in FAST if o.partition("=")[0] not in keys] + list(extra)


def finished_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=FAST, progress=False)
    return run


def test_a_live_process_holds_the_folder_and_a_dead_ones_lock_file_is_no_obstacle(tmp_path):
    run = tmp_path / "run"
    with files.hold(run / ".lock", "the run"):  # this very process: alive
        with pytest.raises(files.Busy, match=f"run is in use by process {os.getpid()}"):
            run_training(SMOKE, run, overrides=FAST, progress=False)
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing written
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run / ".lock").write_text(f"process {dead.stdout.strip()} on {os.uname().nodename}")  # left by a kill
    assert run_training(SMOKE, run, overrides=FAST, progress=False)["finished"]
    assert (run / ".lock").is_file()  # never deleted: a deleted lock file would let two processes lock two files


def endless_run(run: Path) -> list[str]:
    """A training command on ``run`` that holds its folder until it is stopped (SIGTERM: exit 130, saved)."""
    return [sys.executable, "-m", "timestep_embed", "train", "--config", SMOKE, "--out-dir", str(run), "--quiet",
            *fast("train.steps=100000", "train.log_every=1", "train.snapshot_every=0")]  # fmt: skip


def wait_for_steps(proc: subprocess.Popen, run: Path) -> None:
    """Until ``proc`` has logged two steps (it holds the lock and its SIGTERM handler is in place)."""
    deadline = time.time() + 120
    while not ((run / "log.jsonl").is_file() and (run / "log.jsonl").read_text().count("\n") >= 2):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()  # an endless run: its stderr can be read only once it has ended
            pytest.fail(f"training did not start: {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)


def stop_and_check_saved(proc: subprocess.Popen, run: Path) -> str:
    """SIGTERM (as torchrun stops its workers): exit 130, the checkpoint saved, a log of one run. Its stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # one run's log, no line of another
    assert (run / "checkpoint.safetensors").is_file()
    return err


def test_two_starts_on_a_folder_with_a_stale_lock_admit_exactly_one(tmp_path):
    """The lock is the operating system's (it ends with its process), so there is no stale lock to take
    over, and no window in which two processes both take it over and one deletes the other's. Neither
    run ends by itself, so the refused one is refused by the other's lock, however slow either starts."""
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("process 999999 on a host that is gone")
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(endless_run(run), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for _ in "ab"]  # fmt: skip
    deadline = time.time() + 120
    while all(p.poll() is None for p in procs):
        if time.time() > deadline:
            for p in procs:
                p.kill()
            pytest.fail("neither start was refused")
        time.sleep(0.1)
    refused = next(p for p in procs if p.poll() is not None)
    err = refused.communicate()[1]
    assert refused.returncode == 2 and "in use by process" in err and "Traceback" not in err, err[-2000:]
    admitted = next(p for p in procs if p is not refused)
    wait_for_steps(admitted, run)
    stop_and_check_saved(admitted, run)


def test_two_runs_on_one_folder_the_second_is_refused(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(endless_run(run), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    wait_for_steps(first, run)
    second = subprocess.run(endless_run(run), env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "in use by process" in second.stderr and "Traceback" not in second.stderr
    stop_and_check_saved(first, run)  # the first run's folder, intact


def test_samples_are_written_atomically(tmp_path, monkeypatch):
    path = files.save_npy(tmp_path / "samples.npy", np.zeros((3, 1, 28, 28), np.float32))
    before = path.read_bytes()

    def half_then_crash(f, data):
        f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", half_then_crash)
    with pytest.raises(OSError, match="No space left"):
        files.save_npy(path, np.ones((3, 1, 28, 28), np.float32))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["samples.npy"]


def test_files_are_written_with_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = files.atomic_write_bytes(tmp_path / "metrics.json", b"{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_resume_of_a_finished_run_trains_nothing_and_keeps_everything(tmp_path, caplog):
    run = finished_run(tmp_path)
    files_before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with caplog.at_level("INFO", logger="timestep_embed"):
        metrics = run_training(SMOKE, run, overrides=FAST, progress=False, resume=True)
    assert metrics["train_steps"] == 4 and "nothing left to do" in caplog.text
    for name in ("checkpoint.safetensors", "samples.npy", "log.jsonl"):
        assert (run / name).read_bytes() == files_before[name], name


def test_the_log_holds_every_step_once_at_the_end_and_across_a_stop(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    over = fast("train.steps=7", "train.log_every=3", "train.snapshot_every=0")
    run_training(SMOKE, straight, overrides=over, progress=False)
    run_training(SMOKE, stopped, overrides=over, progress=False, callback=lambda n, *_: n >= 5)
    run_training(SMOKE, stopped, overrides=over, progress=False, resume=True)
    logged = {run.name: [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()] for run in
              (straight, stopped)}  # fmt: skip
    assert [r["step"] for r in logged["straight"]] == [1, 3, 6, 7]  # the last line: the steps after 6
    assert [r["step"] for r in logged["stopped"]] == [1, 3, 5, 6, 7]  # a line where it stopped, none twice
    assert logged["straight"][-1]["loss"] == logged["stopped"][-1]["loss"]  # step 7's own loss, resumed bit-exact


class _OnceAt:
    """Calls ``real``, raising KeyboardInterrupt once, at call ``n``: before the call (``after=False``) or after it."""

    def __init__(self, real, n: int, after: bool):
        self.real, self.n, self.after, self.calls = real, n, after, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.n and not self.after:
            raise KeyboardInterrupt
        out = self.real(*args, **kwargs)
        if self.calls == self.n and self.after:
            raise KeyboardInterrupt
        return out


@pytest.mark.parametrize("where", ["after the AdamW update", "before the EMA update"])
def test_ctrl_c_inside_a_step_saves_a_whole_step_and_the_resume_is_the_straight_run(tmp_path, monkeypatch, where):
    """A signal lands wherever Python is: after opt.step() but before the step is counted and averaged, the
    checkpoint finishes that step (its count and EMA), so the resumed run ends where the straight one does."""
    over = fast("train.steps=8", "train.snapshot_every=0")
    run_training(SMOKE, tmp_path / "straight", overrides=over, progress=False)
    if where == "after the AdamW update":
        make = train_module.adamw

        def interrupted_adamw(*args, **kwargs):
            opt = make(*args, **kwargs)
            opt.step = _OnceAt(opt.step, 5, after=True)
            return opt

        monkeypatch.setattr(train_module, "adamw", interrupted_adamw)
    else:
        monkeypatch.setattr(train_module, "update_ema", _OnceAt(train_module.update_ema, 5, after=False))
    stopped = run_training(SMOKE, tmp_path / "stopped", overrides=over, progress=False)
    assert stopped["interrupted"] and stopped["train_steps"] == 5
    monkeypatch.undo()
    run_training(SMOKE, tmp_path / "stopped", overrides=over, progress=False, resume=True)
    straight, _ = load_checkpoint(tmp_path / "straight" / "checkpoint.safetensors")
    resumed, _ = load_checkpoint(tmp_path / "stopped" / "checkpoint.safetensors")
    assert straight.keys() == resumed.keys()
    assert [k for k in straight if not torch.equal(straight[k], resumed[k])] == []


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_a_signal_inside_the_adamw_update_lands_after_it(tmp_path, monkeypatch):
    """SIGINT raised inside opt.step() (between AdamW's step count and its weights, say) is held until the update
    is done: the step is whole, counted and saved, and the resumed run ends where the straight one does."""
    over = fast("train.steps=8", "train.snapshot_every=0")
    run_training(SMOKE, tmp_path / "straight", overrides=over, progress=False)
    make = train_module.adamw

    def signalled_adamw(*args, **kwargs):
        opt = make(*args, **kwargs)
        real, calls = opt.step, []

        def step(*a, **k):
            calls.append(1)
            if len(calls) == 5:
                signal.raise_signal(signal.SIGINT)  # Python's handler: KeyboardInterrupt, here unless held
            return real(*a, **k)

        opt.step = step
        return opt

    monkeypatch.setattr(train_module, "adamw", signalled_adamw)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stopped = run_training(SMOKE, tmp_path / "stopped", overrides=over, progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped["interrupted"] and stopped["train_steps"] == 5  # the fifth update made, and counted
    monkeypatch.undo()
    run_training(SMOKE, tmp_path / "stopped", overrides=over, progress=False, resume=True)
    straight, _ = load_checkpoint(tmp_path / "straight" / "checkpoint.safetensors")
    resumed, _ = load_checkpoint(tmp_path / "stopped" / "checkpoint.safetensors")
    assert [k for k in straight if not torch.equal(straight[k], resumed[k])] == []


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_held_signals_each_reach_their_handler_and_every_handler_is_put_back(monkeypatch):
    """SIGINT and SIGTERM held together: SIGINT's handler raising KeyboardInterrupt does not swallow SIGTERM, and
    both handlers are back after the block; where a handler was set outside Python (getsignal None: it could not
    be put back) nothing is held and nothing is replaced."""
    got: list[str] = []

    def on_int(signum, frame):
        got.append("INT")
        raise KeyboardInterrupt

    def on_term(signum, frame):
        got.append("TERM")

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, on_int)
        signal.signal(signal.SIGTERM, on_term)
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
                assert got == []  # held
        assert got == ["INT", "TERM"]
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == (on_int, on_term)
        real = signal.getsignal
        monkeypatch.setattr(signal, "getsignal", lambda s: None if s == signal.SIGTERM else real(s))
        with signals_held():
            assert (real(signal.SIGINT), real(signal.SIGTERM)) == (on_int, on_term)  # nothing replaced
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_resume_past_a_smaller_budget_says_so_and_shows_no_progress_past_the_end(tmp_path, caplog, capsys):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=FAST, progress=False, callback=lambda n, *_: n >= 3)
    capsys.readouterr()
    with caplog.at_level("INFO", logger="timestep_embed"):
        metrics = run_training(SMOKE, run, overrides=fast("train.steps=2"), progress=True, resume=True)
    assert metrics["train_steps"] == 3 and "step 3: the run is past its budget (train.steps = 2)" in caplog.text
    assert "train: 3/2" not in capsys.readouterr().err  # the progress lines a run prints off a terminal


def test_resume_after_an_interruption_during_sampling_does_only_what_is_missing(tmp_path):
    run = finished_run(tmp_path)
    weights = (run / "checkpoint.safetensors").read_bytes()
    (run / "samples.npy").unlink()
    (run / "metrics.json").unlink()  # as if Ctrl-C came while sampling
    metrics = run_training(SMOKE, run, overrides=FAST, progress=False, resume=True)
    assert metrics["train_steps"] == 4 and (run / "samples.npy").is_file() and (run / "metrics.json").is_file()
    assert (run / "checkpoint.safetensors").read_bytes() == weights


def test_resume_with_a_changed_budget_is_stated_and_each_step_is_logged_once(tmp_path, caplog):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=fast("train.log_every=1"), progress=False, callback=lambda n, *_: n >= 3)
    with open(run / "log.jsonl", "a") as log:  # steps logged after the checkpoint, before a kill
        log.write(json.dumps({"step": 4, "loss": 1.0}) + "\n")
    with caplog.at_level("WARNING", logger="timestep_embed"):
        over = fast("train.log_every=1", "train.steps=6")
        metrics = run_training(SMOKE, run, overrides=over, progress=False, resume=True)
    assert metrics["train_steps"] == 6 and "--resume with another budget: train.steps 4 -> 6" in caplog.text
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # the planted step 4 was dropped, then trained and logged once


@pytest.mark.parametrize("change", ["diffusion.schedule=cosine", "model.channels=[8,16]", "train.lr=0.5"])
def test_resume_that_would_train_another_model_is_refused_before_any_write(tmp_path, change):
    run = finished_run(tmp_path)
    config = (run / "config.yaml").read_bytes()
    with pytest.raises(ConfigError, match="would train another model"):
        run_training(SMOKE, run, overrides=fast(change), progress=False, resume=True)
    assert (run / "config.yaml").read_bytes() == config  # the run's own config is untouched
    # an edited config.yaml (shapes that still fit) is caught the same way on a plain --resume
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("linear", "cosine"))
    with pytest.raises(ConfigError, match=r"diffusion.schedule: 'linear' in the checkpoint, 'cosine' now"):
        run_training("mnist", run, progress=False, resume=True)


def test_a_folder_that_holds_a_run_is_refused_and_overwrite_clears_it(tmp_path):
    run = finished_run(tmp_path)
    (run / "checkpoint.safetensors").unlink()  # only config.yaml and the rest are left: still a run
    with pytest.raises(FileExistsError, match="already holds a run"):
        run_training(SMOKE, run, overrides=FAST, progress=False)
    (run / "snapshot_000999.png").write_bytes(b"old")
    (run / "grid_000998.png").write_bytes(b"old")  # 0.2's name for a snapshot
    (run / ".checkpoint.safetensors.abc123.tmp").write_bytes(b"x" * 1000)  # left by a kill mid-write
    run_training(SMOKE, run, overrides=fast("train.snapshot_every=0"), progress=False, overwrite=True)
    names = {p.name for p in run.iterdir()}
    assert not {"snapshot_000999.png", "grid_000998.png"} & names and not any(n.endswith(".tmp") for n in names)


def test_a_full_disk_is_one_line_on_stderr_and_the_run_survives(tmp_path, monkeypatch, capsys):
    run = finished_run(tmp_path)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    def full(f, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", full)
    for args in (["sample", str(run), "sample.num_samples=2", "sample.steps=2"],
                 ["train", "--config", SMOKE, "--out-dir", str(tmp_path / "new"), *FAST]):  # fmt: skip
        assert main([*args, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_missing_things_are_one_line_on_stderr(tmp_path, capsys):
    run = finished_run(tmp_path)
    for args in (["sample", str(tmp_path / "nowhere")], ["figures", "--out", str(tmp_path), "--checkpoint", "x.pt"],
                 ["evaluate", str(tmp_path / "none.npy")], ["detect", str(run / "samples.npy"), "--timesteps", "0:4"],
                 ["train", "--config", "nope"]):  # fmt: skip
        assert main([*args, "--quiet"]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    if not torch.cuda.is_available():
        assert main(["sample", str(run), "--device", "cuda", "--quiet"]) == 2
        assert "no cuda device" in capsys.readouterr().err


def test_ctrl_c_after_training_keeps_the_checkpoint_and_says_how_to_finish(tmp_path, monkeypatch, capsys):
    import timestep_embed.ddpm.train as train_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "generate", interrupted)
    args = ["train", "--config", SMOKE, "--out-dir", str(tmp_path / "run"), "--quiet", *FAST]
    assert main(args) == 130
    assert "--resume" in capsys.readouterr().err and (tmp_path / "run" / "checkpoint.safetensors").is_file()
    monkeypatch.undo()
    assert main([*args, "--resume"]) == 0 and (tmp_path / "run" / "metrics.json").is_file()


def test_the_cached_evaluator_is_checked_and_retrained_when_its_file_changed(tmp_path, caplog):
    config = ClassifierConfig(width=2, epochs=1, feature_dim=8, batch_size=256, negatives=4, max_train=512)
    model, info = load_classifier("builtin", config, tmp_path)
    path = Path(info["cache_file"])
    tensors, meta = load_checkpoint(path)
    tensors = {k: v + 1 if v.is_floating_point() else v for k, v in tensors.items()}  # someone else's weights
    save_checkpoint(path, tensors, meta)
    with caplog.at_level("WARNING", logger="timestep_embed"):
        again, info2 = load_classifier("builtin", config, tmp_path)
    assert "not trusted" in caplog.text and not info2["cached"]
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert load_classifier("builtin", config, tmp_path)[1]["cached"]  # the rewritten file is trusted


def test_resume_redoes_exactly_what_is_missing_or_changed(tmp_path, caplog):
    run = finished_run(tmp_path)
    weights = (run / "checkpoint.safetensors").read_bytes()
    (run / "samples.npy").unlink()  # samples missing: drawn again, the checkpoint untouched
    with caplog.at_level("INFO", logger="timestep_embed"):
        run_training(SMOKE, run, overrides=FAST, progress=False, resume=True)
    assert "nothing left to do" not in caplog.text and np.load(run / "samples.npy").shape[0] == 4
    assert (run / "checkpoint.safetensors").read_bytes() == weights
    # another sample count on a resume: new samples, and config.yaml and metrics.json say so
    metrics = run_training(SMOKE, run, overrides=fast("sample.num_samples=3", "sample.batch_size=3"), progress=False,
                           resume=True)  # fmt: skip
    assert np.load(run / "samples.npy").shape[0] == 3 and metrics["config"]["sample"]["num_samples"] == 3
    assert "num_samples: 3" in (run / "config.yaml").read_text()
    assert json.loads((run / "metrics.json").read_text())["config"]["sample"]["num_samples"] == 3
    samples = (run / "samples.npy").read_bytes()
    (run / "loss_curve.png").unlink()  # only the plot is missing: redrawn, the samples kept
    run_training(SMOKE, run, overrides=fast("sample.num_samples=3", "sample.batch_size=3"), progress=False, resume=True)
    assert (run / "loss_curve.png").is_file() and (run / "samples.npy").read_bytes() == samples


def test_a_kill_right_after_resume_keeps_the_log(tmp_path):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=fast("train.log_every=1"), progress=False, callback=lambda n, *_: n >= 3)
    before = (run / "log.jsonl").read_text()
    assert [json.loads(line)["step"] for line in before.splitlines()] == [1, 2, 3]
    code = (  # resume, then die at once (os._exit: no cleanup, no flush), as a SIGKILL would
        "import os, sys; from timestep_embed.ddpm import run_training\n"
        f"run_training({SMOKE!r}, {str(run)!r}, overrides=sys.argv[1:], progress=False, resume=True, "
        "callback=lambda *a: os._exit(9))"
    )
    proc = subprocess.run([sys.executable, "-c", code, *fast("train.log_every=1")], capture_output=True, timeout=120)
    assert proc.returncode == 9, proc.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()]
    assert steps[:3] == [1, 2, 3]  # the history before the kill is all there


def test_an_empty_or_current_out_dir_is_never_cleared(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("my: own file\n")
    (tmp_path / "samples.npy").write_bytes(b"mine")
    for out in ("", "."):
        assert main(["train", "--config", SMOKE, "--out-dir", out, "--overwrite", "--quiet", *FAST]) == 2
        assert "out_dir" in capsys.readouterr().err
    assert (tmp_path / "config.yaml").read_text() == "my: own file\n" and (
        tmp_path / "samples.npy"
    ).read_bytes() == b"mine"
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("not: a run\n")
    with pytest.raises(FileExistsError, match="no run of timestep-embed"):
        run_training(SMOKE, folder, overrides=FAST, progress=False, overwrite=True)
    assert (folder / "config.yaml").read_text() == "not: a run\n"


def test_export_into_the_run_folder_is_refused(tmp_path, capsys):
    run = finished_run(tmp_path)
    assert main(["export", str(run), "--out", str(run), "--quiet"]) == 2
    assert "is a run folder" in capsys.readouterr().err
    assert not (run / "config.json").exists() and not (run / "model.safetensors").exists()


def test_raw_and_ema_samples_get_their_own_names_and_one_writer_wins(tmp_path, monkeypatch):
    from timestep_embed.ddpm import sample_run
    from timestep_embed.ddpm import trained as trained_module

    run = finished_run(tmp_path)
    ema, _ = sample_run(run, ["sample.num_samples=2", "sample.steps=2"], progress=False)
    raw, _ = sample_run(run, ["sample.num_samples=2", "sample.steps=2"], raw=True, progress=False)
    assert ema.name == "samples-ddpm-2-seed0.npy" and raw.name == "samples-ddpm-2-seed0-raw.npy"
    real = trained_module.generate

    def another_sampling_finishes_first(model, cfg, rt, progress=False):
        x = real(model, cfg, rt, progress)
        files.save_npy(run / "samples-ddpm-3-seed0.npy", np.zeros(1))  # the other process, done meanwhile
        return x

    monkeypatch.setattr(trained_module, "generate", another_sampling_finishes_first)
    with pytest.raises(FileExistsError, match="another process wrote it first"):
        sample_run(run, ["sample.num_samples=2", "sample.steps=3"], progress=False)
    assert np.load(run / "samples-ddpm-3-seed0.npy").shape == (1,)  # the winner's file, not replaced


def test_progress_in_a_log_file_is_a_few_lines(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "timestep_embed", "train", "--config", SMOKE, "--out-dir", str(tmp_path / "r"),
           *fast("train.steps=30", "sample.steps=20", "train.log_every=1", "train.snapshot_every=0")]  # fmt: skip
    with open(tmp_path / "log", "w") as log:  # stdout and stderr to a file, as `> log 2>&1`
        assert subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300).returncode == 0
    text = (tmp_path / "log").read_text()
    assert "\r" not in text and len(text) < 2000 and text.count("\n") < 20, text


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_flags_work_before_and_after_the_subcommand(tmp_path, capsys, where):
    run = finished_run(tmp_path)
    args = ["sample", str(run), "sample.num_samples=2", "sample.steps=2"]
    assert main(["--quiet", *args] if where == "before" else [*args, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    missing = ["sample", str(tmp_path / "nowhere")]
    with pytest.raises(FileNotFoundError):  # -v shows the traceback of a user error instead of one line
        main(["-v", *missing] if where == "before" else [*missing, "-v"])


def test_evaluate_a_run_folder_uses_the_runs_own_evaluator(tmp_path, capsys):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=fast("eval.enabled=true"), progress=False)
    assert main(["evaluate", str(run), "--out", str(tmp_path / "m.json")]) == 0
    stored = json.loads((run / "metrics.json").read_text())
    again = json.loads((tmp_path / "m.json").read_text())
    assert again["fd"] == pytest.approx(stored["samplings"][0]["fd"])  # samples.npy: the run's first sampling
    assert again["classifier_cache_file"] == stored["classifier_cache_file"]
    before = (run / "metrics.json").read_bytes()
    assert main(["evaluate", str(run), "--out", str(run / "metrics.json")]) == 2  # the run's own three samplings
    assert "the run's own metrics.json" in capsys.readouterr().err and (run / "metrics.json").read_bytes() == before


def test_runs_of_the_previous_version_sample_and_resume(tmp_path):
    """0.2 stored train.job_minutes and train.threads: auto, which are gone: such runs still load."""
    run = finished_run(tmp_path)
    tensors, meta = load_checkpoint(run / "checkpoint.safetensors")
    meta["config"]["train"].update(job_minutes=12.0, threads="auto")
    save_checkpoint(run / "checkpoint.safetensors", tensors, meta)
    text = (run / "config.yaml").read_text().replace("threads: 1", "threads: auto\n  job_minutes: 12.0")
    (run / "config.yaml").write_text(text)
    (tmp_path / "old.yaml").write_text(text)
    assert main(["sample", str(run), "sample.num_samples=2", "sample.steps=2", "--quiet"]) == 0
    assert run_training("mnist", run, progress=False, resume=True)["train_steps"] == 4
    with pytest.raises(ConfigError, match="unknown key 'train.job_minutes'"):  # a config of one's own stays strict
        run_training(tmp_path / "old.yaml", tmp_path / "new", progress=False)


# ------------------------------------------------------------------ small hostile files: refused before allocating


def test_a_small_npy_whose_header_claims_a_huge_array_is_refused(tmp_path):
    path = tmp_path / "samples.npy"
    with open(path, "wb") as f:  # a 128-byte header that claims 10^13 x 3 float32 (120 TB), and no data
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**13, 3)})
    assert path.stat().st_size <= 192
    with pytest.raises(
        ValueError, match=r"samples.npy is not a plain .npy array \(its header describes \(10000000000000, 3\)"
    ):
        files.load_npy(path)
    with pytest.raises(ValueError, match="is not a plain .npy array"):
        files.load_npy(path, mmap_mode="r")
    assert main(["evaluate", str(path)]) == 2  # the CLI: one line, exit 2


def test_a_deeply_nested_safetensors_header_is_a_named_error(tmp_path):
    body = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # valid JSON, 100,000 lists deep
    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(len(body).to_bytes(8, "little") + body)
    with pytest.raises(CheckpointError, match="corrupt safetensors header \\(nested too deeply\\)"):
        load_checkpoint(path)


def test_an_edited_config_asking_for_a_huge_model_is_refused_before_it_allocates(tmp_path):
    TimestepEmbedder(32).save_pretrained(tmp_path / "e")
    edit = tmp_path / "e" / "config.json"
    edit.write_text(json.dumps({**json.loads(edit.read_text()), "emb_dim": 10**7}))  # a 10^7 x 10^7 MLP: 400 TB
    with pytest.raises(
        ValueError, match=r"state dict does not fit.*shape mismatches: \['time_embedding.linear_1.weight"
    ):
        TimestepEmbedder.from_pretrained(tmp_path / "e")
    UNet(UNetConfig(channels=(8, 16), emb_dim=32)).save_pretrained(tmp_path / "u")
    edit = tmp_path / "u" / "config.json"
    edit.write_text(json.dumps({**json.loads(edit.read_text()), "channels": [8, 10**6]}))
    with pytest.raises(ValueError, match="state dict does not fit"):
        UNet.from_pretrained(tmp_path / "u")


def test_sigterm_as_torchrun_sends_its_workers_stops_like_ctrl_c(tmp_path):
    """torchrun answers Ctrl-C by sending SIGTERM to its workers: one line, exit 130, the checkpoint saved."""
    out = tmp_path / "run"
    proc = subprocess.Popen(endless_run(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_steps(proc, out)
    err = stop_and_check_saved(proc, out)
    assert "interrupted" in err and "--resume" in err
