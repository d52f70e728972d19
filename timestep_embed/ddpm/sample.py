"""Draw samples from a trained DDPM: ``timestep-embed sample RUN`` -> a .npy and a captioned PNG grid.

Python use::

    model, cfg = load_model("runs/ddpm_mnist")               # EMA weights, eval mode
    x = generate(model, cfg, "cpu")                          # [N, 1, 28, 28] in [-1, 1]
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
from torch import nn

from ..files import save_npy
from . import diffusion as D
from .checkpoint import load_model
from .config import RunConfig, load_run_config
from .configfile import ConfigError, apply_overrides, config_to_dict
from .plots import save_grid_png
from .runtime import ThreadTuner, resolve_bf16, resolve_device
from .samplers import sample

__all__ = ["generate", "describe_sampling", "sample_run"]


def describe_sampling(cfg: RunConfig) -> str:
    """A one-line caption of how ``cfg.sample`` draws: sampler, steps, noise scale (where it applies), seed."""
    s = cfg.sample
    names = {"ddpm": "ancestral DDPM", "ddim": f"DDIM (eta {s.eta:g})", "dpm++2m": "DPM-Solver++(2M)", "heun": "Heun"}
    if s.sampler == "euler":
        return f"rectified flow, Euler, {s.steps} steps, seed {s.seed}"
    name = names[s.sampler]
    if s.spacing == "karras":
        return f"{name}, {s.steps} Karras noise levels from sigma {s.sigma_max:g}, seed {s.seed}"
    stochastic = s.sampler == "ddpm" or (s.sampler == "ddim" and s.eta > 0)
    noise = f", noise x{s.noise_scale:g}" if stochastic and s.noise_scale != 1 else ""
    return f"{name}, {s.steps} of {cfg.diffusion.num_timesteps} steps ({s.spacing}){noise}, seed {s.seed}"


@torch.no_grad()
def generate(
    model: nn.Module,
    cfg: RunConfig,
    device,
    bf16: bool = False,
    progress: bool = False,
    threads: int | str | None = None,
) -> torch.Tensor:
    """``cfg.sample.num_samples`` samples (float32 CPU ``[N, C, H, W]`` in [-1, 1]) with ``cfg.sample``'s
    sampler, steps and seed, in batches of ``cfg.sample.batch_size``, one generator for all.

    ``threads``: CPU threads (an int, ``"auto"`` = timed choice, see
    :class:`~timestep_embed.ddpm.runtime.ThreadTuner`, None = as they are).
    """
    s, m = cfg.sample, cfg.model
    device = torch.device(device)
    schedule = D.schedule_from_config(cfg.diffusion)
    gen = torch.Generator(device).manual_seed(s.seed)
    was_training = model.training
    model.eval()
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    tuner = ThreadTuner(threads, probe=3, period=60.0) if threads is not None and device.type == "cpu" else None

    def net(x, t):  # times every model call, so the tuner can keep the faster thread count
        t0 = time.perf_counter()
        y = model(x, t)
        if tuner is not None:
            tuner.step(time.perf_counter() - t0)
        return y

    out = []
    with cast:
        for start in range(0, s.num_samples, s.batch_size):
            n = min(s.batch_size, s.num_samples - start)
            x = sample(
                net,
                (n, m.in_channels, m.image_size, m.image_size),
                schedule,
                sampler=s.sampler,
                steps=s.steps,
                spacing=s.spacing,
                sigma_max=s.sigma_max,
                eta=s.eta,
                noise_scale=s.noise_scale,
                generator=gen,
                prediction=cfg.diffusion.prediction,
                clip_x0=s.clip_x0,
                device=device,
                progress=progress,
            )
            out.append(x.float().clamp(-1, 1).cpu())
    model.train(was_training)
    return torch.cat(out)


def sample_run(
    run,
    overrides=(),
    out: str | Path | None = None,
    *,
    raw: bool = False,
    device: str = "auto",
    bf16: bool | str = "auto",
    overwrite: bool = False,
    progress: bool = True,
) -> tuple[Path, Path, float]:
    """Draw samples from a run folder (or its checkpoint) with ``sample.*`` overrides; write
    ``PREFIX.npy`` and ``PREFIX.png``. Returns ``(npy, png, seconds)``.

    ``out``: the prefix (``.npy`` and ``.png`` are appended); default
    ``<run>/samples-<sampler>-<steps>-seed<seed>``, never the run's own scored ``samples.*``.
    Existing files are refused unless ``overwrite``.
    """
    bad = [o for o in overrides if not str(o).startswith("sample.")]
    if bad:
        raise ConfigError(f"only sample.* overrides apply to sampling, got {bad[0]!r}")
    dev = torch.device(resolve_device(device))
    model, cfg = load_model(run, ema=not raw, device=dev)
    cfg = load_run_config(apply_overrides(config_to_dict(cfg), list(overrides)))
    src = Path(run)
    folder = src if src.is_dir() else src.parent
    s = cfg.sample
    prefix = Path(out) if out is not None else folder / f"samples-{s.sampler}-{s.steps}-seed{s.seed}"
    npy, png = prefix.parent / (prefix.name + ".npy"), prefix.parent / (prefix.name + ".png")
    existing = [p for p in (npy, png) if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace it, or choose another --out")
    t0 = time.perf_counter()
    x = generate(model, cfg, dev, bf16=resolve_bf16(bf16, dev), progress=progress)
    seconds = time.perf_counter() - t0
    save_npy(npy, x.numpy())
    weights = "raw weights" if raw else "EMA weights"
    save_grid_png(x[:100], png, caption=f"{min(len(x), 100)} of {len(x)} samples, {weights}, {describe_sampling(cfg)}")
    return npy, png, seconds
