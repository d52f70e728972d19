"""Is a dtype safe for a family's time path? The tracer's precision report over a real sampling run.

`schedule_precision` follows every raw value of the family's sampling run
(`timestep_embed.interop.schedules`) through its contract in a model of ``dtype`` (the pipeline's
latents in that dtype too, as the pipelines keep them) and against float64, and reports:

* **collisions**: distinct scheduler values that reach the sinusoid as one (bfloat16 Flux at 50 steps);
* the largest **rounding error** of the sinusoid's input, next to the smallest gap between two steps;
* the **derivative** of the embedding with respect to the time value: each frequency's (sin, cos) pair
  turns on a circle of radius ``|gain|`` at angular speed ``scale * w_k``, so ``|d emb / dx|`` is
  ``|gain * scale| * ||w||`` at every x; and the embedding error the rounding causes (measured, and
  predicted to first order as ``|dx| * |d emb / dx|``).

``safe`` holds when no two steps collide and the rounding moves no step's embedding by more than
`SAFE_FRACTION` of the way to its neighbour's (the model sees, to that fraction of a step, the time
it was trained on; without a sinusoid, no input may move by that fraction of the smallest gap). The
rounding of the sinusoid's output before the MLP, the same for every family, is reported, not judged.
No diffusers import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..checks import check_float_dtype, check_int
from ..conventions import Convention
from ..families import TimestepContract, contract_for, get_contract
from ..sinusoidal import frequencies
from .schedules import Schedule, schedule_for

__all__ = ["SchedulePrecision", "schedule_precision", "sinusoid64", "SAFE_FRACTION"]

SAFE_FRACTION = 0.01  # of a step: how far the rounding may move a step's embedding towards its neighbour


def sinusoid64(x: torch.Tensor, dim: int, convention: Convention) -> torch.Tensor:
    """The sinusoid of ``convention`` in float64, written with differentiable ops only."""
    w = frequencies(dim, convention.freq_shift, convention.max_period, precise=True).to(x.device)
    phase = convention.scale * x.double()[..., None] * w
    a, b = (phase.sin(), phase.cos()) if convention.first == "sin" else (phase.cos(), phase.sin())
    emb = torch.cat([a, b], -1) if convention.layout == "concat" else torch.stack([a, b], -1).flatten(-2)
    emb = convention.gain * emb
    return torch.cat([emb, emb.new_zeros(*emb.shape[:-1], dim % 2)], -1)


@dataclass
class SchedulePrecision:
    """What `schedule_precision` found (see the module docstring); tensors are per step."""

    contract: str
    dtype: torch.dtype
    schedule: str
    raw: torch.Tensor
    sinusoid_input: torch.Tensor  # what reaches the sinusoid in a model of dtype
    reference: torch.Tensor  # the same in float64
    collisions: list[tuple[list[float], float]] = field(default_factory=list)  # (raw values, the one input)
    derivative: torch.Tensor | None = None  # |d emb / dx| at each step (float64)
    embedding_error: torch.Tensor | None = None  # |emb(input) - emb(reference)|, float64
    embedding_error_in_dtype: torch.Tensor | None = None  # the same with the sinusoid's output in dtype
    neighbour_distance: torch.Tensor | None = None  # |emb(reference) - emb(the nearest other step)|, float64

    @property
    def input_error(self) -> torch.Tensor:
        return (self.sinusoid_input.double() - self.reference).abs()

    @property
    def smallest_gap(self) -> float:
        ref = self.reference.unique()
        return float(ref.diff().abs().min()) if ref.numel() > 1 else float("inf")

    @property
    def step_fraction(self) -> float:
        """How far the rounding moves a step towards its neighbour, at worst (a fraction of a step)."""
        if self.embedding_error is not None and self.neighbour_distance is not None:
            return float((self.embedding_error / self.neighbour_distance.clamp_min(1e-300)).max())
        return float(self.input_error.max()) / self.smallest_gap

    @property
    def safe(self) -> bool:
        return not self.collisions and self.step_fraction <= SAFE_FRACTION

    def summary(self) -> str:
        """A few lines for a porter: the run, the collisions, the errors, the verdict."""
        dt = str(self.dtype).removeprefix("torch.")
        n = self.raw.numel()
        shared = sum(len(r) for r, _ in self.collisions)
        examples = "".join(f"; {', '.join(f'{v:g}' for v in r)} -> {x:g}" for r, x in self.collisions[:3])
        lines = [
            f"{self.contract} in {dt} over {self.schedule} ({n} steps):",
            f"  collisions: {shared} of {n} steps reach the sinusoid as {len(self.collisions)} value(s){examples}",
            f"  sinusoid input off by up to {float(self.input_error.max()):.4g} (the closest two steps are "
            f"{self.smallest_gap:.4g} apart)",
        ]
        if self.derivative is not None and self.embedding_error is not None:
            i = int(self.embedding_error.argmax())
            first_order = float(self.input_error[i] * self.derivative[i])
            in_dtype = self.embedding_error_in_dtype
            lines += [
                f"  |d emb / dx| {float(self.derivative.max()):.4g} at every x; the rounding moves the embedding by "
                f"up to {float(self.embedding_error.max()):.4g} (first order {first_order:.4g})",
                f"  that is {self.step_fraction:.3g} of the way to the next step's embedding; with the sinusoid's "
                f"output in {dt} too: {float(in_dtype.max()) if in_dtype is not None else 0:.4g}",
            ]
        verdict = "safe" if self.safe else "not safe"
        lines.append(f"  {dt} is {verdict} for this time path over this run (limit: {SAFE_FRACTION:g} of a step)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _contract_of(family) -> TimestepContract:
    if isinstance(family, TimestepContract):
        return family
    if isinstance(family, str):
        return get_contract(family)
    if isinstance(family, nn.Module):
        found = contract_for(family)
        if found is None:
            raise ValueError(f"no contract for {type(family).__name__}: pass the contract's name")
        return found
    raise TypeError(f"family must be a contract name, a TimestepContract or a diffusers model, got {family!r}")


def schedule_precision(
    family: str | TimestepContract | nn.Module,
    dtype: torch.dtype = torch.bfloat16,
    *,
    schedule: Schedule | torch.Tensor | None = None,
    dim: int | None = None,
    latents_in_dtype: bool = True,
) -> SchedulePrecision:
    """The precision of a family's time path in ``dtype`` over its real sampling run.

    Args:
        family: a contract name (``"flux_dev"``), a [`TimestepContract`][timestep_embed.families.TimestepContract], or a
            diffusers model (its contract by [`contract_for`][timestep_embed.families.contract_for]).
        dtype: the dtype the model (and, with ``latents_in_dtype``, the pipeline's latents) runs in.
        schedule: the run (default `schedule_for` the contract), or raw scheduler values.
        dim: the sinusoid's width (default the contract's, else 256).
        latents_in_dtype: the pipeline keeps its latents in ``dtype`` (as diffusers' pipelines do when
            the model is loaded in it), so a pipeline that casts the timestep to them rounds it there.
    """
    contract = _contract_of(family)
    if check_float_dtype(dtype).itemsize == 1:  # float8 stores weights; the model computes upcast
        raise ValueError(f"dtype {dtype}: a float8 model computes in a wider dtype (bfloat16 in diffusers' "
                         "enable_layerwise_casting); pass that one")  # fmt: skip
    if dim is not None:
        check_int(dim, "dim", 2)
    if isinstance(schedule, torch.Tensor):
        raw, described = schedule.flatten(), "the given values"
    else:
        run = schedule if isinstance(schedule, Schedule) else schedule_for(contract)
        raw, described = run.values().flatten(), run.description
    if raw.numel() == 0 or not torch.isfinite(raw.double()).all():
        raise ValueError("schedule must hold finite values")
    x = contract.sinusoid_input(raw, dtype, latents_dtype=dtype if latents_in_dtype else None)
    reference = contract.sinusoid_input(raw.double(), torch.float64).double()
    report = SchedulePrecision(contract.name, dtype, described, raw, x.detach(), reference)
    groups: dict[float, list[float]] = {}
    for r, v in zip(raw.double().tolist(), x.double().tolist(), strict=True):
        groups.setdefault(v, []).append(r)
    report.collisions = [(sorted(set(rs), reverse=True), v) for v, rs in groups.items() if len(set(rs)) > 1]
    conv = contract.convention
    if conv is not None:
        width = dim or contract.sinusoid_dim or 256
        emb = sinusoid64(reference, width, conv)
        w = frequencies(width, conv.freq_shift, conv.max_period, precise=True)
        report.derivative = torch.full_like(reference, abs(conv.gain * conv.scale) * float(w.norm()))
        moved = sinusoid64(x.double(), width, conv)
        report.embedding_error = (moved - emb).norm(dim=-1)
        report.embedding_error_in_dtype = (moved.to(dtype).double() - emb).norm(dim=-1)
        report.neighbour_distance = _nearest_other(emb)
    return report


def _nearest_other(emb: torch.Tensor) -> torch.Tensor:
    """Per row, the distance to the nearest other row with a different embedding (inf if none)."""
    d = torch.cdist(emb, emb, compute_mode="donot_use_mm_for_euclid_dist")
    d = d.masked_fill(d == 0, float("inf")).fill_diagonal_(float("inf"))
    return d.min(dim=-1).values
