"""The flags [`trace_time_path`][timestep_embed.interop.trace_time_path] raises on recorded stages: a timestep rounded
by a 16-bit dtype, a NaN or infinite timestep, a value outside the range the contract expects (1000 x off), the
scale applied twice, a sinusoid that is not the contract's convention. The contract, range and convention checks
judge the finite values only: the non-finite ones are flagged on their own."""

from __future__ import annotations

import math

import torch

from ..analysis.relation import relate
from ..families import TimestepContract
from ..sinusoidal import sinusoidal_embedding
from .stage import Stage

__all__ = ["flag_stages"]

_HALF = (torch.float16, torch.bfloat16)


def flag_stages(stages: list[Stage], contract: TimestepContract | None) -> list[str]:
    """The flags of [`trace_time_path`][timestep_embed.interop.trace_time_path] on recorded stages (see the module
    docstring)."""
    flags: list[str] = []
    given = stages[0].value if stages and stages[0].kind == "timestep" else None
    inputs = [s for s in stages if s.kind == "sinusoid input"]
    # a non-finite timestep given, else one its model's map makes (ln(0)): named where it starts
    starts = stages[:1] if given is not None and not _finite(given) else inputs
    for s in starts:
        if not _finite(s.value):
            where = "is given" if s.kind == "timestep" else f"reaches the sinusoid [{s.module}]"
            flags.append(f"non-finite: the {s.label} {where} with {_nonfinite_text(s.value)}")
    for s in inputs:
        v = s.value
        if v.dtype in _HALF:
            flags.append(
                f"rounding: the {s.label} reaches the sinusoid as {str(v.dtype)[6:]} [{s.module}]: "
                f"{_spacing_text(v)}; float32 would keep it"
            )
    # the call that carries the given timestep (Helios embeds a zero history timestep first)
    timestep_inputs = [s for s in inputs if s.label == "timestep"]
    same_size = [s for s in timestep_inputs if given is not None and s.value.numel() == given.numel()]
    main = next(iter(same_size or timestep_inputs), None)
    if main is not None and given is not None and contract is not None:
        expected = contract.to_sinusoid(given, main.value.dtype if main.value.is_floating_point() else torch.float32)
        if expected.shape == main.value.shape and not _same(expected.to(main.value.dtype), main.value):
            how = relate(expected, main.value) or "no known map"
            flags.append(
                f"contract: the sinusoid input is not what {contract.name} computes from this timestep ({how})"
            )
        low, high = contract.value_range()
        v = main.value.double()
        v = v[v.isfinite()]
        margin = 0.01 * (high - low) + 1e-6
        largest = float(v.abs().max()) if v.numel() else 0.0
        fractional = bool((v != v.round()).any())
        if v.numel() and (
            float(v.min()) < low - margin
            or float(v.max()) > high + margin
            or (
                high >= 100 and 0 < largest <= 1 and fractional  # sigma where sigma * 1000 is expected
            )
        ):
            flags.append(
                f"range: the sinusoid input spans {float(v.min()):g}..{float(v.max()):g}, {contract.name} expects "
                f"{low:g}..{high:g}" + _range_hint(largest, high)
            )
    if main is not None and given is not None and contract is None and given.shape == main.value.shape:
        how = relate(given, main.value) or ""
        if how.startswith("candidate = 1000 x") and float(given.double().abs().max()) > 1.5:
            flags.append(
                "scaled twice: the model multiplies a timestep that already spans "
                f"0..{float(given.double().abs().max()):g} by 1000 (its pipeline passes sigma in [0, 1])"
            )
    flags += _convention_flags(stages, contract)
    return flags


def _spacing_text(v: torch.Tensor) -> str:
    v = v[v.isfinite()]  # a NaN or inf is flagged on its own
    largest = float(v.double().abs().max()) if v.numel() else 0.0
    spacing = torch.finfo(v.dtype).eps * 2 ** math.floor(math.log2(max(largest, 1e-30)))
    return f"values up to {largest:g} are {spacing:g} apart there"


def _nonfinite_text(v: torch.Tensor) -> str:
    bad = ~v.isfinite()
    nans = int(v.isnan().sum())
    what = f"{nans} NaN" if nans else ""
    if int(bad.sum()) > nans:
        what += (" and " if nans else "") + f"{int(bad.sum()) - nans} infinite"
    return f"{what} of {v.numel()} values"


def _finite(v: torch.Tensor) -> bool:
    return not v.is_floating_point() or bool(v.isfinite().all())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal``, with NaN equal to NaN."""
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _range_hint(largest: float, high: float) -> str:
    if high > 0 and 500 <= largest / high <= 2000:
        return ": 1000 x too large, scaled by 1000 twice?"
    if high > 0 and 5e-4 <= largest / high <= 2e-3:
        return ": 1000 x too small, sigma in [0, 1] where sigma * 1000 is expected?"
    return ""


def _convention_flags(stages: list[Stage], contract: TimestepContract | None) -> list[str]:
    if contract is None or contract.convention is None:
        return []
    for i, s in enumerate(stages):
        if s.kind == "sinusoid input" and s.label == "timestep" and i + 1 < len(stages):
            x, out = s.value.float(), stages[i + 1].value
            finite = x.isfinite()
            if not bool(finite.all()):  # flagged as non-finite: judge the finite rows
                if out.shape[:-1] != x.shape:
                    return []
                x, out = x[finite], out[finite]
            if not x.numel():
                return []
            ours = sinusoidal_embedding(x, out.shape[-1], contract.convention)
            if ours.shape != out.shape or not torch.allclose(ours, out.float(), atol=1e-4):
                return [f"convention: the sinusoid [{s.module}] is not {contract.name}'s {contract.convention}"]
            return []
    return []
