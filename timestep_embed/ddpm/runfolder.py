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
* What is made again: [`kept_results`][timestep_embed.ddpm.runfolder.kept_results] says which of a finished run's
  results still match its config, [`drop_log_lines_after`][timestep_embed.ddpm.runfolder.drop_log_lines_after]
  trims the log to the checkpoint before a resume, and [`run_config_for`][timestep_embed.ddpm.runfolder.run_config_for]
  picks a resume's config (the checkpoint's own by default).

Reading a run's model back (``load_model``, ``export_run``, ``sample_run``) is in
[`trained`][timestep_embed.ddpm.trained].
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import torch

from ..files import atomic_write_bytes, load_npy
from .checkpoint import RUN_CHECKPOINT, CheckpointError, read_metadata
from .config import DEFAULT_CONFIG, RunConfig, TrainConfig, stored_config
from .schema import ConfigError

__all__ = [
    "LOCK",
    "RUN_FILES",
    "RESUMABLE",
    "check_run_folder",
    "clear_run",
    "kept_results",
    "drop_log_lines_after",
    "run_config_for",
    "remove_stale_temp_files",
]

log = logging.getLogger(__name__)
LOCK = ".lock"
RUN_FILES = ("config.yaml", RUN_CHECKPOINT, "log.jsonl", "loss_curve.png", "samples.npy", "samples.png", "metrics.json")
# What a resume may change: how long the run trains, how it is watched, where it runs, how it is sampled
# and scored. Anything else would continue training another model than the checkpoint's.
RESUMABLE_TRAIN = ("minutes", "steps", "log_every", "checkpoint_minutes", "snapshot_every", "threads", "tensorboard")
RESUMABLE = {f"train.{k}" for k in (*RESUMABLE_TRAIN, "device", "bf16", "compile", "out_dir")}


def remove_stale_temp_files(folder: Path) -> None:
    """Delete the ``.<name>.<random>.tmp`` files an interrupted atomic write left behind."""
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted write", path)


def _flat(data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        return {prefix[:-1]: data}
    return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def _is_run(out: Path) -> bool:
    """Whether ``out`` holds a run of this package: a config.yaml that is a run config, or a checkpoint
    whose metadata holds one."""
    try:
        if (out / "config.yaml").is_file() and stored_config(out / "config.yaml"):
            return True
    except ConfigError:
        pass
    try:
        return (out / RUN_CHECKPOINT).is_file() and "config" in read_metadata(out / RUN_CHECKPOINT)
    except CheckpointError:
        return False


def check_run_folder(out: Path, cfg: RunConfig, *, resume: bool, overwrite: bool) -> None:
    """Raise before anything is written when ``out`` may not be written (see the module docstring); log a
    changed budget on resume."""
    if overwrite and out.resolve() == Path.cwd().resolve():
        raise ValueError(
            f"out_dir = {str(out)!r} is the current folder, which --overwrite would clear: name a run folder"
        )
    held = [n for n in RUN_FILES if (out / n).exists()]
    if held and not _is_run(out):
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
    stored, wanted = _flat(stored_config(read_metadata(checkpoint).get("config", {})).to_dict()), _flat(cfg.to_dict())
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


def clear_run(folder: Path) -> None:
    """Remove a previous run's files from ``folder`` (``--overwrite``), its snapshots and extra samples too."""
    doomed = [folder / name for name in RUN_FILES]
    doomed += [*folder.glob("snapshot_*.png"), *folder.glob("samples-*.npy"), *folder.glob("samples-*.png")]
    doomed += folder.glob("grid_*.png")  # 0.2's name for the snapshots
    for path in doomed:
        path.unlink(missing_ok=True)


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


def drop_log_lines_after(path: Path, step: int) -> None:
    """Before a resume: rewrite ``log.jsonl`` (atomically) without its lines past ``step``, which the
    resumed run trains and logs again, so every step appears once; the log is then appended to."""
    if not path.is_file():
        return
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in lines if json.loads(line).get("step", 0) <= step]
    if len(kept) != len(lines):
        atomic_write_bytes(path, "".join(line + "\n" for line in kept).encode())


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
