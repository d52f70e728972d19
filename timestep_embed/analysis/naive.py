"""The naive position encodings the sinusoid replaces, run through the same analysis.

Each scheme maps integer positions ``p [N]`` of a sequence of ``length`` positions to ``[N, d]``:

* ``raw``: ``[p]``: unbounded, grows with the sequence;
* ``divided``: ``[p / length]``: bounded, but position 10 means something else at every length;
* ``single_sine``: ``[sin(p)]``: bounded, but many-to-one (sin(p) = sin(pi - p)) and not relative;
* ``sin_cos_pair``: ``[sin(p), cos(p)]``: relative and rotatable, but one frequency wraps around
  every 2 pi: p and p + 710 nearly coincide (710 = 113 * 2 pi + 6e-5);
* ``two_frequencies``: 4-vectors ``[sin(p), cos(p), sin(p/100), cos(p/100)]``: everything holds on
  1000 positions, with a small margin;
* ``binary``: the bits of p (``ceil(log2 length)`` of them): unique, bounded, neither relative
  nor shiftable by a fixed linear map (carries), and its width depends on the length;
* ``sinusoid``: the real thing, 128 dims, ADM convention, for reference.

The sinusoidal schemes are slices of [`sinusoidal_embedding_np`][timestep_embed.sinusoidal_embedding_np]
(interleaved, max_period 10000: dim 2 is the frequency 1, dim 4 adds 1/100). Run
``python -m timestep_embed.analysis.naive`` to print the table.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import numpy as np

from ..checks import check_choice, check_int, check_real, real_array
from ..sinusoidal import sinusoidal_embedding_np
from .properties import uniqueness

__all__ = ["NAIVE_SCHEMES", "naive_embedding", "scheme_properties", "naive_scheme_table", "format_table"]


def _one_blas_thread():
    """One BLAS thread for small solves: with torch imported, OpenBLAS threads fight torch's on a
    busy CPU and a 1000 x 128 lstsq takes seconds instead of milliseconds."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _binary(p: np.ndarray, length: int) -> np.ndarray:
    bits = max(1, math.ceil(math.log2(length)))
    return ((p[:, None].astype(np.int64) >> np.arange(bits)) & 1).astype(np.float64)


# name -> (description, (positions [N], length) -> [N, d])
NAIVE_SCHEMES: dict[str, tuple[str, Callable[[np.ndarray, int], np.ndarray]]] = {
    "raw": ("raw integer position p", lambda p, n: p[:, None].astype(np.float64)),
    "divided": ("p / length", lambda p, n: p[:, None] / n),
    "single_sine": ("sin(p), one sine", lambda p, n: sinusoidal_embedding_np(p, 2, "vaswani")[:, :1]),
    "sin_cos_pair": ("[sin p, cos p], one pair", lambda p, n: sinusoidal_embedding_np(p, 2, "vaswani")),
    "two_frequencies": ("4-vector, frequencies 1 and 1/100", lambda p, n: sinusoidal_embedding_np(p, 4, "vaswani")),
    "binary": ("binary code of p", _binary),
    "sinusoid": ("sinusoid, 128 dims (adm)", lambda p, n: sinusoidal_embedding_np(p, 128, "adm")),
}


def naive_embedding(name: str, positions, length: int | None = None) -> np.ndarray:
    """Scheme ``name`` at integer ``positions [N]`` (default length: max position + 1) -> [N, d]."""
    check_choice(name, "scheme", NAIVE_SCHEMES)
    p = real_array(positions, "positions").reshape(-1)
    if p.dtype.kind not in "iu" or (p.size and p.min() < 0):
        raise ValueError(f"positions must be non-negative integers, got dtype {p.dtype}")
    length = int(p.max()) + 1 if length is None else check_int(length, "length")
    if p.size and p.max() >= length:
        raise ValueError(f"length must be an int > every position, got {length!r}")
    return NAIVE_SCHEMES[name][1](p, length)


def scheme_properties(name: str, n_positions: int = 1000, tol: float = 1e-4, tol_exact: float = 1e-9) -> dict:
    """Check scheme ``name`` on positions ``0 .. n_positions - 1``.

    Returns a row: ``bounded`` (max |entry| grows less than 2x when the sequence is 10x longer),
    ``unique`` (no two positions closer than ``tol``), ``relative`` (``E(p) . E(p + d)`` depends only
    on d, to ``tol_exact`` relative), ``shift_linear`` (one matrix M with ``E(p + 1) = M E(p)`` for all
    p, least squares, so ``M_k = M^k``), ``length_free`` (E(p) unchanged when the length doubles), and
    ``fails``: where each property breaks, in words.
    """
    p = np.arange(check_int(n_positions, "n_positions", 2))
    tol, tol_exact = check_real(tol, "tol", minimum=0), check_real(tol_exact, "tol_exact", minimum=0)
    emb = naive_embedding(name, p, n_positions)
    fails = []
    # bounded: compare the largest entry at this length and at 10x the length
    longer = naive_embedding(name, np.arange(10 * n_positions), 10 * n_positions)
    top, top_long = float(np.abs(emb).max()), float(np.abs(longer).max())
    bounded = top_long < 2 * top  # a 10x longer sequence leaves it within 2x: bounded in practice
    if not bounded:
        fails.append(f"unbounded: max abs {top:g} at N={n_positions}, {top_long:g} at N={10 * n_positions}")
    # unique within tol
    u = uniqueness(emb, p, tol=tol)
    if u.first_collision is not None:
        a, b = (int(v) for v in u.first_collision)
        fails.append(
            f"collide: p={a} and p={b} (distance {np.linalg.norm(emb[b] - emb[a]):.1e}; "
            f"{u.num_collisions} pairs < {tol:g})"
        )
    # relative: spread of the dot products along each offset of the Gram matrix (first 256 positions)
    head = emb[: min(n_positions, 256)]
    gram = head @ head.T
    spread, worst = 0.0, 1
    for d in range(1, head.shape[0]):
        diag = np.diagonal(gram, d)
        if np.ptp(diag) > spread:
            spread, worst = float(np.ptp(diag)), d
    relative = spread <= tol_exact * max(1.0, float(np.abs(gram).max()))
    if not relative:
        diag = np.diagonal(gram, worst)
        i, j = int(np.argmin(diag)), int(np.argmax(diag))
        fails.append(f"not relative: E({i}).E({i + worst})={diag[i]:.3g} but E({j}).E({j + worst})={diag[j]:.3g}")
    # shift-linear: least-squares M with emb[1:] = emb[:-1] @ M.T
    with _one_blas_thread():
        m_t, *_ = np.linalg.lstsq(emb[:-1], emb[1:], rcond=None)
    residual = float(np.abs(emb[:-1] @ m_t - emb[1:]).max())
    shift_linear = residual <= tol_exact * max(1.0, top)
    if not shift_linear:
        fails.append(f"no linear map E(p+1)=M E(p) (best residual {residual:.2g})")
    # length-free: does E(p) change when the sequence doubles?
    doubled = naive_embedding(name, p, 2 * n_positions)
    length_free = doubled.shape == emb.shape and np.array_equal(doubled, emb)
    if not length_free:
        what = (
            f"width {emb.shape[1]} -> {doubled.shape[1]}"
            if doubled.shape != emb.shape
            else f"E(10) = {emb[10, 0]:g} -> {doubled[10, 0]:g}"
        )
        fails.append(f"depends on the length: N={n_positions} -> {2 * n_positions} changes E ({what})")
    return {
        "scheme": name,
        "description": NAIVE_SCHEMES[name][0],
        "dim": emb.shape[1],
        "bounded": bounded,
        "unique": u.unique,
        "min_distance": u.min_distance,
        "relative": relative,
        "shift_linear": shift_linear,
        "length_free": length_free,
        "fails": "; ".join(fails) or "-",
    }


def naive_scheme_table(n_positions: int = 1000, tol: float = 1e-4) -> list[dict]:
    """[`scheme_properties`][timestep_embed.analysis.naive.scheme_properties] for every scheme in `NAIVE_SCHEMES`, in
    order."""
    return [scheme_properties(name, n_positions, tol) for name in NAIVE_SCHEMES]


def _cell(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "NO"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table (yes/no per property, min distance, where it fails)."""
    cols = ["scheme", "dim", "bounded", "unique", "min_distance", "relative", "shift_linear", "length_free", "fails"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in cols) + " |" for row in rows]
    return "\n".join(lines)
