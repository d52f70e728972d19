"""How one set of timestep values relates to another: scaled, shifted, reflected, logged or rounded.

The bugs ports make before the sinusoid are maps of the timestep: sigma passed where sigma * 1000 is
expected (or multiplied by 1000 twice), ``1 - t`` where ``t`` is expected, ``ln(sigma) / 4`` against
sigma, and rounding to bfloat16/float16 (999 -> 1000). [`relate`][timestep_embed.analysis.relation.relate] names the map
that takes the reference values to the candidate values, if one of these does.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..checks import real_array

__all__ = ["relate"]

_KNOWN_FACTORS = (1000.0, 1e-3, 999.0, 1 / 999.0, 4.0, 0.25)
_ROUNDINGS = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _as_float64(values, name: str) -> np.ndarray:
    return real_array(values, name).astype(np.float64).reshape(-1)


def _close(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x))) and np.allclose(x, y, rtol=1e-6, atol=1e-9 * max(1.0, np.abs(y).max()))


def _rounded_to(x: np.ndarray, y: np.ndarray) -> str | None:
    """The half dtype that ``y`` is ``x`` rounded to, or None.

    Once (``y == x.to(dtype)``), or twice: ``y`` representable in the dtype and within one of its
    spacings of ``x`` (Flux rounds sigma to bfloat16, multiplies by 1000 and rounds again)."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for name, dtype in _ROUNDINGS.items():
        if torch.equal(xt.to(dtype).double(), yt):
            return name
    for name, dtype in _ROUNDINGS.items():
        if not torch.equal(yt.to(dtype).double(), yt):
            continue
        spacing = torch.finfo(dtype).eps * np.exp2(np.floor(np.log2(np.maximum(np.abs(x), 1e-30))))
        if np.all(np.abs(x - y) <= spacing):
            return name
    return None


def _maps(a: np.ndarray, b: np.ndarray):
    """(description, a mapped) for the maps worth testing; constants are fitted from the data."""
    yield "reference", a
    for k in _KNOWN_FACTORS:
        yield f"{k:g} x reference", k * a
    nonzero = np.abs(a) > 1e-12
    if nonzero.any():
        k = float(np.median(b[nonzero] / a[nonzero]))
        if math.isfinite(k) and k != 0:
            yield f"{k:.6g} x reference", k * a
    for c in (1.0, 1000.0, 999.0, float(np.median(a + b))):
        yield f"{c:.6g} - reference", c - a
    offset = float(np.median(b - a))
    yield f"reference {'+' if offset >= 0 else '-'} {abs(offset):.6g}", a + offset
    if np.all(a > 0):
        yield "ln(reference) / 4", np.log(a) / 4
        yield "ln(reference)", np.log(a)
        yield "ln(reference / 2)", np.log(a / 2)


def relate(reference, candidate) -> str | None:
    """How ``candidate`` follows from ``reference`` (same shape), in words; None if no known map does.

    Returns ``"equal"``, ``"candidate = 1000 x reference"``, ``"candidate = 1 - reference"``,
    ``"candidate = reference rounded to bfloat16"``, ``"candidate = 1000 x reference, rounded to
    bfloat16"``, ``"reference = candidate rounded to float16"`` ... (the first map that fits; fitted
    constants are printed to 6 digits).
    """
    a, b = _as_float64(reference, "reference"), _as_float64(candidate, "candidate")
    if a.shape != b.shape:
        raise ValueError(f"reference and candidate differ in size: {a.size} vs {b.size}")
    if a.size == 0 or np.array_equal(a, b):
        return "equal"
    if _close(a, b):
        return f"equal up to float rounding (max difference {np.abs(a - b).max():.3g})"
    for text, mapped in _maps(a, b):
        if text != "reference" and _close(mapped, b):
            return f"candidate = {text}"
        dtype = _rounded_to(mapped, b)
        if dtype is not None:
            return f"candidate = {text}" + (" rounded" if text == "reference" else ", rounded") + f" to {dtype}"
    dtype = _rounded_to(b, a)
    if dtype is not None:
        return f"reference = candidate rounded to {dtype} (the candidate is not rounded)"
    return None
