#!/usr/bin/env python
"""One checkpoint, many samplers: FD, confidence and class entropy per sampler, over several sampling seeds.

    python scripts/sampler_table.py runs/ddpm_mnist                 # the default rows, seeds 0 1 2
    python scripts/sampler_table.py runs/ddpm_mnist --seeds 0 --rows sample.steps=50 \\
        "sample.sampler=dpm++2m,sample.spacing=karras"
    python scripts/sampler_table.py runs/ddpm_mnist --plot noise.png --rows sample.noise_scale=1 \\
        sample.noise_scale=0.95 sample.noise_scale=0.9            # the ancestral noise scale (docs/ddpm.md)

Each row is a comma-separated list of ``sample.*`` overrides on the run's own config; every row draws
the run's ``sample.num_samples`` digits from the EMA weights at each seed and scores them with the run's
evaluator. The FD of N = 500 samples moves by several units with the seed alone, so the table gives the
mean over seeds and the spread (max - min). Writes OUT (default RUN/sampler_table.json), prints the
table in markdown and, with ``--plot``, draws FD and confidence per row (mean, bars from min to max
over the seeds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from _common import command_line, fail, markdown_table, mean_spread, score_seeds, write_json

from timestep_embed.analysis.figures import new_figure
from timestep_embed.ddpm import ConfigError, Runtime, load_model, run_config
from timestep_embed.files import save_figure

ROWS = [
    "sample.sampler=ddpm,sample.steps=100",
    "sample.sampler=ddpm,sample.steps=50",
    "sample.sampler=ddpm,sample.steps=20",
    "sample.sampler=ddim,sample.steps=20",
    "sample.sampler=dpm++2m,sample.steps=20",
    "sample.sampler=dpm++2m,sample.steps=20,sample.spacing=karras",
    "sample.sampler=dpm++2m,sample.steps=10,sample.spacing=karras",
    "sample.sampler=heun,sample.steps=10,sample.spacing=karras",
]


def plot_rows(results: list[dict], path: Path, title: str) -> Path:
    """FD and confidence per row: the mean over seeds, with a bar from the lowest to the highest seed."""
    labels = [r["row"].replace("sample.", "").replace(",", "\n") for r in results]
    fig = new_figure(max(6.0, 1.1 * len(results) + 2), 3.6)
    for k, (key, name) in enumerate((("fd", "FD (lower is better)"), ("confidence", "confidence (higher is better)"))):
        ax = fig.add_subplot(1, 2, k + 1)
        values = [[x[key] for x in r["seeds"]] for r in results]
        mean = [statistics.fmean(v) for v in values]
        low = [m - min(v) for m, v in zip(mean, values, strict=True)]
        high = [max(v) - m for m, v in zip(mean, values, strict=True)]
        ax.errorbar(range(len(results)), mean, yerr=[low, high], fmt="o", capsize=4)
        ax.set_xticks(range(len(results)), labels, fontsize=7, rotation=30, ha="right")
        ax.set(ylabel=name)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path, 120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder with checkpoint.safetensors (timestep-embed train)")
    parser.add_argument("--rows", nargs="+", default=ROWS, metavar="KEY=VALUE[,KEY=VALUE]")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None, help="the JSON to write (default RUN/sampler_table.json)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG", help="also draw FD and confidence per row")
    args = parser.parse_args(argv)
    if not (args.run / "checkpoint.safetensors").is_file():
        fail(f"run = {str(args.run)!r}: no checkpoint.safetensors there (train one first)")
    rt = Runtime.create(bf16=run_config(args.run).train.bf16)  # the run's own autocast
    model, cfg = load_model(args.run, ema=True, device=rt.device)
    if not cfg.eval.enabled:
        fail("the run has eval.enabled = false: this script scores every row with the evaluator")
    try:
        configs = {row: cfg.with_overrides(row.split(",")) for row in args.rows}
    except ConfigError as err:
        fail(f"--rows: {err}")
    results = []
    for row, base in configs.items():
        scores = score_seeds(model, base, rt, args.seeds)
        for s in scores:
            print(f"{row} seed {s['seed']}: {s['seconds']:.0f} s, FD {s['fd']:.1f}", file=sys.stderr, flush=True)
        sample = base.sample
        calls = 2 * sample.steps - 1 if sample.sampler == "heun" else sample.steps
        results.append({"row": row, "sampler": sample.sampler, "steps": sample.steps, "spacing": sample.spacing,
                        "calls": calls, "seeds": scores})  # fmt: skip
    write_json(args.out or args.run / "sampler_table.json", {"run": str(args.run), "rows": results})
    if args.plot is not None:
        seeds = ", ".join(map(str, args.seeds))
        plot_rows(results, args.plot, f"{args.run.name}: {cfg.sample.num_samples} samples per seed, seeds {seeds}")
    header = ["sampling (overrides)", "model calls", f"time for {cfg.sample.num_samples} digits", "FD mean (spread)",
              f"FD at seeds {' / '.join(map(str, args.seeds))}", "confidence", "class entropy"]  # fmt: skip
    rows = []
    for r in results:
        fd, spread = mean_spread(r["seeds"], "fd")
        per_seed = " / ".join(f"{x['fd']:.1f}" for x in r["seeds"])
        rows.append([f"`{r['row']}`", r["calls"], f"{statistics.fmean(x['seconds'] for x in r['seeds']):.0f} s",
                     f"{fd:.1f} ({spread:.1f})", per_seed, f"{mean_spread(r['seeds'], 'confidence')[0]:.3f}",
                     f"{mean_spread(r['seeds'], 'entropy')[0]:.3f}"])  # fmt: skip
    print(f"`{command_line()}`\n")
    print(markdown_table(header, rows))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    sys.exit(main())
