"""The run folder: who may write it, and what a resume may change and must make again.

A run folder holds ``config.yaml``, ``checkpoint.safetensors`` ([`checkpoint`][timestep_embed.ddpm.checkpoint]),
``log.jsonl``, ``loss_curve.png``, ``samples.npy``, ``samples.png``, ``metrics.json`` and
``snapshot_<step>.png``; ``timestep-embed sample`` adds ``samples-*.npy`` / ``.png``.

* Ownership: ``timestep_embed.files.hold`` takes an advisory lock on a file (``RUN/.lock`` for a run), so one process at
  a time writes there. The operating system drops the lock when its process ends, however it ends, so
  there is no stale lock to take over, and the lock file is never deleted (deleting it would let two
  processes hold two locks on one path).
* What may be done: [`check_run_folder`][timestep_embed.ddpm.runfolder.check_run_folder] refuses, before anything is
  written, a folder that holds a run (or files no run wrote) unless ``resume`` or ``overwrite`` says so, and a resume
  that would train another model than the checkpoint's. `RESUMABLE` lists what a resume may change.
* A failed start: [`starting`][timestep_embed.ddpm.runfolder.starting] holds the folder and, until the run's first
  training step, puts it back as it was when the start fails (an ``--overwrite``'s previous run waits in `ASIDE`).
* What is made again: [`kept_results`][timestep_embed.ddpm.runfolder.kept_results] says which of a finished run's
  results still match its config, [`drop_log_lines_after`][timestep_embed.ddpm.runlog.drop_log_lines_after]
  trims the log to the checkpoint before a resume, and [`run_config_for`][timestep_embed.ddpm.runfolder.run_config_for]
  picks a resume's config (the checkpoint's own by default).

Reading a run's model back (``load_model``, ``export_run``, ``sample_run``) is in
[`trained`][timestep_embed.ddpm.trained].
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from ..files import check_writable, hold, load_npy, remove_stale_temp_files
from .checkpoint import RUN_CHECKPOINT
from .config import (
    DEFAULT_CONFIG,
    RUN_FILES,
    RunConfig,
    TrainConfig,
    is_run,
    run_config,
    stored_config,
)
from .schema import ConfigError

__all__ = [
    "LOCK",
    "RUN_FILES",
    "RESUMABLE",
    "ASIDE",
    "check_run_folder",
    "Start",
    "starting",
    "kept_results",
    "run_config_for",
]

log = logging.getLogger(__name__)
LOCK = ".lock"
ASIDE = ".overwritten.tmp"  # an --overwrite's previous run, until the new run has trained a step
# What a resume may change: how long the run trains, how it is watched, where it runs, how it is sampled
# and scored. Anything else would continue training another model than the checkpoint's.
RESUMABLE_TRAIN = ("minutes", "steps", "log_every", "checkpoint_minutes", "snapshot_every", "threads", "tensorboard")
RESUMABLE = {f"train.{k}" for k in (*RESUMABLE_TRAIN, "device", "bf16", "compile", "out_dir")}


def _flat(data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        return {prefix[:-1]: data}
    return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def check_run_folder(out: Path, cfg: RunConfig, *, resume: bool, overwrite: bool) -> None:
    """Raise before anything is written when ``out`` may not be written (see the module docstring); log a
    changed budget on resume."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: --resume continues the run in "
                         f"{out}, --overwrite replaces it; pass one")  # fmt: skip
    if overwrite and out.resolve() == Path.cwd().resolve():
        raise ValueError(
            f"out_dir = {str(out)!r} is the current folder, which --overwrite would clear: name a run folder"
        )
    held = [n for n in RUN_FILES if (out / n).exists()]
    if held and not is_run(out):
        raise FileExistsError(
            f"{out} holds {', '.join(held)} but no run of timestep-embed: choose another --out-dir "
            "(neither --resume nor --overwrite touches files a run did not write)"
        )
    if held and not (resume or overwrite):
        raise FileExistsError(
            f"{out} already holds a run ({', '.join(held)}): pass --resume to continue it, --overwrite to replace "
            "it, or choose another --out-dir"
        )
    if not resume:
        return
    checkpoint = out / RUN_CHECKPOINT
    if not checkpoint.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint}")
    stored, wanted = _flat(run_config(checkpoint).to_dict()), _flat(cfg.to_dict())
    changed = sorted(k for k in stored.keys() | wanted.keys() if stored.get(k) != wanted.get(k))
    fixed = [k for k in changed if k not in RESUMABLE and not k.startswith(("sample.", "eval."))]
    if fixed:
        diffs = "; ".join(f"{k}: {stored.get(k)!r} in the checkpoint, {wanted.get(k)!r} now" for k in fixed[:5])
        raise ConfigError(
            f"--resume would train another model than {checkpoint} ({diffs}): resume with the run's own config, "
            "or start a new --out-dir"
        )
    for key in (k for k in changed if k in ("train.minutes", "train.steps")):
        log.warning("--resume with another budget: %s %s -> %s", key, stored.get(key), wanted.get(key))


def _previous_run(folder: Path) -> list[Path]:
    """A previous run's files in ``folder`` (what ``--overwrite`` replaces), its snapshots and extra samples too."""
    found = [folder / name for name in RUN_FILES if (folder / name).exists()]
    found += [*folder.glob("snapshot_*.png"), *folder.glob("samples-*.npy"), *folder.glob("samples-*.png")]
    return found + list(folder.glob("grid_*.png"))  # 0.2's name for the snapshots


class Start:
    """A run starting in its folder ``out`` (None on the ranks that do not write, where it does nothing). Until its
    first training step ([`trained`][timestep_embed.ddpm.runfolder.Start.trained]) a failure can be undone: the folder
    is put back as it was."""

    def __init__(self, out: Path | None, made: Path | None = None, lock_existed: bool = True):
        self.out, self.made, self.lock_existed = out, made, lock_existed  # made: the topmost folder the start made
        self.before = {p.name for p in out.iterdir()} if out is not None else set()
        self.moved: set[str] = set()
        self.pending = out is not None

    def set_aside(self) -> None:
        """``--overwrite``: the previous run's files move into `ASIDE`; deleted once this run has trained a step,
        put back if it fails before."""
        out = self.out
        if out is None:
            return
        for path in _previous_run(out):
            (out / ASIDE).mkdir(exist_ok=True)
            path.rename(out / ASIDE / path.name)
            self.moved.add(path.name)

    def trained(self) -> None:
        """The first step is trained: the folder holds this run now, and a previous one set aside is deleted."""
        if self.pending and self.out is not None:
            self.pending = False
            shutil.rmtree(self.out / ASIDE, ignore_errors=True)

    def watch(self, callback):
        """``callback`` (a train_loop Callback, or None) with `trained` called first: after the first step."""

        def watched(step, model, ema, loss):
            self.trained()
            return callback(step, model, ema, loss) if callback is not None else None

        return watched

    def undo(self) -> None:
        """Before the first step: remove what the start wrote (the folder itself, if it made it) and put back what
        it set aside. Called while the lock is held, so the lock file it made can go too."""
        out = self.out
        if out is None:
            return
        for path in out.iterdir():
            if path.name in (ASIDE, LOCK) or (path.name in self.before and path.name not in self.moved):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        for name in self.moved:
            (out / ASIDE / name).rename(out / name)
        shutil.rmtree(out / ASIDE, ignore_errors=True)
        if not self.lock_existed:
            (out / LOCK).unlink(missing_ok=True)
        _remove_made(out, self.made)
        self.pending = False


def _remove_made(out: Path, made: Path | None) -> None:
    """Remove the empty folders from ``out`` up to ``made``, the topmost one a start made (None: it made none)."""
    for folder in (out, *out.parents) if made is not None else ():
        with contextlib.suppress(OSError):
            folder.rmdir()
        if folder == made:
            break


@contextlib.contextmanager
def starting(out: Path, cfg: RunConfig, *, resume: bool, overwrite: bool, main: bool = True) -> Iterator[Start]:
    """Where a run starts (on the rank that writes, ``main``): ``out`` checked writable and held
    (``timestep_embed.files.hold``), what this run may do there checked (`check_run_folder`), what interrupted writes
    left removed and, with ``overwrite``, the previous run set aside. Until the run's first training step, a failure
    (Ctrl-C included) leaves the folder as it was: a folder it made is removed, and in one that existed what the
    start wrote is removed and the previous run put back."""
    if not main:
        yield Start(None)
        return
    made = next((f for f in reversed((out, *out.parents)) if not f.exists()), None)
    lock_existed = (out / LOCK).exists()
    try:
        check_writable(out, "out_dir")
    except OSError:
        _remove_made(out, made)
        raise
    with hold(out / LOCK, str(out)):
        start = Start(out, made, lock_existed)
        try:
            check_run_folder(out, cfg, resume=resume, overwrite=overwrite)
            remove_stale_temp_files(out)
            if overwrite:
                start.set_aside()
            yield start
        except BaseException:
            if start.pending:
                start.undo()
            raise
        start.trained()


def kept_results(out: Path, cfg: RunConfig, train_steps: int) -> tuple[dict | None, torch.Tensor | None]:
    """What a finished run folder holds that ``cfg`` would make again: ``(metrics, samples)``.

    ``samples``: ``samples.npy`` when ``metrics.json`` says it was drawn from this model (``train_steps``)
    with this ``sample`` and ``data`` config; ``metrics``: ``metrics.json`` when, besides, its ``eval``
    config is this one. None for what has to be made again (missing, unreadable, or made otherwise)."""
    try:
        done = json.loads((out / "metrics.json").read_text())
        made = done["config"] if done.get("train_steps") == train_steps else {}
        samples = torch.from_numpy(load_npy(out / "samples.npy"))
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    wanted = cfg.to_dict()
    if len(samples) != cfg.sample.num_samples or any(made.get(k) != wanted[k] for k in ("sample", "data")):
        return None, None
    return (done if made.get("eval") == wanted["eval"] else None), samples


def run_config_for(config, out_dir, overrides: Sequence[str], resume: bool) -> RunConfig:
    """The config of a run: ``config`` (a RunConfig, a shipped name, a path or a dict) with ``overrides``;
    on a resume with the default config, the run's own ``config.yaml`` (checked against the checkpoint
    by [`check_run_folder`][timestep_embed.ddpm.runfolder.check_run_folder])."""
    if isinstance(config, RunConfig):
        return config.with_overrides(overrides) if overrides else config
    if resume and config == DEFAULT_CONFIG:
        stored = Path(out_dir if out_dir is not None else TrainConfig().out_dir) / "config.yaml"
        if stored.is_file():
            log.info("config: %s%s", stored, f" with {' '.join(overrides)}" if overrides else "")
            return stored_config(stored, overrides)
    log.info("config: %s%s", config, f" with {' '.join(overrides)}" if overrides else "")
    return RunConfig.load(config, overrides)
