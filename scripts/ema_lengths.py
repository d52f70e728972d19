#!/usr/bin/env python
"""EMA length, measured inside one training run: the run's own EMA beside power-function EMAs.

    python scripts/ema_lengths.py                                   # the default MNIST run
    python scripts/ema_lengths.py --gammas 2 4 16 --set train.steps=2000

One run trains once; besides its own EMA (warmup ``min(0.999, (1+n)/(10+n))``, ``ddpm.train.update_ema``)
it keeps one average per ``gamma`` with the power-function profile of Karras et al. 2024 ("EDM2",
eq. 2), decay ``(1 - 1/n)^(gamma+1)`` at step n: each averages about the last ``1/(gamma+1)`` of the
run, whatever its length (the run's warmup is close to gamma = 8). Every average is sampled with the
run's sampler and its first seed (``sample.seed``) and scored by the run's evaluator, plus the raw weights, so
the rows differ only in the averaging. Writes OUT/ema_lengths.json and prints the table.

The extra averages are updated by the training loop's per-step callback; their cost is counted in the
training budget, so a run on the clock makes a few fewer steps.
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch
from _common import SCORES, add_config_args, fail, load_config, markdown_table, score_seeds, write_json

from timestep_embed.ddpm import Runtime, load_model, run_training


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gammas", nargs="+", type=float, default=[1, 2, 4, 16, 32, 64])
    add_config_args(parser, out="runs/ema_lengths")
    args = parser.parse_args(argv)
    if any(g < 0 for g in args.gammas):
        fail(f"--gammas must be >= 0, got {args.gammas}")
    cfg = load_config(args)
    if not cfg.eval.enabled:
        fail("eval.enabled = false: this script scores every average with the evaluator")
    averages: dict[float, torch.nn.Module] = {}

    @torch.no_grad()
    def update_averages(step, model, ema, loss):
        if not averages:  # the first step: start every average where the run's own EMA starts
            averages.update({g: copy.deepcopy(ema) for g in args.gammas})
        for gamma, avg in averages.items():
            decay = (1 - 1 / step) ** (gamma + 1)
            for p_avg, p in zip(avg.parameters(), model.parameters(), strict=True):
                p_avg.lerp_(p, 1 - decay)

    metrics = run_training(cfg, args.out / "run", overwrite=True, callback=update_averages)
    rt = Runtime.create(bf16=cfg.train.bf16)
    ema, _ = load_model(args.out / "run", ema=True, device=rt.device)
    raw, _ = load_model(args.out / "run", ema=False, device=rt.device)
    rows = {}
    # every row sampled with the one seed and scored alike (the run's own metrics average eval.samplings seeds)
    for name, net in [("run's EMA (warmup (1+n)/(10+n))", ema), ("raw weights", raw),
                      *((f"power EMA, gamma {g:g}", a) for g, a in averages.items())]:  # fmt: skip
        rows[name] = {k: v for k, v in score_seeds(net.to(rt.device), cfg, rt, [cfg.sample.seed])[0].items()}
    write_json(args.out / "ema_lengths.json", {"train_steps": metrics["train_steps"], "real_fd": metrics.get("real_fd"),
                                                "rows": rows})  # fmt: skip
    print(f"{metrics['train_steps']} training steps; real vs real FD {metrics.get('real_fd', float('nan')):.1f}")
    print(markdown_table(["weights", *SCORES], ([name, *(r[k] for k in SCORES)] for name, r in rows.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
