#!/usr/bin/env python
"""A/B of training levers for the MNIST DDPM: one change at a time from a fixed reference, equal steps.

    python scripts/levers.py --steps 2000                       # every lever, seed 0
    python scripts/levers.py --steps 2000 --levers base v_pred --seeds 0 1

Every variant trains the same number of steps from the same seed (a wall-clock budget would let the
machine's load pick the winner) and is scored on N = 500 samples by the same evaluator; levers that
change the cost of a step (width, batch) are not in this list for that reason. Writes OUT/levers.json
and OUT/levers.md; a variant finished with the same config is reused (an interrupted sweep resumes), another is
trained again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _common import add_config_args, command_line, finished_with, load_config, markdown_table, write_json

from timestep_embed.ddpm import run_training
from timestep_embed.files import atomic_write_bytes

# The reference every lever changes: the default run of 0.1 (64/128 channels, eps prediction, linear
# schedule, Min-SNR-5, ancestral sampling on 100 steps at noise scale 1), pinned so the recorded table
# stays reproducible.
REFERENCE = ["diffusion.schedule=linear", "sample.steps=100", "model.channels=[64,128]", "sample.noise_scale=1"]
LEVERS = {
    "base": [],
    "v_pred": ["diffusion.prediction=v"],
    "no_min_snr": ["diffusion.min_snr_gamma=null"],
    "cosine": ["diffusion.schedule=cosine"],
    "v_pred_cosine": ["diffusion.prediction=v", "diffusion.schedule=cosine"],
    # rectified flow (SD3): x_t = (1 - t) x0 + t eps, velocity target, logit-normal t, Euler sampling
    "flow": ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"],
    "lr_1e-3": ["train.lr=1e-3"],
    "cosine_lr_1e-3": ["diffusion.schedule=cosine", "train.lr=1e-3"],
    # EDM's training noise levels: ln sigma ~ N(-1.2, 1.2^2) mapped to the schedule's steps, in place of uniform steps
    "lognormal": ["diffusion.lognormal_mean=-1.2"],
    # EMA length is not a lever here: at 2000 steps the warmup (1+n)/(10+n) stays below any train.ema_decay
    # cap >= 0.996, so a longer cap changes nothing; scripts/ema_lengths.py compares averages in one run.
}
COLUMNS = ("fd", "confidence", "entropy", "final_loss", "train_seconds", "sample_seconds")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=list(LEVERS), metavar="NAME")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps of every variant")
    add_config_args(parser, out="runs/levers")
    args = parser.parse_args(argv)
    rows = []
    for seed in args.seeds:
        for name in args.levers:
            run = args.out / name / f"seed{seed}"
            fixed = [*REFERENCE, f"train.steps={args.steps}", f"train.seed={seed}", "train.snapshot_every=0"]
            cfg = load_config(args, [*fixed, *LEVERS[name]])
            if not finished_with(run, cfg):
                t0 = time.time()
                run_training(cfg, run, overwrite=True, progress=False)
                print(f"{name} seed {seed}: {time.time() - t0:.0f} s", flush=True)
            metrics = json.loads((run / "metrics.json").read_text())
            rows.append({"lever": name, "seed": seed, "changes": LEVERS[name], **{c: metrics.get(c) for c in COLUMNS}})
            rows[-1]["real_fd"] = metrics.get("real_fd")
    table = markdown_table(
        ["lever", "changes", "seed", *COLUMNS],
        ([r["lever"], " ".join(r["changes"]) or "-", r["seed"], *(r[c] for c in COLUMNS)] for r in rows),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "levers.json", rows)
    atomic_write_bytes(args.out / "levers.md", f"`{command_line()}`\n\n{table}\n".encode())
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
