#!/usr/bin/env python
"""EMA length, measured inside one training run: the main job's EMA beside power-function EMAs.

    python scripts/ema_lengths.py                                   # the main job, ~12 min on 2 cores
    python scripts/ema_lengths.py --gammas 2 4 16 --set train.steps=2000

One run trains once; besides its own EMA (warmup ``min(0.999, (1+n)/(10+n))``, see
``ddpm/state.py``) it keeps one average per ``gamma`` with the power-function profile of Karras et al.
2024 ("EDM2", eq. 2), decay ``(1 - 1/n)^(gamma+1)`` at step n: each averages about the last
``1/(gamma+1)`` of the run, whatever its length (the main job's warmup is close to gamma = 8). Every
average is sampled with the run's sampler and seed and scored by the run's evaluator, plus the raw
weights, so the rows differ only in the averaging. Writes OUT/ema_lengths.json and prints the table.

The extra averages are updated after the run's own EMA, by wrapping ``ddpm.train.update_ema`` for the
duration of the run (their cost is counted in the training budget, so the run makes a few fewer steps).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from unittest import mock

import torch

from timestep_embed.ddpm import train
from timestep_embed.ddpm.checkpoint import load_model
from timestep_embed.ddpm.config import load_run_config
from timestep_embed.ddpm.evaluate import evaluate_samples
from timestep_embed.ddpm.runtime import resolve_bf16
from timestep_embed.ddpm.sample import generate
from timestep_embed.files import atomic_write_bytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gammas", nargs="+", type=float, default=[1, 2, 4, 16, 32, 64])
    parser.add_argument("--config", default="mnist", help="a shipped config name or a path")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--out", type=Path, default=Path("runs/ema_lengths"))
    args = parser.parse_args(argv)
    if any(g < 0 for g in args.gammas):
        print(f"error: --gammas must be >= 0, got {args.gammas}", file=sys.stderr)
        return 2
    cfg = load_run_config(args.config, args.set)
    if not cfg.eval.enabled:
        print("error: eval.enabled = false: this script scores every average with the evaluator", file=sys.stderr)
        return 2
    averages: dict[float, torch.nn.Module] = {}
    own_update = train.update_ema

    def update_all(ema, model, step, max_decay):
        own_update(ema, model, step, max_decay)
        if not averages:  # the first step: start every average where the run's own EMA starts
            averages.update({g: copy.deepcopy(ema) for g in args.gammas})
        for gamma, avg in averages.items():
            decay = (1 - 1 / (step + 1)) ** (gamma + 1)
            for p_avg, p in zip(avg.parameters(), model.parameters(), strict=True):
                p_avg.lerp_(p, 1 - decay)

    with mock.patch.object(train, "update_ema", update_all):
        metrics = train.run_training(cfg, args.out / "run", overwrite=True)
    keys = ("fd", "confidence", "entropy")
    rows = {"run's EMA (warmup (1+n)/(10+n))": {k: metrics[k] for k in keys}}
    device = torch.device(metrics["device"])
    raw, _ = load_model(args.out / "run", ema=False, device=device)
    for name, net in [("raw weights", raw), *((f"power EMA, gamma {g:g}", a) for g, a in averages.items())]:
        x = generate(net, cfg, device, bf16=resolve_bf16(cfg.train.bf16, device), threads=cfg.train.threads)
        scores = evaluate_samples(x, cfg.eval.classifier, data_source=cfg.data.source)
        rows[name] = {k: scores[k] for k in keys}
    result = {"train_steps": metrics["train_steps"], "real_fd": metrics.get("real_fd"), "rows": rows}
    atomic_write_bytes(args.out / "ema_lengths.json", (json.dumps(result, indent=2) + "\n").encode())
    print(f"{metrics['train_steps']} training steps; real vs real FD {metrics.get('real_fd', float('nan')):.1f}")
    print(f"{'weights':40s} {'FD':>7s} {'conf':>6s} {'entropy':>7s}")
    for name, r in rows.items():
        print(f"{name:40s} {r['fd']:7.1f} {r['confidence']:6.3f} {r['entropy']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
