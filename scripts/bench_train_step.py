"""Cost of one training step of the default MNIST run, and what AdamW's fused kernel saves of it.

Two copies of the config's UNet (the same initial weights), one with ``torch.optim.AdamW`` as it runs
by default on CPU (a Python loop over the parameter tensors), one with the training loop's optimizer
(``timestep_embed.ddpm.train.adamw``: the fused kernel where torch has one). Timed in interleaved
rounds (scripts/_timing.py), median milliseconds:

* ``optimizer step``: ``opt.step()`` alone, on gradients left by one backward pass;
* ``training step``: what the loop does per step: the shifts of ``model.augment`` (if any), forward under the
  run's autocast, backward, clip, optimizer step, EMA update.

The ratio is against the per-tensor loop measured in the same run.

    python scripts/bench_train_step.py                       # the default run's UNet, batch 64
    python scripts/bench_train_step.py --set "model.channels=[64,128]" --threads 1
"""

from __future__ import annotations

import argparse
import copy
import functools

import torch
from _common import add_config_args, fail, load_config
from _timing import cpu_name, interleaved_medians
from torch import nn

from timestep_embed.ddpm import Runtime, UNet, adamw, schedule_from_config, training_loss, update_ema
from timestep_embed.ddpm.data import random_shifts


def contenders(cfg, fused: bool):
    """(optimizer-step callable, training-step callable, fused?, parameter count) for one model copy."""
    t = cfg.train
    torch.manual_seed(t.seed)
    model = UNet(cfg.model)
    ema = copy.deepcopy(model).requires_grad_(False)
    betas = (0.9, t.adam_beta2)
    if fused:
        opt = adamw(model.parameters(), t.lr, weight_decay=t.weight_decay, betas=betas)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=t.lr, betas=betas, weight_decay=t.weight_decay)
    schedule, gen = schedule_from_config(cfg.diffusion), torch.Generator().manual_seed(t.seed)
    x0 = torch.rand(t.batch_size, cfg.model.in_channels, cfg.model.image_size, cfg.model.image_size) * 2 - 1
    rt = Runtime.create("cpu", t.bf16)  # the loop's autocast
    count = [0]

    def train_step():
        x, denoiser = x0, model
        if cfg.model.augment:  # as the loop does
            x, shift = random_shifts(x0, cfg.model.augment, gen)
            denoiser = functools.partial(model, shift=shift)
        with rt.autocast():
            loss = training_loss(
                denoiser, x, schedule, generator=gen, prediction=cfg.diffusion.prediction,
                min_snr_gamma=cfg.diffusion.min_snr_gamma,
            )  # fmt: skip
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        update_ema(ema, model, count[0], t.ema_decay)
        count[0] += 1

    train_step()  # leaves gradients for the optimizer-only timing
    return opt.step, train_step, opt.defaults["fused"], sum(p.numel() for p in model.parameters())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_args(parser)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timing per row")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.budget <= 0:
        fail(f"--threads must be >= 1 and --budget > 0, got {args.threads} and {args.budget}")
    cfg = load_config(args)
    torch.set_num_threads(args.threads)
    loop_opt, loop_train, _, params = contenders(cfg, fused=False)
    fused_opt, fused_train, fused, _ = contenders(cfg, fused=True)
    if not fused:
        print("note: this torch has no fused AdamW kernel for the CPU (torch < 2.4): both rows run the loop")
    print(
        f"torch {torch.__version__}, {cpu_name()}, {args.threads} threads, UNet {params / 1e6:.2f}M "
        f"parameters, batch {cfg.train.batch_size}; median ms of interleaved rounds; ratio = fused / per-tensor loop"
    )
    print(f"{'':16} {'per-tensor loop':>16} {'fused':>8} {'ratio':>6}")
    for name, loop, fast, rounds in (
        ("optimizer step", loop_opt, fused_opt, 50),
        ("training step", loop_train, fused_train, 10),
    ):
        times = interleaved_medians({"loop": loop, "fused": fast}, min_rounds=rounds, budget_s=args.budget)
        loop_ms, fused_ms = times["loop"] * 1e3, times["fused"] * 1e3
        print(f"{name:16} {loop_ms:16.1f} {fused_ms:8.1f} {fused_ms / loop_ms:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
