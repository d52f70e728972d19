"""What the convention detector reads: a dump of embeddings with its timesteps, or a callable.

Of a dump it reads at most `MAX_ROWS` rows spread over the data, so a large (memory-mapped)
array costs no more than a small one; what it refuses, it refuses before reading: a timestep
range of more than `MAX_TIMESTEPS` values, a width of more than `MAX_DIM` columns.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..checks import check_real, real_array
from ..checks import check_size as check_count

__all__ = ["MAX_ROWS", "MAX_TIMESTEPS", "MAX_DIM", "check_size", "timestep_range", "read_dump"]

MAX_ROWS = 2048  # rows the search reads: enough to tell every candidate apart, and fast
MAX_TIMESTEPS = 10_000_000  # the largest range start:stop:step built (80 MB of float64)
MAX_DIM = 1 << 16  # the grid search holds [1024, dim / 2] float64 phases per candidate; real widths are <= 8192


def check_size(rows: int | None = None, dim: int | None = None) -> None:
    """ValueError when a timestep range holds more than `MAX_TIMESTEPS` values or a dump is
    wider than `MAX_DIM` columns."""
    if rows is not None:
        hint = f"; it reads {MAX_ROWS} rows spread over the data, so a coarser step finds the same convention"
        check_count("timesteps", rows, MAX_TIMESTEPS, "values", 8, "the detector takes", hint)
    if dim is not None and dim > MAX_DIM:
        raise ValueError(f"embeddings: {dim:,} columns is wider than the detector takes ({MAX_DIM:,})")


def timestep_range(start: float, stop: float, step: float = 1.0) -> np.ndarray:
    """``numpy.arange(start, stop, step)`` in float64 (the CLI's ``--timesteps start:stop[:step]``),
    after `check_size` of its length: ``0:1e12`` is refused before any memory is taken."""
    start, stop, step = check_real(start, "start"), check_real(stop, "stop"), check_real(step, "step")
    if step == 0:
        raise ValueError("step must be non-zero")
    check_size(rows=max(0, math.ceil((stop - start) / step)))
    return np.arange(start, stop, step, dtype=np.float64)


def _pick(n: int) -> np.ndarray | slice:
    """At most MAX_ROWS row indices spread evenly over ``n`` rows."""
    return slice(None) if n <= MAX_ROWS else np.linspace(0, n - 1, MAX_ROWS).round().astype(np.int64)


def _to_float64(values, name: str) -> tuple[np.ndarray, float]:
    """float64 numpy copy and the storage precision (machine epsilon) of the values as given."""
    array = real_array(values, name)
    if isinstance(values, torch.Tensor):
        eps = torch.finfo(values.dtype).eps if values.is_floating_point() else 0.0
    else:
        eps = np.finfo(array.dtype).eps if array.dtype.kind == "f" else 0.0
    return array.astype(np.float64), float(eps)


def _check_shapes(shape: tuple, rows: int) -> None:
    if len(shape) != 2 or shape[1] < 2:
        raise ValueError(f"embeddings must be [N, dim] with dim >= 2, got shape {tuple(shape)}")
    check_size(dim=shape[1])
    if shape[0] != rows:
        raise ValueError(f"embeddings have {shape[0]} rows but timesteps has {rows} values")


def read_dump(source, timesteps) -> tuple[np.ndarray, np.ndarray, float]:
    """(embeddings [n, dim], timesteps [n], storage epsilon of the embeddings): float64, finite, n at
    most MAX_ROWS. ``source`` is ``[N, dim]`` (array, memory map, tensor, nested list) with the
    ``[N]`` ``timesteps``, or a callable ``t [n] -> [n, dim]`` (default t: 0..999), called with
    float32 timesteps, or int64 if floats raise."""
    if callable(source):
        t = np.arange(1000, dtype=np.float64) if timesteps is None else _to_float64(timesteps, "timesteps")[0]
        t = t.reshape(-1)[_pick(t.size)]
        try:
            out = source(torch.from_numpy(t).float())
        except Exception:  # noqa: BLE001 - some implementations only take integer steps
            out = source(torch.from_numpy(t).long())
        emb, eps = _to_float64(out, "the output of source")
        _check_shapes(emb.shape, t.shape[0])
    elif timesteps is None:
        raise ValueError("timesteps are required with an embedding matrix: the t of every row")
    else:
        source = source if isinstance(source, (np.ndarray, torch.Tensor)) else real_array(source, "embeddings")
        steps = timesteps if isinstance(timesteps, (np.ndarray, torch.Tensor)) else real_array(timesteps, "timesteps")
        steps = steps.reshape(-1)
        _check_shapes(tuple(source.shape), steps.shape[0])
        pick = _pick(steps.shape[0])
        (emb, eps), t = _to_float64(source[pick], "embeddings"), _to_float64(steps[pick], "timesteps")[0]
    if not np.isfinite(emb).all():
        raise ValueError("embeddings contain NaN or inf (diffusers gives NaN for dim=2 with freq_shift=1)")
    if not np.isfinite(t).all():
        raise ValueError("timesteps must be finite, got NaN or inf")
    return emb, t, eps
