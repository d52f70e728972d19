#!/usr/bin/env python
"""Memorisation on a small training set: the UNet trained on K digits a class for a fixed number of steps, one
run per row of overrides, each scored by the shipped evaluator beside the copy check.

    python scripts/memorisation.py --per-class 40 --steps 4000 --rows model.dropout=0 \
        model.augment=0.5,model.dropout=0.1

The K digits a class are the first K of that class in the built-in training split. They are written with the
built-in 1000 held-out digits as an IDX folder (OUT/data_K) that ``data.source`` names, so the training sees only
them. FD is the shipped evaluator's against the held-out digits (the same numbers as a run on the built-in data);
the real FD is that of the training digits themselves (as many as the samples, at most K * 10). ``copies`` is the
share of samples nearer (L2 in pixels) to one of those training digits than 99% of the held-out digits are
(docs/ddpm.md), ``nearest ratio`` the samples' median nearest-training distance over the held-out digits';
``copies, any shift`` the same check against the training digits moved by every shift ``model.augment`` draws
(up to SHIFT_PIXELS each way, for the samples and the held-out digits alike): a shifted copy counts there. Every
row trains the same steps from the same seed, so the machine's load cannot pick the winner. A row whose folder
holds a finished run of the same config reuses it, so an interrupted table resumes. Writes OUT/memorisation.json,
OUT/memorisation.md and, in each row's run folder, nearest.png (the first samples over their nearest training
digits).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import add_config_args, command_line, fail, finished_with, load_config, markdown_table, write_json

from timestep_embed.ddpm import (
    ConfigError,
    Runtime,
    evaluate_samples,
    generate,
    load_mnist,
    load_model,
    run_training,
)
from timestep_embed.ddpm.data import SHIFT_PIXELS, TRAIN_PER_CLASS, crop_to_28, shift_images
from timestep_embed.ddpm.evaluate import copy_scores, nearest_distances
from timestep_embed.ddpm.runlog import save_samples_png
from timestep_embed.files import atomic_write_bytes

ROWS = ["model.dropout=0", "model.augment=0.5,model.dropout=0.1"]
OWN_KEYS = ("data.source", "train.minutes", "train.steps", "eval.enabled")
PICTURED = 12  # samples in RUN/nearest.png, each over its nearest training digit


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8, 1 to 3 dims) as an IDX file: magic 0x0000 08 NDIM, big-endian sizes, the bytes."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_subset(folder: Path, per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``per_class`` training digits of each class and all held-out digits as IDX files in ``folder``
    (train-* and t10k-*); returns (training digits, held-out digits), float32 [N, 1, 28, 28] in [-1, 1]."""
    x, y = load_mnist("builtin", "train")
    keep = torch.cat([torch.nonzero(y == c).flatten()[:per_class] for c in range(10)]).sort().values
    held_x, held_y = load_mnist("builtin", "heldout")
    for prefix, images, labels in (("train", x[keep], y[keep]), ("t10k", held_x, held_y)):
        pixels = ((images[:, 0] + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()  # the stored bytes
        atomic_write_bytes(folder / f"{prefix}-images-idx3-ubyte", idx_bytes(pixels))
        atomic_write_bytes(folder / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels.numpy().astype(np.uint8)))
    return x[keep], held_x


def every_shift(x: torch.Tensor, s: int = SHIFT_PIXELS) -> torch.Tensor:
    """``x`` [N, C, H, W] moved by every (dy, dx) in -s..s (`shift_images`, as `random_shifts` moves them):
    [(2s+1)^2 N, C, H, W], one move after another."""
    span = range(-s, s + 1)
    moves = torch.tensor([(dy, dx) for dy in span for dx in span])
    return shift_images(x.repeat(len(moves), 1, 1, 1), moves.repeat_interleave(len(x), 0))


def slug(row: str) -> str:
    """A folder name for a row of overrides: the row itself, or its start and a hash of it when it is long."""
    name = re.sub(r"[^A-Za-z0-9.=_-]+", "_", row).replace("=", "-") or "base"
    return name if len(name) <= 80 else f"{name[:70]}_{hashlib.sha256(row.encode()).hexdigest()[:9]}"


def split_row(row: str) -> list[str]:
    """``KEY=VALUE[,KEY=VALUE]`` -> the overrides; a comma splits only before a ``key=`` (``model.channels=[64,128]``
    is one override)."""
    return re.split(r",(?=\s*[A-Za-z_][\w.]*=)", row)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=40, help=f"training digits a class, 1..{TRAIN_PER_CLASS}")
    parser.add_argument("--steps", type=int, default=4000, help="training steps of every row")
    parser.add_argument("--rows", nargs="+", default=ROWS, metavar="KEY=VALUE[,KEY=VALUE]")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="sampling seeds scored per row")
    add_config_args(parser, out="runs/memorisation")
    args = parser.parse_args(argv)
    if not 1 <= args.per_class <= TRAIN_PER_CLASS:
        fail(f"--per-class {args.per_class}: expected 1..{TRAIN_PER_CLASS} (the built-in training digits a class)")
    if args.steps < 1:
        fail(f"--steps {args.steps}: expected a positive number of training steps")
    if args.out.exists() and not args.out.is_dir():
        fail(f"--out {str(args.out)!r} is a file: name a folder")
    for given in (*args.set, *(o for row in args.rows for o in split_row(row))):
        if given.strip().startswith(OWN_KEYS):
            fail(f"{given!r}: the script sets {', '.join(OWN_KEYS)} itself (--per-class, --steps)")
    data = args.out / f"data_{args.per_class}"
    fixed = ["train.minutes=null", f"train.steps={args.steps}", "train.snapshot_every=0", "eval.enabled=false"]
    configs = {row: load_config(args, [*fixed, *split_row(row)]).replace("data", source=str(data)) for row in args.rows}
    first_cfg = next(iter(configs.values()))  # the sampling and batch settings the rows share (--config, --set)
    for seed in args.seeds:  # checked before any training
        try:
            first_cfg.replace("sample", seed=seed)
        except ConfigError as err:
            fail(f"--seeds {seed}: {err}")
    train_x, held_x = write_subset(data, args.per_class)
    held = nearest_distances(held_x, train_x)  # the held-out digits' nearest-training distances
    train_moved = every_shift(train_x)
    held_moved = nearest_distances(held_x, train_moved)  # the same, to the training digits moved by any shift
    # the real FD at the samples' count, at most the K * 10 training digits (as a run's "real" row)
    n = min(len(train_x), first_cfg.sample.num_samples)
    real = train_x[torch.randperm(len(train_x), generator=torch.Generator().manual_seed(1234))[:n]]
    real_fd = evaluate_samples(real, references=False)["fd"]  # the shipped evaluator (built-in held-out digits)
    results = []
    for row, cfg in configs.items():
        run = args.out / f"k{args.per_class}_s{args.steps}_{slug(row)}"
        if not finished_with(run, cfg):
            t0 = time.time()
            run_training(cfg, run, overwrite=True, progress=False)
            print(f"{row}: trained in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        rt = Runtime.create(bf16=cfg.train.bf16)
        model, run_cfg = load_model(run, ema=True, device=rt.device)
        seeds = []
        for seed in args.seeds:
            x = crop_to_28(generate(model, run_cfg.replace("sample", seed=seed), rt))
            scores = evaluate_samples(x, references=False)
            seeds.append({"seed": seed, "fd": scores["fd"], "confidence": scores["confidence"],
                          **copy_scores(x, train_x, held),
                          "copies_any_shift": copy_scores(x, train_moved, held_moved)["copies"]})  # fmt: skip
            if seed == args.seeds[0]:  # a picture of the first sampling: samples over their nearest training digits
                first = x[:PICTURED]
                nearest = train_x[torch.cdist(first.flatten(1), train_x.flatten(1)).argmin(1)]
                caption = (f"{row}, {10 * args.per_class} training digits: samples (top), the nearest training "
                           f"digit of each (bottom); copies {100 * seeds[-1]['copies']:.1f}%")  # fmt: skip
                save_samples_png(torch.cat([first, nearest]), run / "nearest.png", nrow=len(first), caption=caption)
        results.append({"row": row, "run": str(run), "seeds": seeds})
    write_json(args.out / "memorisation.json", {"per_class": args.per_class, "steps": args.steps,
                                                "real_fd": real_fd, "real_num": n, "rows": results})  # fmt: skip
    digits, batch = 10 * args.per_class, first_cfg.train.batch_size
    header = ["overrides", "FD", "FD at seeds", "confidence", "copies (held-out 1%)", "copies, any shift",
              "nearest ratio"]  # fmt: skip
    rows = []
    for r in results:
        keys = ("fd", "confidence", "copies", "copies_any_shift", "nearest_ratio")
        mean = {k: statistics.fmean(s[k] for s in r["seeds"]) for k in keys}
        rows.append([f"`{r['row']}`", f"{mean['fd']:.2f}",
                     " / ".join(f"{s['fd']:.2f}" for s in r["seeds"]), f"{mean['confidence']:.3f}",
                     f"{100 * mean['copies']:.2f}%", f"{100 * mean['copies_any_shift']:.2f}%",
                     f"{mean['nearest_ratio']:.2f}"])  # fmt: skip
    text = (f"`{command_line()}`\n\n{digits} training digits, {args.steps} steps of {batch} "
            f"({args.steps * batch / digits:.0f} epochs); FD of {n} of those digits (real): {real_fd:.2f}\n\n"
            f"{markdown_table(header, rows)}\n")  # fmt: skip
    atomic_write_bytes(args.out / "memorisation.md", text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
