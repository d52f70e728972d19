"""One recorded value of a time path: what [`trace_time_path`][timestep_embed.interop.trace_time_path] records and
[`verify_port`][timestep_embed.interop.verify_port] compares."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["STAGE_KINDS", "Stage"]

STAGE_KINDS = ("timestep", "sinusoid input", "sinusoid", "time embedding", "modulation", "output")


@dataclass
class Stage:
    """One recorded value: ``kind`` (see `STAGE_KINDS`), ``label`` (``"timestep"``, ``"guidance"``,
    ``"time ids"``, ``"refiner"`` ...: which time-like input it carries), the module's dotted path and
    the tensor.

    A ``"sinusoid input"`` stage also holds ``phase``: the input as the sinusoid's phase sees it, in
    float64 (times the module's ``scale``, the log taken where the module takes it: diffusers'
    ``Timesteps(scale=1000)`` fed sigma and a plain sinusoid fed sigma * 1000 see the same), and
    ``frequency``: the largest frequency that multiplies it (1 for a sinusoid with ``max_period >= 1``,
    ``2 pi max |w|`` for Fourier features). [`verify_port`][timestep_embed.interop.verify_port] compares ``phase`` and
    judges the sinusoid against the float32 rounding of ``phase * frequency``."""

    kind: str
    label: str
    module: str
    value: torch.Tensor = field(repr=False)
    phase: torch.Tensor | None = field(default=None, repr=False)
    frequency: float = 1.0

    def summary(self) -> dict:
        v = self.value.detach()
        out: dict[str, object] = {"kind": self.kind, "label": self.label, "module": self.module}
        out["dtype"] = str(v.dtype).split(".")[-1]
        out["shape"] = list(v.shape)
        x = v.double()
        if v.numel() <= 8:
            out["values"] = [_number(round(float(y), 6)) for y in x.reshape(-1)]
        if v.numel():  # NaN and inf are JSON's null (strict JSON has neither), counted in "nonfinite"
            finite = x[x.isfinite()]
            if finite.numel() < x.numel():
                out["nonfinite"] = x.numel() - finite.numel()
            if finite.numel():  # the rms scaled by the largest value: squares of 1e200 would overflow
                top = float(finite.abs().max()) or 1.0
                rms = top * float((finite / top).pow(2).mean().sqrt())
                out.update(min=float(finite.min()), max=float(finite.max()), rms=rms)
        return out


def _number(y: float) -> float | None:
    return y if math.isfinite(y) else None
