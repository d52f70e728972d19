"""Train a DDPM on MNIST, then sample and evaluate it: ``timestep-embed train`` (the main job).

One flat training loop (:func:`train_loop`) in commented stanzas, nanoGPT / DiT style. Everything a
run produces goes into one folder (see :func:`run_training`). Python use::

    from timestep_embed.train import run_training
    metrics = run_training("configs/ddpm_mnist.yaml", "runs/x", overrides=["train.minutes=2"])
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from timestep_embed import diffusion as D
from timestep_embed.checkpoint import atomic_write_bytes
from timestep_embed.config import DataConfig, DiffusionConfig, EvalConfig, SampleConfig, load_config
from timestep_embed.distributed import Runtime, ThreadTuner, broadcast_float, cleanup, setup
from timestep_embed.training_state import (
    load_training_state,
    progress_bar,
    save_progress_grid,
    save_training_state,
    time_budget,
    update_ema,
)
from timestep_embed.unet import UNet, UNetConfig

DEFAULT_CONFIG = "configs/ddpm_mnist.yaml"


@dataclass
class TrainConfig:
    minutes: float | None = 10.0  # wall-clock training budget; the LR decays by elapsed time
    job_minutes: float | None = 14.0  # with minutes: cap on the whole job (training stops early to fit sampling)
    steps: int | None = None  # step budget instead (exact and repeatable); set minutes: null
    batch_size: int = 64  # global: split over the torchrun processes
    lr: float = 2e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05  # cosine decay from lr to lr * min_lr_ratio over the budget
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999  # with warmup: min(ema_decay, (1 + n) / (10 + n))
    bf16: bool | Literal["auto"] = "auto"  # bf16 autocast; auto = if the CPU/GPU has fast bf16 kernels
    threads: int | Literal["auto"] = "auto"  # CPU threads; auto = time 1 vs all cores, keep the faster
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0
    log_every: int = 25  # steps between JSONL log lines
    checkpoint_minutes: float = 5.0  # periodic checkpoint; one is always written at the end
    grid_every: int = 500  # steps between progress grids grid_<step>.png (16 EMA samples, 20 steps); 0 = off
    out_dir: str = "runs/ddpm_mnist"


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: UNetConfig = field(default_factory=UNetConfig)
    diffusion: DiffusionConfig = field(default_factory=lambda: DiffusionConfig(min_snr_gamma=5.0))
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def load_run_config(source=DEFAULT_CONFIG, overrides=()) -> RunConfig:
    """A :class:`RunConfig` from a YAML/TOML/JSON file, a dict or None (defaults), plus overrides.
    The default path is looked up in the working directory, then next to the package (a source
    checkout); if neither exists the dataclass defaults are used: they equal configs/ddpm_mnist.yaml."""
    if isinstance(source, str) and source == DEFAULT_CONFIG and not Path(source).is_file():
        beside = Path(__file__).resolve().parents[1] / DEFAULT_CONFIG
        source = beside if beside.is_file() else None
    cfg = load_config(source, RunConfig, list(overrides))
    cfg.model.validate()
    t = cfg.train
    if (t.minutes is None) == (t.steps is None):
        raise ValueError(
            f"train.minutes = {t.minutes} and train.steps = {t.steps}: set exactly one budget and the other to "
            f"null, e.g. `train.steps=2000 train.minutes=null`"
        )
    return cfg


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
    """Train ``model`` (and its EMA) under ``cfg.train``'s budget; returns (ema_model, stats).
    Writes ``checkpoint.safetensors`` and ``log.jsonl`` in ``out_dir`` (rank 0). ``stop_at``: stop
    at that step as if interrupted (tests of --resume). Ctrl-C saves a checkpoint and stops."""
    from timestep_embed.data import load_mnist

    t, path = cfg.train, out_dir / "checkpoint.safetensors"
    # Data: the whole training split sits on the device; each rank samples from its own shard.
    x_all, _ = load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)
    data = x_all[rt.rank :: rt.world_size].to(rt.device)
    if t.batch_size % rt.world_size:
        raise ValueError(f"train.batch_size = {t.batch_size} must be divisible by the {rt.world_size} processes")
    batch = t.batch_size // rt.world_size
    schedule = D.schedule_from_config(cfg.diffusion)
    # Model, EMA copy (float32, never trained), optimizer, and the generator behind every random draw.
    torch.manual_seed(t.seed)
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    gen = torch.Generator(rt.device).manual_seed(t.seed * 1000 + rt.rank)
    step, elapsed, losses = 0, 0.0, []
    if resume:
        step, elapsed = load_training_state(path, model, ema, opt, gen, rt)
    ddp = model if rt.world_size == 1 else nn.parallel.DistributedDataParallel(model)
    tuner = ThreadTuner(t.threads) if rt.device.type == "cpu" else None
    log = open(out_dir / "log.jsonl", "a" if resume else "w") if rt.is_main else None  # noqa: SIM115
    bar = progress_bar(t, step, elapsed, progress and rt.is_main)
    budget, recent = 60 * (t.minutes or 0), collections.deque(maxlen=100)
    last_ckpt, done, interrupted, window = time.perf_counter(), False, False, (time.perf_counter(), step)
    try:
        while not done:
            t0 = time.perf_counter()
            # Where we are in the budget (rank 0's clock on every rank) and the learning rate.
            frac = step / t.steps if t.steps else broadcast_float(elapsed / max(budget, 1e-9), rt)
            lr = lr_at(frac, step, t)
            for group in opt.param_groups:
                group["lr"] = lr
            # Batch: x0 from the data, t and eps drawn inside training_loss (Ho et al. Algorithm 1).
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
            dt = time.perf_counter() - t0
            elapsed += dt
            recent.append(dt)  # median of the last 100 steps: a burst of slow steps must not cut the run
            if len(recent) >= 20:
                budget = time_budget(cfg, elapsed, statistics.median(recent), job_start)
            if tuner:
                tuner.step(dt)
            losses.append(loss.item())
            # Log: JSONL line and progress bar (rank 0).
            if log and (step % t.log_every == 0 or step == 1):
                sps = (step - window[1]) / max(1e-9, time.perf_counter() - window[0])
                window = (time.perf_counter(), step)
                rec = {
                    "step": step,
                    "loss": sum(losses[-t.log_every :]) / len(losses[-t.log_every :]),
                    "lr": lr,
                    "grad_norm": float(grad_norm),
                    "steps_per_s": sps,
                    "elapsed_s": elapsed,
                    "threads": torch.get_num_threads(),
                }
                log.write(json.dumps(rec) + "\n")
                log.flush()
                if bar is not None:
                    bar.set_postfix(loss=f"{rec['loss']:.4f}", steps_s=f"{sps:.2f}", lr=f"{lr:.1e}")
            if bar is not None:  # a time bar stops at its total (the last step may overrun it)
                bar.update(1 if t.steps else min(dt, max(0.0, bar.total - bar.n)))
            # Budget and periodic checkpoint.
            done = step >= t.steps if t.steps else broadcast_float(float(elapsed >= budget), rt) > 0
            if stop_at is not None and step >= stop_at:
                break
            if rt.is_main and t.grid_every and step % t.grid_every == 0:
                save_progress_grid(ema, cfg, rt, out_dir / f"grid_{step:06d}.png")
            if rt.is_main and not done and time.perf_counter() - last_ckpt > 60 * t.checkpoint_minutes:
                save_training_state(path, cfg, model, ema, opt, gen, step, elapsed)
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        interrupted = True
        print(f"\ninterrupted at step {step}: saving {path}", flush=True)
    finally:
        if bar is not None:
            bar.close()
        if log:
            log.close()
    if rt.is_main:
        save_training_state(path, cfg, model, ema, opt, gen, step, elapsed)
    stats = {
        "train_steps": step,
        "train_seconds": round(elapsed, 2),
        "steps_per_s": step / max(elapsed, 1e-9),
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
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
    Run folder (rank 0): config.yaml, checkpoint.safetensors, log.jsonl, loss_curve.png,
    samples.npy, samples.png, metrics.json. An existing checkpoint is never overwritten unless
    ``resume`` (continue it; with the default ``config`` the run's own config.yaml is used) or ``overwrite``."""
    from timestep_embed.config import save_config
    from timestep_embed.sample import generate, save_grid_png, save_loss_curve

    if resume and isinstance(config, str) and config == DEFAULT_CONFIG:  # resume with the run's own config
        stored = Path(out_dir if out_dir is not None else TrainConfig().out_dir) / "config.yaml"
        config = stored if stored.is_file() else config
    cfg = config if isinstance(config, RunConfig) else load_run_config(config, overrides)
    out = Path(out_dir if out_dir is not None else cfg.train.out_dir)
    if (out / "checkpoint.safetensors").exists() and not (resume or overwrite):
        raise FileExistsError(
            f"{out} already holds a run: pass --resume to continue it, --overwrite to replace "
            f"it, or choose another --out-dir"
        )
    if resume and not (out / "checkpoint.safetensors").exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {out / 'checkpoint.safetensors'}")
    wall0 = time.perf_counter()
    from timestep_embed.data import load_mnist

    load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)  # a missing/bad data source fails before any write
    rt = setup(cfg.train.device, cfg.train.bf16)
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
        if cfg.eval.enabled:  # train (or load) the evaluator's classifier now, not after training
            from timestep_embed.evaluate import load_classifier

            # one thread: on a shared 2-core CPU two OpenMP threads can be several times slower (README)
            load_classifier(cfg.data.source, cfg.eval, progress=progress, threads=1)
    torch.manual_seed(cfg.train.seed)  # model init: identical on every rank
    model = UNet(cfg.model, time_embedder).to(rt.device)
    n_params = sum(p.numel() for p in model.parameters())
    if progress and rt.is_main:
        print(f"UNet {n_params / 1e6:.2f}M parameters on {rt.device} x{rt.world_size}, bf16={rt.bf16} -> {out}")
    ema, stats = train_loop(cfg, rt, model, out, resume=resume, progress=progress, stop_at=stop_at, job_start=wall0)
    metrics = {
        **stats,
        "num_params": n_params,
        "device": str(rt.device),
        "world_size": rt.world_size,
        "bf16": rt.bf16,
        "out_dir": str(out),
    }
    if rt.is_main and stats["finished"]:
        t0 = time.perf_counter()
        samples = generate(ema, cfg, rt.device, bf16=rt.bf16, progress=progress, threads=cfg.train.threads)
        metrics["sample_seconds"] = round(time.perf_counter() - t0, 2)
        import numpy as np

        np.save(out / "samples.npy", samples.numpy())
        save_grid_png(samples[:100], out / "samples.png")
        save_loss_curve(out / "log.jsonl", out / "loss_curve.png")
        if cfg.eval.enabled:
            from timestep_embed.evaluate import evaluate_samples, format_report

            t0 = time.perf_counter()
            metrics.update(evaluate_samples(samples, cfg.eval, data_source=cfg.data.source))
            metrics["eval_seconds"] = round(time.perf_counter() - t0, 2)
            if progress:
                print(format_report(metrics))
        metrics["total_seconds"] = round(time.perf_counter() - wall0, 2)
        atomic_write_bytes(out / "metrics.json", (json.dumps(metrics, indent=2, default=str) + "\n").encode())
    cleanup()
    return metrics


# ----------------------------------------------------------------------------- CLI
def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.minutes=2")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML/TOML config (default {DEFAULT_CONFIG})")
    parser.add_argument("--out-dir", default=None, help="run folder (default: train.out_dir of the config)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out-dir from its checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --out-dir")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or report")


def run_cli(args: argparse.Namespace) -> int:
    from timestep_embed.checkpoint import CheckpointError
    from timestep_embed.config import ConfigError
    from timestep_embed.data import DataError

    try:
        metrics = run_training(
            args.config,
            args.out_dir,
            overrides=args.overrides,
            resume=args.resume,
            overwrite=args.overwrite,
            progress=not args.quiet,
        )
    except (ConfigError, CheckpointError, DataError, FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    if metrics.get("interrupted"):
        print(f"stopped at step {metrics['train_steps']}; continue with --resume --out-dir {metrics['out_dir']}")
        return 130
    return 0
