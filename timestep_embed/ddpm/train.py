"""Train a DDPM on MNIST, then sample and evaluate it: ``timestep-embed train`` (the main job).

One flat training loop (:func:`train_loop`) in commented stanzas, its helpers (budget, log, EMA,
checkpoint) in :mod:`~timestep_embed.ddpm.state`. Everything a run produces goes into one folder
(see :func:`run_training`). Python use::

    from timestep_embed.ddpm.train import run_training
    metrics = run_training("mnist", "runs/x", overrides=["train.minutes=2"])
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import time
from pathlib import Path

import torch
from torch import nn

from ..files import atomic_write_bytes, load_npy, save_npy, versions
from . import diffusion as D
from .checkpoint import RUN_CHECKPOINT
from .classifier import load_classifier
from .config import DEFAULT_CONFIG, RunConfig, TrainConfig, load_run_config, resolve_config
from .configfile import save_config
from .data import load_mnist
from .evaluate import evaluate_samples
from .plots import save_grid_png, save_loss_curve
from .runfolder import clear_run, owned
from .runtime import Runtime, ThreadTuner, cleanup, setup
from .sample import describe_sampling, generate
from .state import (
    Budget,
    TrainingLog,
    adamw,
    check_run_folder,
    job_clock,
    load_training_state,
    save_progress_grid,
    save_training_state,
    update_ema,
)
from .unet import UNet

__all__ = ["lr_at", "train_loop", "run_training"]

log = logging.getLogger(__name__)


def lr_at(progress: float, step: int, t: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then cosine from lr to lr*min_lr_ratio as progress 0 -> 1."""
    warm = min(1.0, (step + 1) / max(1, t.warmup_steps))
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return t.lr * warm * (t.min_lr_ratio + (1 - t.min_lr_ratio) * cos)


def train_loop(
    cfg: RunConfig,
    rt: Runtime,
    model: UNet,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    stop_at: int | None = None,
    job_start: float | None = None,
) -> tuple[UNet, dict]:
    """Train ``model`` (and its EMA) within ``cfg.train``'s budget; returns (ema_model, stats).

    Writes ``checkpoint.safetensors`` and ``log.jsonl`` in ``out_dir`` (rank 0). ``stop_at``: stop at
    that step as if interrupted (tests of --resume). Ctrl-C saves a checkpoint and stops.
    """
    t, path = cfg.train, out_dir / RUN_CHECKPOINT
    # Data: the whole training split sits on the device; each rank samples from its own shard.
    x_all, _ = load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)
    data = x_all[rt.rank :: rt.world_size].to(rt.device)
    if t.batch_size % rt.world_size:
        raise ValueError(f"train.batch_size = {t.batch_size} must be divisible by the {rt.world_size} processes")
    batch, schedule = t.batch_size // rt.world_size, D.schedule_from_config(cfg.diffusion)
    # Model, EMA copy (float32, never trained), optimizer, and the generator behind every random draw.
    torch.manual_seed(t.seed)
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = adamw(model.parameters(), t.lr, weight_decay=t.weight_decay, betas=(0.9, t.adam_beta2))
    gen = torch.Generator(rt.device).manual_seed(t.seed * 1000 + rt.rank)
    step, elapsed = load_training_state(path, model, ema, opt, gen, rt) if resume else (0, 0.0)
    start_step = step
    ddp = model if rt.world_size == 1 else nn.parallel.DistributedDataParallel(model)
    tuner = ThreadTuner(t.threads) if rt.device.type == "cpu" else None
    budget = Budget(cfg, rt, elapsed, job_start)
    logbook = TrainingLog(
        out_dir / "log.jsonl" if rt.is_main else None,
        cfg,
        step,
        elapsed,
        resume=resume,
        show_bar=progress and rt.is_main,
    )
    losses, last_checkpoint, interrupted = [], time.perf_counter(), False
    done = budget.done(step)  # a finished run resumed trains nothing more
    try:
        while not done:
            t0 = time.perf_counter()
            # Learning rate: linear warmup, then cosine decay over the budget (steps or rank 0's clock).
            lr = lr_at(budget.progress(step), step, t)
            for group in opt.param_groups:
                group["lr"] = lr
            # Batch: x0 from the data; t and eps are drawn inside training_loss (Ho et al. Algorithm 1).
            x0 = data[torch.randint(0, len(data), (batch,), generator=gen, device=rt.device)]
            with rt.autocast():
                loss = D.training_loss(
                    ddp,
                    x0,
                    schedule,
                    generator=gen,
                    prediction=cfg.diffusion.prediction,
                    min_snr_gamma=cfg.diffusion.min_snr_gamma,
                )
            # Backward, clip, step. DDP averages the gradients over ranks during backward().
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            # EMA with warmup, so a short run averages its last part rather than its random start.
            update_ema(ema, model, step, t.ema_decay)
            step += 1
            seconds = time.perf_counter() - t0
            budget.add(seconds)
            if tuner:
                tuner.step(seconds)
            losses.append(loss.item())
            logbook.step(step, losses, lr, grad_norm, seconds, budget.elapsed)
            # Budget, progress grid (a quick look at the EMA) and the periodic checkpoint, rank 0.
            done = budget.done(step)
            if stop_at is not None and step >= stop_at:
                break
            if rt.is_main and t.grid_every and step % t.grid_every == 0:
                save_progress_grid(ema, cfg, rt, out_dir / f"grid_{step:06d}.png", step)
            if rt.is_main and not done and time.perf_counter() - last_checkpoint > 60 * t.checkpoint_minutes:
                save_training_state(path, cfg, model, ema, opt, gen, step, budget.elapsed)
                last_checkpoint = time.perf_counter()
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted at step %d: saving %s", step, path)
    finally:
        logbook.close()
    if rt.is_main and (losses or not path.exists()):
        save_training_state(path, cfg, model, ema, opt, gen, step, budget.elapsed)
    stats = {
        "resumed_at": start_step,
        "train_steps": step,
        "train_seconds": round(budget.elapsed, 2),
        "steps_per_s": step / max(budget.elapsed, 1e-9),
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])) if losses else None,
        "interrupted": interrupted,
        "finished": done,
    }
    return ema, stats


# ----------------------------------------------------------------------------- the whole job
def run_training(
    config: RunConfig | str | Path | dict | None = DEFAULT_CONFIG,
    out_dir: str | Path | None = None,
    time_embedder: nn.Module | None = None,
    overrides=(),
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_at: int | None = None,
) -> dict:
    """Train, sample (EMA weights), evaluate; write the run folder; return the metrics dict.

    ``time_embedder``: optional module t [B] -> [B, model.emb_dim] replacing the UNet's default.
    Run folder (rank 0, held by one process at a time: see :mod:`~timestep_embed.ddpm.runfolder`):
    config.yaml, checkpoint.safetensors, log.jsonl, loss_curve.png, samples.npy, samples.png,
    metrics.json, grid_<step>.png. A folder that holds a run is never written into unless ``resume``
    (continue it: with the default ``config`` the run's own config.yaml is used, and only changes that
    leave the trained model the same are accepted) or ``overwrite`` (its files are removed first).
    Resuming a finished run trains nothing and does only what is missing: sampling, plots, evaluation.
    """
    if resume and isinstance(config, str) and config == DEFAULT_CONFIG:  # resume with the run's own config
        stored = Path(out_dir if out_dir is not None else TrainConfig().out_dir) / "config.yaml"
        config = stored if stored.is_file() else config
    cfg = config if isinstance(config, RunConfig) else load_run_config(config, overrides)
    origin = "a RunConfig" if isinstance(config, RunConfig) else str(resolve_config(config))
    log.info("config: %s%s", origin, f" with {' '.join(overrides)}" if overrides else "")
    out = Path(out_dir if out_dir is not None else cfg.train.out_dir)
    wall0 = job_clock()
    load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)  # a missing/bad data source fails before any write
    rt = setup(cfg.train.device, cfg.train.bf16)
    with owned(out) if rt.is_main else contextlib.nullcontext():
        if rt.is_main:
            check_run_folder(out, cfg, resume=resume, overwrite=overwrite)  # before anything is written
            if overwrite and not resume:
                clear_run(out)
            save_config(cfg, out / "config.yaml")
            if cfg.eval.enabled:  # train (or load) the evaluator's classifier now, not after training
                load_classifier(cfg.data.source, cfg.eval.classifier, progress=progress, threads=1)
        torch.manual_seed(cfg.train.seed)  # model init: identical on every rank
        model = UNet(cfg.model, time_embedder).to(rt.device)
        n_params = sum(p.numel() for p in model.parameters())
        if rt.is_main:
            where = f"{rt.device} x{rt.world_size}, bf16={rt.bf16}"
            log.info("UNet %.2fM parameters on %s -> %s", n_params / 1e6, where, out)
        ema, stats = train_loop(cfg, rt, model, out, resume=resume, progress=progress, stop_at=stop_at, job_start=wall0)
        metrics = {**stats, "num_params": n_params, "device": str(rt.device), "world_size": rt.world_size}
        metrics.update(bf16=rt.bf16, out_dir=str(out), versions=versions())
        if rt.is_main and stats["finished"]:
            trained_now = stats["train_steps"] > stats["resumed_at"]
            metrics = _finish(ema, cfg, rt, out, metrics, trained_now, progress)
            metrics["total_seconds"] = round(job_clock() - wall0, 2)
            atomic_write_bytes(out / "metrics.json", (json.dumps(metrics, indent=2, default=str) + "\n").encode())
    cleanup()
    return metrics


def _finish(ema: UNet, cfg: RunConfig, rt: Runtime, out: Path, metrics: dict, trained_now: bool, progress: bool):
    """The run's samples (``samples.npy``, ``samples.png``), loss curve and scores; what a resumed,
    already finished run has is kept (new samples only when training went on)."""
    done = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else None
    if done is not None and not trained_now:
        log.info("%s is complete: nothing left to do", out)
        return {**done, **{k: metrics[k] for k in ("interrupted", "finished")}}
    if (out / "samples.npy").is_file() and not trained_now:
        samples = torch.from_numpy(load_npy(out / "samples.npy"))
        log.info("kept samples.npy of the finished run (remove it to draw new ones)")
    else:
        t0 = time.perf_counter()
        samples = generate(ema, cfg, rt.device, bf16=rt.bf16, progress=progress, threads=cfg.train.threads)
        metrics["sample_seconds"] = round(time.perf_counter() - t0, 2)
        save_npy(out / "samples.npy", samples.numpy())
        caption = f"{len(samples[:100])} of {len(samples)} samples, EMA weights, {describe_sampling(cfg)}"
        save_grid_png(samples[:100], out / "samples.png", caption=caption)
    gamma = cfg.diffusion.min_snr_gamma
    what = f"Min-SNR-{gamma:g} weighted MSE" if gamma is not None else "MSE"
    ylabel = f"training loss ({what}, {cfg.diffusion.prediction})"
    save_loss_curve(out / "log.jsonl", out / "loss_curve.png", ylabel=ylabel)
    if cfg.eval.enabled:
        t0 = time.perf_counter()
        metrics.update(evaluate_samples(samples, cfg.eval.classifier, data_source=cfg.data.source))
        metrics["eval_seconds"] = round(time.perf_counter() - t0, 2)
    return metrics
