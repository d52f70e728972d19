"""Draw samples from a trained DDPM: ``timestep-embed sample CHECKPOINT`` -> a .npy and a PNG grid.

Also the run's pictures (sample grid, loss curve) and :func:`load_model` for other scripts::

    model, cfg = load_model("runs/ddpm_mnist")               # EMA weights, eval mode
    x = generate(model, cfg, "cpu")                          # [N, 1, 28, 28] in [-1, 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn


def load_model(path: str | Path, time_embedder: nn.Module | None = None, ema: bool = True, device="cpu"):
    """(UNet in eval mode, RunConfig) from a run folder or a ``checkpoint.safetensors`` written by
    training. ``ema``: the EMA weights (what sampling uses) or the raw ones. ``time_embedder``: as
    in :class:`~timestep_embed.unet.UNet` (its state must match the checkpoint's)."""
    from timestep_embed import checkpoint as ckpt
    from timestep_embed.config import ConfigError
    from timestep_embed.train import RunConfig, load_run_config
    from timestep_embed.unet import UNet

    path = Path(path)
    file = path / "checkpoint.safetensors" if path.is_dir() else path
    tensors, meta = ckpt.load_checkpoint(file)
    if "config" not in meta:
        raise ckpt.CheckpointError(f"{file}: no training config in its metadata (not written by timestep-embed train)")
    try:
        cfg: RunConfig = load_run_config(meta["config"])
    except (ConfigError, ValueError) as exc:
        raise ckpt.CheckpointError(f"{file}: its stored config is invalid: {exc}") from exc
    model = UNet(cfg.model, time_embedder)
    prefix = "ema." if ema else "model."
    try:
        model.load_state_dict(ckpt.strip_prefix(tensors, prefix))
    except RuntimeError as exc:
        raise ckpt.CheckpointError(f"{file}: the {prefix!r} weights do not fit the stored model config: {exc}") from exc
    return model.to(device).eval(), cfg


@torch.no_grad()
def generate(
    model: nn.Module, cfg, device, bf16: bool = False, progress: bool = False, threads: int | str | None = None
) -> torch.Tensor:
    """``cfg.sample.num_samples`` samples (float32 CPU [N, C, H, W] in [-1, 1]) with ``cfg.sample``'s
    sampler, steps and seed; in batches of ``cfg.sample.batch_size``, one generator for all.
    ``threads``: CPU threads (an int, "auto" = timed choice, see distributed.ThreadTuner, None = as is)."""
    from timestep_embed import diffusion as D
    from timestep_embed.distributed import ThreadTuner

    s, m = cfg.sample, cfg.model
    device = torch.device(device)
    schedule = D.schedule_from_config(cfg.diffusion)
    gen = torch.Generator(device).manual_seed(s.seed)
    was_training = model.training
    model.eval()
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    net = model
    if threads is not None and device.type == "cpu":
        tuner = ThreadTuner(threads, probe=3, period=60.0)

        def net(x, t):  # times every model call, so the tuner can keep the faster thread count
            t0 = time.perf_counter()
            y = model(x, t)
            tuner.step(time.perf_counter() - t0)
            return y

    out = []
    with cast:
        for start in range(0, s.num_samples, s.batch_size):
            n = min(s.batch_size, s.num_samples - start)
            x = D.sample(
                net,
                (n, m.in_channels, m.image_size, m.image_size),
                schedule,
                sampler=s.sampler,
                steps=s.steps,
                spacing=s.spacing,
                eta=s.eta,
                generator=gen,
                prediction=cfg.diffusion.prediction,
                clip_x0=s.clip_x0,
                device=device,
                progress=progress,
            )
            out.append(x.float().clamp(-1, 1).cpu())
    model.train(was_training)
    return torch.cat(out)


def save_grid_png(samples: torch.Tensor | np.ndarray, path: str | Path, nrow: int = 10) -> Path:
    """A grid PNG of ``samples`` [N, 1, H, W] in [-1, 1] (white digits on black, as MNIST)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(samples, dtype=np.float32)[:, 0]
    n, h, w = x.shape
    rows = -(-n // nrow)
    grid = np.full((rows * (h + 2) + 2, nrow * (w + 2) + 2), -1.0, dtype=np.float32)
    for i in range(n):
        r, c = divmod(i, nrow)
        grid[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + c * (w + 2) : 2 + c * (w + 2) + w] = x[i]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plt.imsave(path, (grid + 1) / 2, cmap="gray", vmin=0, vmax=1)
    return path


def save_loss_curve(log_path: str | Path, png_path: str | Path) -> Path | None:
    """Plot loss (and its running mean) against step from a training ``log.jsonl``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not recs:
        return None
    steps, loss = np.array([r["step"] for r in recs]), np.array([r["loss"] for r in recs])
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, loss, lw=1, alpha=0.5, label="loss (mean over the log interval)")
    k = max(1, len(loss) // 10)
    if len(loss) > k:
        ax.plot(steps[k - 1 :], np.convolve(loss, np.ones(k) / k, mode="valid"), lw=2, label=f"running mean ({k})")
    ax.set(xlabel="step", ylabel="training loss (MSE)", yscale="log", title="DDPM training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return Path(png_path)


# ----------------------------------------------------------------------------- CLI
def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a run folder or its checkpoint.safetensors")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="sample.* overrides, e.g. sample.steps=250")
    parser.add_argument("--out", default=None, help="output prefix (default: <run folder>/samples) -> .npy + .png")
    parser.add_argument("--raw", action="store_true", help="use the raw weights instead of the EMA")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])


def run_cli(args: argparse.Namespace) -> int:
    from timestep_embed.checkpoint import CheckpointError
    from timestep_embed.config import ConfigError, apply_overrides, config_to_dict
    from timestep_embed.distributed import resolve_bf16
    from timestep_embed.train import load_run_config

    bad = [o for o in args.overrides if not o.startswith("sample.")]
    if bad:
        print(f"error: only sample.* overrides apply here, got {bad[0]!r}")
        return 2
    device = torch.device(
        "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    )
    try:
        model, cfg = load_model(args.checkpoint, ema=not args.raw, device=device)
        cfg = load_run_config(apply_overrides(config_to_dict(cfg), args.overrides))
    except (CheckpointError, ConfigError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    src = Path(args.checkpoint)
    prefix = Path(args.out) if args.out else (src if src.is_dir() else src.parent) / "samples"
    t0 = time.perf_counter()
    x = generate(
        model, cfg, device, bf16=resolve_bf16({"on": True, "off": False}.get(args.bf16, "auto"), device), progress=True
    )
    prefix.parent.mkdir(parents=True, exist_ok=True)
    np.save(prefix.with_suffix(".npy"), x.numpy())
    save_grid_png(x[:100], prefix.with_suffix(".png"))
    print(f"{len(x)} samples in {time.perf_counter() - t0:.1f} s -> {prefix}.npy, {prefix}.png")
    return 0
