"""Speed and accuracy of the sinusoidal core against diffusers, measured in one run.

For N timesteps x dim and each kind of input, the contenders run interleaved (see
scripts/_timing.py) and the table reports their median time divided by the median
of diffusers' ``get_timestep_embedding`` (flip_sin_to_cos=True, downscale_freq_shift=0: the flags of
diffusers' UNets) in the same run:

* ``ours``: timestep_embed.get_timestep_embedding, same flags; the cell says whether its output is
  ``torch.equal`` to diffusers';
* ``module``: SinusoidalEmbedding(dim, "adm", num_timesteps=1000), whose integer-step cache serves
  integer timesteps (integer kinds only);
* ``precise``: sinusoidal_embedding(..., precise=True), float64 phases (a different accuracy class).

Kinds of input: fractional values in [0, 1000) as float32, float16, bfloat16 and float64;
random integer steps (int64); one integer step shared by the batch (every sampling step); and
per-token timesteps (16 distinct float values, each repeated N/16 times, as in diffusion forcing).
Also the max abs error against the float64 reference for growing ranges of t. The float16/bfloat16
cells hold fractional values those dtypes round, so they raise the rounding warning: the timing runs
under Python's default warning filters, as a user's program does (the warning is shown once per
call site), and the ``warns`` column says which cells raised it. This table is the package's one
speed measurement; ``timestep-embed compare`` reports parity only.

    python scripts/bench_embedding.py --budget 1     # full grid, writes docs/bench_embedding.{md,json}
    python scripts/bench_embedding.py --quick        # N <= 4096, dims 128 and 1280
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import diffusers
import numpy as np
import torch
from _timing import cpu_name, interleaved_medians
from diffusers.models.embeddings import get_timestep_embedding as diffusers_embedding

from timestep_embed import (
    LowPrecisionTimestepWarning,
    SinusoidalEmbedding,
    get_timestep_embedding,
    sinusoidal_embedding,
    sinusoidal_embedding_np,
)
from timestep_embed.files import atomic_write_bytes

KINDS = ("float32", "float16", "bfloat16", "float64", "int64", "shared", "per_token")
MAX_VALUES = 1 << 24  # skip cells whose output has more values (65536 x 1280 = 84M floats)


def timesteps(kind: str, n: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "int64":
        return torch.randint(0, 1000, (n,), generator=gen)
    if kind == "shared":
        return torch.full((n,), 417, dtype=torch.int64)
    if kind == "per_token":
        values = torch.rand(16, generator=gen) * 1000
        return values.repeat_interleave(-(-n // 16))[:n]
    return (torch.rand(n, generator=gen, dtype=torch.float64) * 1000).to(getattr(torch, kind))


def measure_cell(n: int, dim: int, kind: str, budget_s: float) -> dict:
    t = timesteps(kind, n, torch.Generator().manual_seed(n * 7 + dim))
    module = SinusoidalEmbedding(dim, "adm", num_timesteps=1000)
    contenders = {
        "diffusers": lambda: diffusers_embedding(t, dim, True, 0),
        "ours": lambda: get_timestep_embedding(t, dim, True, 0),
        "precise": lambda: sinusoidal_embedding(t, dim, "adm", precise=True),
    }
    if not t.is_floating_point():
        contenders["module"] = lambda: module(t)
    times = interleaved_medians(contenders, min_rounds=5 if n * dim >= 1 << 22 else 15, budget_s=budget_s)
    rows = slice(0, 4096)
    reference = sinusoidal_embedding_np(t[rows].double().numpy(), dim, "adm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LowPrecisionTimestepWarning)
        outputs = {name: fn() for name, fn in contenders.items()}
    return {
        "N": n,
        "dim": dim,
        "kind": kind,
        "us": {k: v * 1e6 for k, v in times.items()},
        "vs_diffusers": {k: v / times["diffusers"] for k, v in times.items()},
        "max_abs_error": {k: float(np.abs(v[rows].double().numpy() - reference).max()) for k, v in outputs.items()},
        "equal": {k: bool(torch.equal(v, outputs["diffusers"])) for k, v in outputs.items() if k != "precise"},
        "warns": any(issubclass(w.category, LowPrecisionTimestepWarning) for w in caught),
    }


def accuracy_rows() -> list[dict]:
    """Max abs error against float64 for float32 timesteps in growing ranges (N=4096, dim=320)."""
    rows = []
    for high in (1e3, 1e4, 1e5, 1e6):
        t32 = (torch.rand(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * high).float()
        reference = sinusoidal_embedding_np(t32.double().numpy(), 320, "adm")
        outputs = {
            "diffusers": diffusers_embedding(t32, 320, True, 0),
            "ours": get_timestep_embedding(t32, 320, True, 0),
            "precise": sinusoidal_embedding(t32, 320, "adm", precise=True),
        }
        rows.append(
            {"t_max": high, **{k: float(np.abs(v.double().numpy() - reference).max()) for k, v in outputs.items()}}
        )
    return rows


def to_markdown(cells: list[dict], accuracy: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| N | dim | t | diffusers us | ours | module | precise | ours == diffusers | module == diffusers "
        "| err diffusers | err precise | warns |",
        "|---:|---:|---|---:|---:|---:|---:|---|---|---:|---:|---|",
    ]
    for c in cells:
        r, e, eq = c["vs_diffusers"], c["max_abs_error"], c["equal"]
        module = f"{r['module']:.2f}x" if "module" in r else "-"
        lines.append(
            f"| {c['N']} | {c['dim']} | {c['kind']} | {c['us']['diffusers']:.1f} | {r['ours']:.2f}x | {module} "
            f"| {r['precise']:.2f}x | {eq['ours']} | {eq.get('module', '-')} "
            f"| {e['diffusers']:.1e} | {e['precise']:.1e} | {'yes' if c['warns'] else ''} |"
        )
    worst = max(c["vs_diffusers"]["ours"] for c in cells)
    worst_warned = max((c["vs_diffusers"]["ours"] for c in cells if c["warns"]), default=float("nan"))
    reuse = [
        c["vs_diffusers"].get("module", c["vs_diffusers"]["ours"]) for c in cells if c["kind"] in ("int64", "shared")
    ]
    tokens = [c["vs_diffusers"]["ours"] for c in cells if c["kind"] == "per_token" and c["N"] >= 4096]
    lines += [
        "",
        f"ours / diffusers: at most {worst:.2f}x over all {len(cells)} cells (at most {worst_warned:.2f}x in the "
        f"{sum(c['warns'] for c in cells)} cells that raise the rounding warning); "
        f"{sum(all(c['equal'].values()) for c in cells)}/{len(cells)} cells bit-identical. "
        f"Integer and shared steps (module where it applies): {min(reuse):.2f}x-{max(reuse):.2f}x. "
        + (f"Per-token timesteps at N >= 4096: {min(tokens):.2f}x-{max(tokens):.2f}x." if tokens else ""),
        "",
        "Max abs error against float64 (float32 timesteps uniform in [0, t_max), N=4096, dim=320):",
        "",
        "| t_max | diffusers | ours | ours precise |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {a['t_max']:.0e} | {a['diffusers']:.1e} | {a['ours']:.1e} | {a['precise']:.1e} |" for a in accuracy]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N <= 4096 and dims 128, 1280 only")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timing per cell (after the minimum)")
    parser.add_argument("--out", default="runs/bench_embedding",
                        help="writes OUT.md and OUT.json (the docs' table: --out docs/bench_embedding)")  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ns = (1, 16, 256, 4096) if args.quick else (1, 16, 256, 4096, 65536)
    dims = (128, 1280) if args.quick else (128, 320, 1280)
    cells = []
    for n in ns:
        for dim in dims:
            if n * dim > MAX_VALUES:
                continue
            for kind in KINDS:
                cell = measure_cell(n, dim, kind, args.budget)
                cells.append(cell)
                r = cell["vs_diffusers"]
                print(
                    f"N={n:6d} dim={dim:5d} {kind:9s} diffusers {cell['us']['diffusers']:10.1f} us | ours "
                    f"{r['ours']:.2f}x  module {r.get('module', float('nan')):.2f}x  precise {r['precise']:.2f}x | "
                    f"equal {cell['equal']}",
                    flush=True,
                )
    header = (
        f"Measured by `python scripts/bench_embedding.py{' --quick' if args.quick else ''} --budget {args.budget:g}` "
        f"on "
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"diffusers {diffusers.__version__}, {args.threads} thread(s). Ratios are median times over "
        "interleaved rounds divided by diffusers' median in the same run (lower is faster)."
    )
    markdown = to_markdown(cells, accuracy_rows(), header)
    print()
    print(markdown)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    md, js = out.parent / f"{out.name}.md", out.parent / f"{out.name}.json"  # OUT.md: a dot in OUT's name stays
    atomic_write_bytes(md, markdown.encode())
    atomic_write_bytes(js, json.dumps({"cells": cells}, indent=1).encode())
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
