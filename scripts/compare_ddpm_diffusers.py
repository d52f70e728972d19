"""Ours vs diffusers, same data, same wall-clock budget, matched parameter counts.

    python scripts/compare_ddpm_diffusers.py --minutes 2            # default: 2 min of training each
    python scripts/compare_ddpm_diffusers.py --minutes 10 --out runs/compare

Ours: ``timestep_embed.ddpm.train.run_training`` with configs/mnist.yaml (pixel-unshuffle UNet, our
TimestepEmbedder, our diffusion.py, ancestral sampling on 100 evenly strided steps).
Diffusers: ``UNet2DModel`` (its usual 28x28 -> 14x14 -> 7x7 layout, attention at 7x7, widths chosen to
match our parameter count) + ``DDPMScheduler`` (``add_noise`` for training; ``set_timesteps(100)`` +
``step`` for ancestral sampling). Both get the same training loop settings: batch size, AdamW, LR
warmup + wall-clock cosine, grad clip, EMA with warmup, bf16 autocast and thread choice. Both are
scored by the same evaluator (timestep_embed.ddpm.evaluate) on the same number of samples.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from timestep_embed.ddpm.config import load_run_config
from timestep_embed.ddpm.data import load_mnist
from timestep_embed.ddpm.evaluate import evaluate_samples
from timestep_embed.ddpm.plots import save_grid_png
from timestep_embed.ddpm.runtime import ThreadTuner, resolve_bf16
from timestep_embed.ddpm.state import update_ema
from timestep_embed.ddpm.train import lr_at, run_training
from timestep_embed.ddpm.unet import UNet
from timestep_embed.files import atomic_write_bytes


def diffusers_unet(target_params: int):
    """UNet2DModel with block_out_channels (w, 2w, 2w), one ResNet per level, attention at 7x7; w chosen
    so its parameter count is closest to ``target_params``."""
    from diffusers import UNet2DModel

    def build(w: int):
        groups = next(g for g in (32, 16, 8, 4) if w % g == 0)
        return UNet2DModel(
            sample_size=28,
            in_channels=1,
            out_channels=1,
            block_out_channels=(w, 2 * w, 2 * w),
            layers_per_block=1,
            norm_num_groups=groups,
            down_block_types=("DownBlock2D", "DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D", "UpBlock2D"),
        )

    best = min(range(16, 97, 4), key=lambda w: abs(sum(p.numel() for p in build(w).parameters()) - target_params))
    return build(best)


def train_diffusers(cfg, minutes: float, progress: bool = True) -> tuple[dict, torch.Tensor]:
    """The same loop settings as train.train_loop, with diffusers' model and scheduler."""
    from diffusers import DDPMScheduler
    from tqdm.auto import tqdm

    t = cfg.train
    torch.manual_seed(t.seed)
    ours_params = sum(p.numel() for p in UNet(cfg.model).parameters())
    model = diffusers_unet(ours_params)
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    sched = DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear", beta_start=1e-4, beta_end=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    data, _ = load_mnist(cfg.data.source, "train")
    gen = torch.Generator().manual_seed(t.seed)
    bf16 = resolve_bf16(t.bf16, torch.device("cpu"))

    def cast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    tuner, elapsed, step = ThreadTuner(t.threads), 0.0, 0
    bar = tqdm(
        total=round(60 * minutes),
        desc="diffusers train",
        disable=not progress,
        bar_format="{l_bar}{bar}| {n:.0f}/{total} s{postfix}",
    )
    while elapsed < 60 * minutes:
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(elapsed / (60 * minutes), step, t)
        x0 = data[torch.randint(0, len(data), (t.batch_size,), generator=gen)]
        ts = torch.randint(0, 1000, (t.batch_size,), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        with cast():
            out = model(sched.add_noise(x0, noise, ts), ts).sample
        loss = (out.float() - noise).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        update_ema(ema, model, step, t.ema_decay)
        step += 1
        dt = time.perf_counter() - t0
        elapsed += dt
        tuner.step(dt)
        bar.update(dt)
        bar.set_postfix(loss=f"{loss.item():.4f}", steps_s=f"{step / elapsed:.2f}")
    bar.close()
    # Ancestral sampling with DDPMScheduler on 100 of the 1000 steps, the same seed and sample count as ours.
    s = cfg.sample
    t0 = time.perf_counter()
    sched.set_timesteps(s.steps)
    g = torch.Generator().manual_seed(s.seed)
    chunks = []
    with torch.no_grad(), cast():
        for start in range(0, s.num_samples, s.batch_size):
            x = torch.randn((min(s.batch_size, s.num_samples - start), 1, 28, 28), generator=g)
            for ts in sched.timesteps:
                x = sched.step(ema(x, ts).sample.float(), ts, x, generator=g).prev_sample
            chunks.append(x.float().clamp(-1, 1))
    stats = {
        "num_params": sum(p.numel() for p in model.parameters()),
        "train_steps": step,
        "train_seconds": round(elapsed, 1),
        "steps_per_s": step / elapsed,
        "sample_seconds": round(time.perf_counter() - t0, 1),
        "block_out_channels": list(model.config.block_out_channels),
    }
    return stats, torch.cat(chunks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=2.0, help="training budget for EACH model (default 2)")
    p.add_argument("--config", default="mnist", help="a shipped config name or a path")
    p.add_argument("--out", default="runs/compare_diffusers", help="folder for both runs and compare.json")
    p.add_argument("--num-samples", type=int, default=500)
    p.add_argument("--only", choices=["ours", "diffusers"], default=None, help="run one side only")
    args = p.parse_args()

    over = [f"train.minutes={args.minutes}", "train.job_minutes=null", f"sample.num_samples={args.num_samples}"]
    cfg = load_run_config(args.config, over)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    if args.only in (None, "ours"):
        m = run_training(cfg, out / "ours", overwrite=True)
        rows["ours"] = m
    if args.only in (None, "diffusers"):
        stats, samples = train_diffusers(cfg, args.minutes)
        save_grid_png(samples[:100], out / "diffusers_samples.png")
        stats.update(evaluate_samples(samples, cfg.eval.classifier, data_source=cfg.data.source))
        rows["diffusers"] = stats
    keys = ["num_params", "train_steps", "steps_per_s", "sample_seconds", "fd", "confidence", "entropy"]
    print(f"\n| model ({args.minutes:g} min training) | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, r in rows.items():
        cells = [
            f"{r[k]:.3g}" if isinstance(r[k], float) and k != "fd" else f"{r[k]:.1f}" if k == "fd" else str(r[k])
            for k in keys
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    ref = next(iter(rows.values()))
    print(f"| real vs real | | | | | {ref['real_fd']:.3g} | {ref['real_confidence']:.3g} | {ref['real_entropy']:.3g} |")
    atomic_write_bytes(out / "compare.json", json.dumps(rows, indent=2, default=str).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
