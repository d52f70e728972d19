"""Ours beside diffusers and lucidrains' denoising-diffusion-pytorch: same data, same wall-clock budget.

    python scripts/compare_ddpm_peers.py --minutes 2                     # ours and diffusers, 2 min each
    python scripts/compare_ddpm_peers.py --minutes 10 --contenders ours diffusers lucidrains lucidrains_cpu

Contenders (``--contenders``):

* ``ours``: ``timestep_embed.ddpm.run_training`` with the default config (pixel-unshuffle UNet,
  our TimestepEmbedder and diffusion math), sampled as the others are: 100 ancestral steps at noise scale 1.
* ``diffusers``: ``UNet2DModel`` (28x28 -> 14x14 -> 7x7, attention at 7x7, widths matched to our
  parameter count) + ``DDPMScheduler`` (``add_noise``; 100 ancestral ``step`` calls to sample).
* ``lucidrains``: ``Unet(dim=32, dim_mults=(1, 2, 4), channels=1)`` + ``GaussianDiffusion`` with its
  defaults (v-prediction, sigmoid schedule) and DDIM on 100 steps, trained at its ``Trainer``'s
  default learning rate 1e-4 (Adam betas 0.9, 0.99): the small config its README suggests.
* ``lucidrains_cpu``: tuned for this CPU: ``Unet(dim=24, dim_mults=(1, 2, 4))`` (1.5M parameters,
  twice the steps per second), our learning rate 2e-3.

Every contender runs the same loop: the same batches of the same digits, warmup and wall-clock
cosine decay of the learning rate, grad clip, EMA with warmup, bf16 autocast where the CPU has it,
the same threads; 500 samples (seed 0) scored by the same evaluator.

lucidrains' package is not in any extra: its dependencies pull torchvision, whose registry wheels
replace a CPU torch with a CUDA build. Install it beside the CPU torch with
``pip install --no-deps denoising-diffusion-pytorch ema-pytorch accelerate einops``; its package
imports torchvision only for its Trainer's image files, which this script does not use, so a stub
stands in when torchvision is absent.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import sys
import time
import types

import torch
from _common import add_config_args, fail, load_config, markdown_table, write_json

from timestep_embed.ddpm import Runtime, UNet, adamw, load_mnist, run_training, score, update_ema
from timestep_embed.ddpm.runlog import save_samples_png
from timestep_embed.ddpm.train import lr_at
from timestep_embed.progress import progress as progress_bar

CONTENDERS = ("ours", "diffusers", "lucidrains", "lucidrains_cpu")
LUCIDRAINS_HINT = (
    "lucidrains' denoising-diffusion-pytorch is not installed; install it beside the CPU torch with "
    "pip install --no-deps denoising-diffusion-pytorch ema-pytorch accelerate einops "
    "(a plain pip install pulls torchvision and with it a CUDA torch)"
)


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


def train_loop(cfg, minutes: float, model, loss_fn, name: str, lr: float, betas=(0.9, 0.999), progress=True):
    """The loop every contender shares (ours runs the same settings through run_training): returns
    (stats, EMA copy of ``model``). ``loss_fn(model, x0, gen)`` is the contender's training loss."""
    t = cfg.train
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = adamw(model.parameters(), lr, weight_decay=t.weight_decay, betas=betas)  # as run_training's
    data, _ = load_mnist(cfg.data.source, "train")
    gen = torch.Generator().manual_seed(t.seed)
    rt = Runtime.create("cpu", t.bf16, t.threads)  # the training loop's autocast and threads
    elapsed, step = 0.0, 0
    bar_format = "{l_bar}{bar}| {n:.0f}/{total} s{postfix}"
    bar = progress_bar(round(60 * minutes), f"{name} train", "s", enabled=progress, bar_format=bar_format)
    while elapsed < 60 * minutes:
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(elapsed / (60 * minutes), step, t) * lr / t.lr
        x0 = data[torch.randint(0, len(data), (t.batch_size,), generator=gen)]
        with rt.autocast():
            loss = loss_fn(model, x0, gen)
        opt.zero_grad(set_to_none=True)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        update_ema(ema, model, step, t.ema_decay)
        step += 1
        dt = time.perf_counter() - t0
        elapsed += dt
        bar.update(min(dt, bar.total - bar.n))  # the last step overshoots the budget
        bar.set_postfix(loss=f"{loss.item():.4f}", steps_s=f"{step / elapsed:.2f}", refresh=False)
    bar.close()
    stats = {
        "num_params": sum(p.numel() for p in model.parameters()),
        "train_steps": step,
        "train_seconds": round(elapsed, 1),
        "steps_per_s": step / elapsed,
    }
    return stats, ema


def sample_timed(cfg, sample_fn) -> tuple[float, torch.Tensor]:
    """(seconds, samples [N, 1, 28, 28] in [-1, 1]) of ``sample_fn(n, generator)`` in batches."""
    s, rt = cfg.sample, Runtime.create("cpu", cfg.train.bf16)
    g = torch.Generator().manual_seed(s.seed)
    torch.manual_seed(s.seed)  # lucidrains draws from the global generator
    t0 = time.perf_counter()
    with torch.no_grad(), rt.autocast():
        chunks = [
            sample_fn(min(s.batch_size, s.num_samples - start), g).float().clamp(-1, 1)
            for start in range(0, s.num_samples, s.batch_size)
        ]
    return time.perf_counter() - t0, torch.cat(chunks)


def run_diffusers(cfg, minutes: float) -> tuple[dict, torch.Tensor]:
    from diffusers import DDPMScheduler

    torch.manual_seed(cfg.train.seed)
    model = diffusers_unet(sum(p.numel() for p in UNet(cfg.model).parameters()))
    sched = DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear", beta_start=1e-4, beta_end=0.02)

    def loss_fn(net, x0, gen):
        ts = torch.randint(0, 1000, (x0.shape[0],), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        return (net(sched.add_noise(x0, noise, ts), ts).sample.float() - noise).pow(2).mean()

    stats, ema = train_loop(cfg, minutes, model, loss_fn, "diffusers", cfg.train.lr)
    sched.set_timesteps(cfg.sample.steps)  # ancestral on 100 of the 1000 steps, as ours

    def sample_fn(n, g):
        x = torch.randn((n, 1, 28, 28), generator=g)
        for ts in sched.timesteps:
            x = sched.step(ema(x, ts).sample.float(), ts, x, generator=g).prev_sample
        return x

    seconds, samples = sample_timed(cfg, sample_fn)
    return {**stats, "sample_seconds": round(seconds, 1), "config": list(model.config.block_out_channels)}, samples


def import_lucidrains():
    """``denoising_diffusion_pytorch``, with a stand-in torchvision during its import when that is not installed."""
    if importlib.util.find_spec("denoising_diffusion_pytorch") is None:
        fail(LUCIDRAINS_HINT)
    stubs = []
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        # The package imports `transforms` and `utils` from torchvision at import time, for its Trainer's
        # image files only; the models and the diffusion do not touch them. The stand-in leaves
        # sys.modules right after, so other libraries still see torchvision as absent.
        stubs = ["torchvision", "torchvision.transforms", "torchvision.utils"]
        for name in stubs:
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
        sys.modules["torchvision"].utils = sys.modules["torchvision.utils"]
    try:
        return importlib.import_module("denoising_diffusion_pytorch")
    except ImportError as err:
        fail(f"{LUCIDRAINS_HINT} ({err})")
    finally:
        for name in stubs:
            sys.modules.pop(name, None)


def run_lucidrains(cfg, minutes: float, tuned: bool) -> tuple[dict, torch.Tensor]:
    ddp = import_lucidrains()
    torch.manual_seed(cfg.train.seed)
    dim, lr, betas = (24, cfg.train.lr, (0.9, 0.999)) if tuned else (32, 1e-4, (0.9, 0.99))
    unet = ddp.Unet(dim=dim, dim_mults=(1, 2, 4), channels=1)
    diffusion = ddp.GaussianDiffusion(
        unet, image_size=28, timesteps=1000, sampling_timesteps=cfg.sample.steps, auto_normalize=False
    )

    def loss_fn(net, x0, gen):
        return net(x0)  # GaussianDiffusion.forward draws t and noise, returns its (v-prediction) loss

    name = "lucidrains_cpu" if tuned else "lucidrains"
    stats, ema = train_loop(cfg, minutes, diffusion, loss_fn, name, lr, betas)
    seconds, samples = sample_timed(cfg, lambda n, g: ema.sample(batch_size=n))  # DDIM, eta 0
    return {**stats, "sample_seconds": round(seconds, 1), "config": f"Unet(dim={dim}), lr {lr:g}"}, samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=2.0, help="training budget for EACH contender (default 2)")
    add_config_args(p, out="runs/compare_peers")
    p.add_argument("--num-samples", type=int, default=500)
    p.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=["ours", "diffusers"])
    args = p.parse_args()
    if any(c.startswith("lucidrains") for c in args.contenders):
        import_lucidrains()  # fail before anything trains

    # The same sampling for every contender: 100 steps, the ancestral step at noise scale 1, as diffusers'
    # DDPMScheduler samples; our UNet is the config's (the diffusers UNet's width is matched to its parameters)
    over = [f"train.minutes={args.minutes}", f"sample.num_samples={args.num_samples}"]
    over += ["sample.steps=100", "sample.noise_scale=1"]
    cfg = load_config(args, over)
    if cfg.model.augment:  # the peers' loop does not shift their images: the same data for every contender
        fail(f"model.augment = {cfg.model.augment}: the peers train on unshifted images; set model.augment=0")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name in args.contenders:
        if name == "ours":
            rows[name] = run_training(cfg, out / "ours", overwrite=True)
            continue
        stats, samples = (
            run_diffusers(cfg, args.minutes)
            if name == "diffusers"
            else (run_lucidrains(cfg, args.minutes, tuned=name == "lucidrains_cpu"))
        )
        save_samples_png(samples[:100], out / f"{name}_samples.png")
        stats.update(score(cfg, samples))
        rows[name] = stats
        write_json(out / "compare.json", rows)
    keys = ["num_params", "train_steps", "steps_per_s", "sample_seconds", "fd", "confidence", "entropy"]
    ref = next(iter(rows.values()))
    table = [[name, *(r[k] for k in keys)] for name, r in rows.items()]
    table.append(["real vs real", "", "", "", "", ref["real_fd"], ref["real_confidence"], ref["real_entropy"]])
    print(markdown_table([f"contender ({args.minutes:g} min training)", *keys], table))
    write_json(out / "compare.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
