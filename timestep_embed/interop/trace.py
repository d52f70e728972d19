"""Follow the timestep through a model: what arrives, what reaches the sinusoid, what leaves each stage.

:func:`trace_time_path` runs a model once with forward hooks on its time-path modules and records,
in call order, every stage: the ``timestep`` argument, each sinusoid's (or Fourier projection's) input
and output, each time MLP's output, each block's modulation and the model's output. It works on
diffusers' models (their ``Timesteps``, ``GaussianFourierProjection``, ``TimestepEmbedding`` and
``AdaLayerNorm*`` modules, found by class name) and on this package's modules. Then it flags what
goes wrong in ports: a timestep rounded by a low-precision dtype, a value outside the range the
model's :class:`TimestepContract` expects, the scale applied twice, a sinusoid that is not the
contract's convention.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..analysis.relation import relate
from ..guards import TimestepsLike, as_tensor
from ..nn import FourierEmbedding, SinusoidalEmbedding, TimestepMLP
from ..sinusoidal import sinusoidal_embedding
from .contract import TimestepContract
from .contracts import contract_for, get_contract

__all__ = ["Stage", "TimePathTrace", "trace_time_path", "trace_stages", "STAGE_KINDS"]

STAGE_KINDS = ("timestep", "sinusoid input", "sinusoid", "time embedding", "modulation", "output")
_SINUSOIDS = ("Timesteps", "GaussianFourierProjection")  # diffusers' class names
_MLPS = ("TimestepEmbedding",)
# The blocks' own projections of emb: diffusers ResnetBlock2D, ours, ResidualTemporalBlock1D, Wan.
_MODULATION_LINEARS = ("time_emb_proj", "emb_proj", "time_emb", "time_proj")
_HALF = (torch.float16, torch.bfloat16)


@dataclass
class Stage:
    """One recorded value: ``kind`` (see :data:`STAGE_KINDS`), ``label`` (``"timestep"``, ``"guidance"``,
    ``"time ids"`` ...: which time-like input it carries), the module's dotted path and the tensor."""

    kind: str
    label: str
    module: str
    value: torch.Tensor = field(repr=False)

    def summary(self) -> dict:
        v = self.value.detach()
        out: dict[str, object] = {"kind": self.kind, "label": self.label, "module": self.module}
        out["dtype"] = str(v.dtype).split(".")[-1]
        out["shape"] = list(v.shape)
        x = v.double()
        if v.numel() <= 8:
            out["values"] = [round(float(y), 6) for y in x.reshape(-1)]
        if v.numel():
            out.update(min=float(x.min()), max=float(x.max()), rms=float(x.pow(2).mean().sqrt()))
        return out


@dataclass
class TimePathTrace:
    """What :func:`trace_time_path` saw: the stages in call order and the flags raised on them."""

    model: str
    contract: str | None
    stages: list[Stage]
    flags: list[str]

    def find(self, kind: str, label: str = "timestep") -> list[Stage]:
        """The stages of ``kind`` carrying ``label``, in call order."""
        return [s for s in self.stages if s.kind == kind and s.label == label]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "contract": self.contract,
            "stages": [s.summary() for s in self.stages],
            "flags": self.flags,
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **{"indent": 2, **kwargs})

    def report(self, max_blocks: int = 2) -> str:
        """Readable lines: one per stage (block modulations after the first ``max_blocks`` counted), then the flags."""
        lines = [f"time path of {self.model}" + (f" (contract: {self.contract})" if self.contract else "")]
        seen = hidden = 0
        for s in self.stages:
            if s.kind == "modulation":
                seen += 1
                if seen > max_blocks:
                    hidden += 1
                    continue
            if hidden:
                lines.append(f"  ... {hidden} more block modulations")
                hidden = 0
            d = s.summary()
            values = d.get("values")
            text = ", ".join(f"{v:g}" for v in values) if values is not None else f"rms {d.get('rms', 0):.4g}"
            where = f" [{s.module}]" if s.module else ""
            lines.append(f"  {s.kind:<15} {s.label:<9} {d['dtype']:<8} {str(tuple(d['shape'])):<14} {text}{where}")
        if hidden:
            lines.append(f"  ... {hidden} more block modulations")
        lines += [f"  FLAG {f}" for f in self.flags] or ["  no flags"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


# ------------------------------------------------------------------------------------ recording
def _kind_of(module: nn.Module, name: str, parent: nn.Module | None) -> str | None:
    cls = type(module).__name__
    if isinstance(module, (SinusoidalEmbedding, FourierEmbedding)) or cls in _SINUSOIDS:
        return "sinusoid"
    if isinstance(module, TimestepMLP) or cls in _MLPS:
        return "time embedding"
    leaf = name.rpartition(".")[2]
    if isinstance(module, nn.Linear) and leaf in _MODULATION_LINEARS:
        return "modulation"
    if isinstance(module, nn.Linear) and leaf == "linear" and type(parent).__name__.startswith("AdaLayerNorm"):
        return "modulation"  # AdaLayerNormZero / Single / Continuous: linear(SiLU(emb))
    return None


def _label(path: str) -> str:
    for key, label in (("guidance", "guidance"), ("add_", "time ids"), ("resolution", "resolution")):
        if key in path:
            return label
    return "aspect ratio" if "aspect" in path else "timestep"


def _first_tensor(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    sample = getattr(out, "sample", None)
    return sample if isinstance(sample, torch.Tensor) else None


def _record(model: nn.Module, run: Callable[[], object]) -> list[Stage]:
    stages: list[Stage] = []
    pending: list[int] = []  # sinusoid calls whose label waits for the MLP that consumes them

    def hook(kind: str, path: str):
        def fn(module, args, out):
            value = out.detach().clone() if isinstance(out, torch.Tensor) else None
            if kind == "sinusoid":
                arg = args[0] if args else None
                if isinstance(arg, torch.Tensor):
                    stages.append(Stage("sinusoid input", _label(path), path, arg.detach().clone()))
                    pending.append(len(stages) - 1)
                stages.append(Stage("sinusoid", _label(path), path, value))
                pending.append(len(stages) - 1)
            elif value is not None:
                label = _label(path)
                if kind == "time embedding":
                    for i in pending:  # the sinusoid calls before this MLP carried what it carries
                        stages[i].label = label if stages[i].label == "timestep" else stages[i].label
                    pending.clear()
                stages.append(Stage(kind, label, path, value))

        return fn

    modules = dict(model.named_modules())
    handles = [
        module.register_forward_hook(hook(kind, name))
        for name, module in modules.items()
        if (kind := _kind_of(module, name, modules.get(name.rpartition(".")[0]))) is not None
    ]
    try:
        with torch.no_grad():
            out = run()
    finally:
        for h in handles:
            h.remove()
    final = _first_tensor(out)
    if final is not None and not (
        stages and stages[-1].value.shape == final.shape and torch.equal(stages[-1].value, final)
    ):
        stages.append(Stage("output", "timestep", "", final.detach().clone()))
    return stages


def trace_time_path(
    model: nn.Module,
    timesteps: TimestepsLike,
    inputs: Mapping | None = None,
    *,
    contract: str | TimestepContract | None = "auto",
    timestep_arg: str = "timestep",
) -> TimePathTrace:
    """Run ``model`` once and record its time path stage by stage; flag what looks wrong.

    Args:
        model: a diffusers model (any class with ``Timesteps`` / ``TimestepEmbedding`` inside), one of
            this package's modules (``TimestepEmbedder``, ``SinusoidalEmbedding``, the DDPM ``UNet``), or
            any module holding them.
        timesteps: what the model is given as its timestep, exactly as the pipeline passes it.
        inputs: the model's other keyword arguments; None calls ``model(timesteps)``.
        contract: the :class:`TimestepContract` (or its name) to check against; ``"auto"`` picks the
            one of a diffusers model's class (:func:`contract_for`); None checks without one.
        timestep_arg: the keyword the timestep is passed as, with ``inputs`` (``"t"`` for the DDPM UNet).
    """
    t = as_tensor(timesteps)
    if inputs is None:
        stages = _record(model, lambda: model(t))
    else:
        stages = _record(model, lambda: model(**inputs, **{timestep_arg: t}))
    chosen = contract_for(model) if contract == "auto" else contract
    chosen = get_contract(chosen) if isinstance(chosen, str) else chosen
    stages.insert(0, Stage("timestep", "timestep", "", t.detach().clone()))
    return TimePathTrace(type(model).__name__, chosen.name if chosen else None, stages, flag_stages(stages, chosen))


def trace_stages(stages: Mapping[str, Callable], timesteps: TimestepsLike, name: str = "stages") -> TimePathTrace:
    """A trace from callables per stage: ``{"sinusoid input": f, "sinusoid": g, "time embedding": h, ...}``
    applied in :data:`STAGE_KINDS` order, each to the previous stage's value (for :func:`verify_port`)."""
    unknown = set(stages) - set(STAGE_KINDS[1:])
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages are {', '.join(STAGE_KINDS[1:])}")
    value = as_tensor(timesteps)
    recorded = [Stage("timestep", "timestep", "", value)]
    with torch.no_grad():
        for kind in STAGE_KINDS[1:]:
            if kind in stages:
                value = stages[kind](value)
                recorded.append(Stage(kind, "timestep", name, value.detach()))
    return TimePathTrace(name, None, recorded, flag_stages(recorded, None))


# ---------------------------------------------------------------------------------------- flags
def flag_stages(stages: list[Stage], contract: TimestepContract | None) -> list[str]:
    """The flags of :func:`trace_time_path` on recorded stages (see the module docstring)."""
    flags: list[str] = []
    given = stages[0].value if stages and stages[0].kind == "timestep" else None
    inputs = [s for s in stages if s.kind == "sinusoid input"]
    for s in inputs:
        v = s.value
        if v.dtype in _HALF:
            flags.append(
                f"rounding: the {s.label} reaches the sinusoid as {str(v.dtype)[6:]} [{s.module}]: "
                f"{_spacing_text(v)}; float32 would keep it"
            )
    main = next((s for s in inputs if s.label == "timestep"), None)
    if main is not None and given is not None and contract is not None:
        expected = contract.to_sinusoid(given, main.value.dtype if main.value.is_floating_point() else torch.float32)
        if expected.shape == main.value.shape and not torch.equal(expected.to(main.value.dtype), main.value):
            how = relate(expected, main.value) or "no known map"
            flags.append(
                f"contract: the sinusoid input is not what {contract.name} computes from this timestep ({how})"
            )
        low, high = contract.value_range()
        v = main.value.double()
        margin = 0.01 * (high - low) + 1e-6
        largest = float(v.abs().max()) if v.numel() else 0.0
        fractional = bool((v != v.round()).any())
        if (
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
    largest = float(v.double().abs().max()) if v.numel() else 0.0
    spacing = torch.finfo(v.dtype).eps * 2 ** math.floor(math.log2(max(largest, 1e-30)))
    return f"values up to {largest:g} are {spacing:g} apart there"


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
            out = stages[i + 1].value
            ours = sinusoidal_embedding(s.value.float(), out.shape[-1], contract.convention)
            if ours.shape != out.shape or not torch.allclose(ours, out.float(), atol=1e-4):
                return [f"convention: the sinusoid [{s.module}] is not {contract.name}'s {contract.convention}"]
            return []
    return []
