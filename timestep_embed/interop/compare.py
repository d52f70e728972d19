"""Parity report against diffusers: ``timestep-embed compare``.

For every preset, a grid of widths (odd included), timestep kinds (integer, fractional, large)
and input dtypes (int64, float32, float16, bfloat16, float64) it measures

* ``diff_vs_diffusers``: max |ours - diffusers| on the same input tensor (0 means bit-identical;
  the interleaved "vaswani" preset is compared with diffusers' concat output permuted by
  [`layout_permutation`][timestep_embed.layout_permutation], since diffusers has no interleaved layout);
* ``err_diffusers``, ``err_ours``, ``err_precise``: max abs error against the float64 reference
  evaluated at the *original* float64 timesteps, so rounding of the input dtype (bfloat16 turns
  999 into 1000) shows up as error, as it does in a real model;
* ``warned``: whether the rounding warning was raised.

Speed is not measured here: ``scripts/bench_embedding.py`` owns it (docs/bench_embedding.md).
Writes ``OUT/compare.md`` and ``OUT/compare.json``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch

from ..checks import check_bool, check_int
from ..conventions import PRESETS, Convention, convention_to_diffusers, layout_permutation
from ..files import atomic_write_bytes
from ..guards import check_dim
from ..progress import progress as progress_bar
from ..sinusoidal import LowPrecisionTimestepWarning, sinusoidal_embedding, sinusoidal_embedding_np
from .patch import require_diffusers

BASE_PRESETS = ("vaswani", "ddpm", "adm", "edm", "edm_song")
DIMS = (7, 128, 320)
INPUT_DTYPES = {
    "int64": torch.int64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
KINDS = {  # name -> (values in float64, which input dtypes apply)
    "integer": (lambda g, n: torch.randint(0, 1000, (n,), generator=g).double(), tuple(INPUT_DTYPES)),
    "fractional": (lambda g, n: torch.rand(n, generator=g, dtype=torch.float64) * 1000, tuple(INPUT_DTYPES)[1:]),
    # float16 stops at 65504: 1e6 becomes inf (diffusers then returns NaN; we raise), so no row.
    "large": (lambda g, n: torch.rand(n, generator=g, dtype=torch.float64) * 1e6, ("float32", "bfloat16", "float64")),
}


def _diffusers_equivalent(name: str, dim: int):
    """(diffusers flags, column permutation or None) that reproduce preset ``name``."""
    conv = PRESETS[name]
    if conv.layout == "concat":
        return convention_to_diffusers(conv), None
    concat = Convention("concat", conv.first, conv.freq_shift, conv.max_period, conv.scale)
    return convention_to_diffusers(concat), torch.from_numpy(layout_permutation(concat, conv, dim))


MAX_N = 1 << 20  # timesteps per row: 2**20 x 320 float64 references are 2.7 GB
MAX_DIM = 1 << 16  # widths: 2**16 columns of 2**20 timesteps would be 550 GB; real models stay below 4096


def compare_row(name: str, dim: int, kind: str, dtype_name: str, n: int) -> dict:
    """One row: preset ``name`` at width ``dim`` on ``n`` timesteps of ``kind`` in ``dtype_name``."""
    diffusers_embedding = require_diffusers().models.embeddings.get_timestep_embedding
    flags, perm = _diffusers_equivalent(name, dim)
    values = KINDS[kind][0](torch.Generator().manual_seed(dim + len(kind)), n)
    t = values.to(INPUT_DTYPES[dtype_name])
    theirs = diffusers_embedding(t, dim, **flags)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LowPrecisionTimestepWarning)
        outputs = {
            "diffusers": theirs if perm is None else theirs[:, perm],
            "ours": sinusoidal_embedding(t, dim, name),
            "precise": sinusoidal_embedding(t, dim, name, precise=True),
        }
    reference = sinusoidal_embedding_np(values.numpy(), dim, name)
    return {
        "preset": name,
        "dim": dim,
        "kind": kind,
        "input_dtype": dtype_name,
        "n": n,
        "diff_vs_diffusers": float((outputs["ours"] - outputs["diffusers"]).abs().max()),
        **{f"err_{k}": float(np.abs(v.double().numpy() - reference).max()) for k, v in outputs.items()},
        "warned": any(issubclass(w.category, LowPrecisionTimestepWarning) for w in caught),
    }


def _check_arguments(presets, dims, n) -> tuple[list[str], list[int]]:
    if isinstance(presets, str) or not isinstance(presets, (list, tuple)) or not presets:
        raise ValueError(f"presets must be a non-empty list of preset names {sorted(PRESETS)}, got {presets!r}")
    unknown = [p for p in presets if not isinstance(p, str) or p not in PRESETS]
    if unknown:
        raise ValueError(f"presets must be preset names {sorted(PRESETS)}, got {unknown!r}")
    if not isinstance(dims, (list, tuple)) or not dims:
        raise ValueError(f"dims must be a non-empty list of widths, got {dims!r}")
    for dim in dims:
        for name in presets:
            check_dim(dim, PRESETS[name].freq_shift)
        if dim > MAX_DIM:
            raise ValueError(f"dims must be widths in 1 .. {MAX_DIM}, got {dim}")
    if check_int(n, "n") > MAX_N:
        raise ValueError(f"n must be an int in 1 .. {MAX_N} (timesteps per row), got {n}")
    return list(presets), list(dims)


def run_comparison(presets=BASE_PRESETS, dims=DIMS, n: int = 256, *, progress: bool = True) -> list[dict]:
    """Every row of the report; ValueError/TypeError naming the argument for a bad one, before any row."""
    presets, dims = _check_arguments(presets, dims, n)
    progress = check_bool(progress, "progress")
    jobs = [(p, d, k, dt) for p in presets for d in dims for k, (_, dtypes) in KINDS.items() for dt in dtypes]
    bar = progress_bar(len(jobs), "compare", "row", enabled=progress)
    rows = []
    for job in jobs:
        rows.append(compare_row(*job, n))
        bar.update()
    bar.close()
    return rows


def to_markdown(rows: list[dict]) -> str:
    lines = [
        "| preset | dim | timesteps | input dtype | max abs diff vs diffusers | err diffusers | err ours "
        "| err ours precise | rounding warning |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | {r['dim']} | {r['kind']} | {r['input_dtype']} | {r['diff_vs_diffusers']:.1e} "
            f"| {r['err_diffusers']:.1e} | {r['err_ours']:.1e} | {r['err_precise']:.1e} "
            f"| {'yes' if r['warned'] else ''} |"
        )
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    exact = sum(r["diff_vs_diffusers"] == 0 for r in rows)
    worst_precise = max(r["err_precise"] for r in rows if r["input_dtype"] in ("int64", "float64"))
    warned = sum(r["warned"] for r in rows)
    return (
        f"{exact}/{len(rows)} rows bit-identical to diffusers; worst precise-mode error for exact (int64/float64) "
        f"inputs {worst_precise:.1e}; the rounding warning raised in {warned} rows (float16/bfloat16 inputs that "
        "cannot hold the values). Errors are measured at the original float64 timesteps, so they include the "
        "rounding of the input dtype (float32 holds 1e6 only to 0.06). Speed: scripts/bench_embedding.py."
    )


def write_report(rows: list[dict], out: str | Path) -> tuple[Path, Path]:
    """``OUT/compare.md`` (summary + table) and ``OUT/compare.json`` (the rows), atomically."""
    out = Path(out)
    md = atomic_write_bytes(out / "compare.md", f"{summary(rows)}\n\n{to_markdown(rows)}".encode())
    return md, atomic_write_bytes(out / "compare.json", json.dumps(rows, indent=1).encode())
