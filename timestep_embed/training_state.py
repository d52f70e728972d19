"""What a training checkpoint holds, and the training budget helpers of :mod:`timestep_embed.train`.

A checkpoint (``checkpoint.safetensors``, written atomically by :mod:`timestep_embed.checkpoint`):
tensors ``model.*`` (raw weights), ``ema.*`` (EMA weights: what sampling uses), ``optim.*`` (AdamW
state), ``rng.generator`` (the generator behind batches, t and noise) and ``rng.torch`` (global RNG,
for dropout); metadata ``{"config": <RunConfig as dict>, "step", "elapsed_s", "optimizer", ...}``.
Restoring all of it makes ``--resume`` continue bit-exactly (with a step budget, on CPU).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from timestep_embed import checkpoint as ckpt
from timestep_embed.distributed import Runtime


def time_budget(cfg, elapsed: float, step_time: float, job_start: float | None) -> float:
    """Training seconds allowed: train.minutes, cut so that the whole job (started at ``job_start``)
    ends within train.job_minutes, leaving time for sampling (projected from the training speed:
    a sampling forward pass costs ~1/2 of a training step per image, measured) and 30 s to evaluate."""
    budget = 60 * (cfg.train.minutes or 0)
    if cfg.train.job_minutes is None or job_start is None:
        return budget
    s = cfg.sample
    sample_s = s.num_samples * s.steps * step_time / (2.0 * cfg.train.batch_size)
    left = 60 * cfg.train.job_minutes - (time.perf_counter() - job_start) - sample_s - 30
    return min(budget, elapsed + left)


def progress_bar(t, step: int, elapsed: float, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    if t.steps:
        return tqdm(total=t.steps, initial=step, desc="train", unit="step")
    return tqdm(
        total=round(60 * t.minutes),
        initial=round(elapsed),
        desc="train",
        unit="s",
        bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} s [{elapsed}<{remaining}{postfix}]",
    )


@torch.no_grad()
def update_ema(ema: torch.nn.Module, model: torch.nn.Module, step: int, max_decay: float) -> None:
    """EMA of the weights with warmup, decay ``min(max_decay, (1 + n) / (10 + n))`` at step n, so a short
    run averages its last part rather than its random start."""
    decay = min(max_decay, (1 + step) / (10 + step))
    for p_ema, p in zip(ema.parameters(), model.parameters(), strict=True):
        p_ema.lerp_(p, 1 - decay)


def save_training_state(path, cfg, model, ema, opt, gen, step: int, elapsed: float) -> Path:
    """Model, EMA, optimizer, generator and global RNG in one safetensors file (atomic), config as metadata."""
    from timestep_embed.config import config_to_dict

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


def save_progress_grid(ema, cfg, rt: Runtime, path: Path, n: int = 16, steps: int = 20) -> None:
    """A quick look during training: ``n`` EMA samples with ``steps`` ancestral steps, as a PNG grid.
    Uses its own generator (cfg.sample.seed), so the training's random stream is untouched."""
    from timestep_embed.sample import generate, save_grid_png

    quick = dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, num_samples=n, batch_size=n, steps=steps))
    save_grid_png(generate(ema, quick, rt.device, bf16=rt.bf16), path, nrow=8)
