"""What a training checkpoint holds, and the helpers beside the training loop (budget, progress, EMA).

A checkpoint (``checkpoint.safetensors``, written atomically by :mod:`timestep_embed.ddpm.checkpoint`):
tensors ``model.*`` (raw weights), ``ema.*`` (EMA weights: what sampling uses), ``optim.*`` (AdamW
state), ``rng.generator`` (the generator behind batches, t and noise) and ``rng.torch`` (global RNG,
for dropout); metadata ``{"config": <RunConfig as dict>, "step", "elapsed_s", "optimizer", ...}``.
Restoring all of it makes ``--resume`` continue bit-exactly (with a step budget, on CPU).
"""

from __future__ import annotations

import collections
import json
import logging
import statistics
import time
from pathlib import Path

import torch

from ..files import versions
from . import checkpoint as ckpt
from .config import RunConfig, replace_section
from .configfile import ConfigError, config_to_dict
from .plots import save_grid_png
from .runtime import Runtime, broadcast_float
from .sample import describe_sampling, generate

__all__ = [
    "Budget",
    "TrainingLog",
    "progress_bar",
    "update_ema",
    "adamw",
    "save_training_state",
    "load_training_state",
    "save_progress_grid",
    "check_run_folder",
]

log = logging.getLogger(__name__)

# What may change when a run is resumed: how long it trains and how it is watched, sampled and
# scored. Anything else would continue training another model than the checkpoint's.
RESUMABLE_TRAIN = ("minutes", "steps", "job_minutes", "log_every", "checkpoint_minutes", "grid_every", "threads")
RESUMABLE = {f"train.{k}" for k in (*RESUMABLE_TRAIN, "device", "bf16", "out_dir")}
BUDGET = ("train.minutes", "train.steps", "train.job_minutes")


def job_clock() -> float:
    """Seconds on the user's wall clock (CLOCK_REALTIME), what a promise like "the job takes <= 12
    minutes" is measured on. ``time.perf_counter`` (CLOCK_MONOTONIC) can stand still while a virtual
    machine is paused, so a cap on it lets the job overrun by the pause."""
    return time.time()


class Budget:
    """The training budget: ``train.steps``, or ``train.minutes`` of training time cut so that the whole
    job (started at ``job_start``) ends within ``train.job_minutes``. Rank 0's clock decides on every rank.

    The cut leaves time for sampling, projected from the training speed at half a training step per image
    (the main job measures about 0.3: 12 s for 500 x 50 forward passes at 9 steps/s, a margin for a slower
    machine) and 15 s to evaluate (the evaluator's classifier is trained before training, so scoring takes
    ~2 s); the step time is the median of the last 100 steps, so a burst of slow steps does not end the run.
    """

    def __init__(self, cfg: RunConfig, rt: Runtime, elapsed: float, job_start: float | None):
        """``job_start``: :func:`job_clock` when the job began (None: no job cap)."""
        self.cfg, self.rt, self.elapsed, self.job_start = cfg, rt, elapsed, job_start
        self.seconds = 60 * (cfg.train.minutes or 0)
        self.recent: collections.deque[float] = collections.deque(maxlen=100)

    def add(self, seconds: float) -> None:
        """Count one training step of ``seconds``."""
        self.elapsed += seconds
        self.recent.append(seconds)
        t, s = self.cfg.train, self.cfg.sample
        if len(self.recent) >= 20 and t.minutes is not None and t.job_minutes is not None and self.job_start:
            sample_s = s.num_samples * s.steps * statistics.median(self.recent) / (2.0 * t.batch_size)
            left = 60 * t.job_minutes - max(0.0, job_clock() - self.job_start) - sample_s - 15
            self.seconds = min(60 * t.minutes, self.elapsed + left)

    def progress(self, step: int) -> float:
        """How much of the budget is used, 0 -> 1 (drives the learning-rate decay)."""
        steps = self.cfg.train.steps
        return step / steps if steps else broadcast_float(self.elapsed / max(self.seconds, 1e-9), self.rt)

    def done(self, step: int) -> bool:
        steps = self.cfg.train.steps
        return step >= steps if steps else broadcast_float(float(self.elapsed >= self.seconds), self.rt) > 0


class TrainingLog:
    """``log.jsonl`` (one line every ``train.log_every`` steps, rank 0) and the progress bar.

    On resume, lines past the checkpoint's step (logged before a kill, about to be trained again) are
    dropped, so every step appears once.
    """

    def __init__(self, path: Path | None, cfg: RunConfig, step: int, elapsed: float, *, resume: bool, show_bar: bool):
        self.t, self.path = cfg.train, path
        self.file = None
        self.bar = progress_bar(self.t, step, elapsed, show_bar)
        self.window = (time.perf_counter(), step)
        if path is not None:
            kept = _lines_up_to(path, step) if resume else ""
            self.file = open(path, "w")  # noqa: SIM115 - closed in close()
            self.file.write(kept)

    def step(self, step: int, losses: list[float], lr: float, grad_norm, seconds: float, elapsed: float) -> None:
        if self.file is not None and (step % self.t.log_every == 0 or step == 1):
            now = time.perf_counter()
            recent = losses[-self.t.log_every :]
            rec = {
                "step": step,
                "loss": sum(recent) / len(recent),
                "lr": lr,
                "grad_norm": float(grad_norm),
                "steps_per_s": (step - self.window[1]) / max(1e-9, now - self.window[0]),
                "elapsed_s": elapsed,
                "threads": torch.get_num_threads(),
            }
            self.window = (now, step)
            self.file.write(json.dumps(rec) + "\n")
            self.file.flush()
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{rec['loss']:.4f}", steps_s=f"{rec['steps_per_s']:.2f}", lr=f"{lr:.1e}")
        if self.bar is not None:  # a time bar stops at its total (the last step may overrun it)
            self.bar.update(1 if self.t.steps else min(seconds, max(0.0, self.bar.total - self.bar.n)))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.file is not None:
            self.file.close()


def _lines_up_to(path: Path, step: int) -> str:
    if not path.is_file():
        return ""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return "".join(line + "\n" for line in lines if json.loads(line).get("step", 0) <= step)


def progress_bar(t, step: int, elapsed: float, enabled: bool):
    """A tqdm bar over the step budget or over the seconds of the time budget (None when disabled)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm  # optional dependency (the train extra)

    if t.steps:
        return tqdm(total=t.steps, initial=step, desc="train", unit="step")
    return tqdm(
        total=round(60 * t.minutes),
        initial=round(elapsed),
        desc="train",
        unit="s",
        bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} s [{elapsed}<{remaining}{postfix}]",
    )


def adamw(params, lr: float, *, weight_decay: float = 0.0, betas=(0.9, 0.999)) -> torch.optim.AdamW:
    """``torch.optim.AdamW``, with its fused kernel where this torch has one for the parameters' device
    (CUDA; CPU since torch 2.4). On CPU the default runs a Python loop over the parameter tensors: on the
    main job's UNet (110 tensors) the fused step takes 2.1 against 10 ms, 2-3% of a training step
    (``scripts/bench_train_step.py``). It computes the same update (rounding aside), with the same state dict."""
    params = list(params)  # a generator would be spent by the first attempt
    try:
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # torch < 2.4 on CPU, or a device without the kernel: refused at construction
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)


@torch.no_grad()
def update_ema(ema: torch.nn.Module, model: torch.nn.Module, step: int, max_decay: float) -> None:
    """EMA of the weights with warmup, decay ``min(max_decay, (1 + n) / (10 + n))`` at step n, so a short
    run averages its last part rather than its random start."""
    decay = min(max_decay, (1 + step) / (10 + step))
    for p_ema, p in zip(ema.parameters(), model.parameters(), strict=True):
        p_ema.lerp_(p, 1 - decay)


def save_training_state(path, cfg, model, ema, opt, gen, step: int, elapsed: float) -> Path:
    """Model, EMA, optimizer, generator and global RNG in one safetensors file (atomic), config as metadata."""
    opt_tensors, opt_meta = ckpt.flatten_optimizer_state(opt.state_dict())
    tensors = {
        **ckpt.with_prefix(model.state_dict(), "model."),
        **ckpt.with_prefix(ema.state_dict(), "ema."),
        **opt_tensors,
        "rng.generator": gen.get_state(),
        "rng.torch": torch.get_rng_state(),
    }
    meta = {
        "config": config_to_dict(cfg),
        "step": step,
        "elapsed_s": elapsed,
        "optimizer": opt_meta,
        "generator_device": str(gen.device),
        "versions": versions(),
    }
    return ckpt.save_checkpoint(path, tensors, meta)


def load_training_state(path, model, ema, opt, gen, rt: Runtime) -> tuple[int, float]:
    """Restore what :func:`save_training_state` wrote; returns (step, elapsed seconds)."""
    tensors, meta = ckpt.load_checkpoint(path)
    try:
        model.load_state_dict(ckpt.strip_prefix(tensors, "model."))
        ema.load_state_dict(ckpt.strip_prefix(tensors, "ema."))
        opt.load_state_dict(ckpt.unflatten_optimizer_state(tensors, meta["optimizer"]))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise ckpt.CheckpointError(f"{path}: does not match this run's model/config ({exc})") from exc
    for state in opt.state.values():  # optimizer tensors follow the parameters' device
        for k, v in state.items():
            if isinstance(v, torch.Tensor) and k != "step":
                state[k] = v.to(rt.device)
    gen.set_state(tensors["rng.generator"])
    torch.set_rng_state(tensors["rng.torch"])
    return int(meta["step"]), float(meta["elapsed_s"])


def save_progress_grid(ema, cfg: RunConfig, rt: Runtime, path: Path, step: int, n: int = 16, steps: int = 20) -> None:
    """A quick look during training: ``n`` EMA samples with ``steps`` ancestral steps, as a PNG grid.
    Uses its own generator (cfg.sample.seed), so the training's random stream is untouched."""
    sampler = "euler" if cfg.diffusion.prediction == "flow" else "ddpm"
    quick = replace_section(cfg, "sample", sampler=sampler, num_samples=n, batch_size=n, steps=steps)
    caption = f"step {step}, EMA weights, {n} samples, {describe_sampling(quick)}"
    save_grid_png(generate(ema, quick, rt.device, bf16=rt.bf16), path, nrow=8, caption=caption)


def _flat(data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        return {prefix[:-1]: data}
    return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}


def check_run_folder(out: Path, cfg: RunConfig, *, resume: bool, overwrite: bool) -> None:
    """Raise before anything is written when ``out`` holds a run that neither ``resume`` nor
    ``overwrite`` allows to touch, or when a resume would change the trained model; log a changed budget."""
    checkpoint = out / ckpt.RUN_CHECKPOINT
    held = [p.name for p in (out / "config.yaml", checkpoint, out / "metrics.json") if p.exists()]
    if held and not (resume or overwrite):
        raise FileExistsError(
            f"{out} already holds a run ({', '.join(held)}): pass --resume to continue it, --overwrite to replace "
            "it, or choose another --out-dir"
        )
    if not resume:
        return
    if not checkpoint.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint}")
    stored, wanted = _flat(ckpt.read_metadata(checkpoint).get("config", {})), _flat(config_to_dict(cfg))
    changed = sorted(k for k in stored.keys() | wanted.keys() if stored.get(k) != wanted.get(k))
    fixed = [k for k in changed if k not in RESUMABLE and not k.startswith(("sample.", "eval."))]  # these may change
    if fixed:
        diffs = "; ".join(f"{k}: {stored.get(k)!r} in the checkpoint, {wanted.get(k)!r} now" for k in fixed[:5])
        raise ConfigError(
            f"--resume would train another model than {checkpoint} ({diffs}): resume with the run's own config, "
            "or start a new --out-dir"
        )
    for key in (k for k in changed if k in BUDGET):
        log.warning("--resume with another budget: %s %s -> %s", key, stored.get(key), wanted.get(key))
