"""Follow the timestep through a model: what arrives, what reaches the sinusoid, what leaves each stage.

[`trace_time_path`][timestep_embed.interop.trace_time_path] runs a model once with forward hooks on its time-path
modules and records, in call order, every stage: the ``timestep`` argument, each sinusoid's (or Fourier projection's)
input and output, each time MLP's output, each block's modulation and the model's output. It works on
diffusers' models (their ``Timesteps``, ``GaussianFourierProjection``, ``TimestepEmbedding`` and
``AdaLayerNorm*`` modules, found by class name) and on this package's modules. Then it flags what
goes wrong in ports: a timestep rounded by a low-precision dtype, a value outside the range the
model's [`TimestepContract`][timestep_embed.families.TimestepContract] expects, the scale applied twice, a sinusoid that
is not the contract's convention.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..families import TimestepContract, contract_for, get_contract
from ..guards import TimestepsLike, as_tensor, scales_in_input_dtype
from ..nn import FourierEmbedding, SinusoidalEmbedding, TimestepMLP
from .flags import flag_stages
from .precision import schedule_precision
from .stage import STAGE_KINDS, Stage

__all__ = ["Stage", "TimePathTrace", "trace_time_path", "trace_stages", "STAGE_KINDS"]

# diffusers' class names
_SINUSOIDS = ("Timesteps", "GaussianFourierProjection", "SkyReelsV2Timesteps", "BriaTimesteps", "BriaFiboTimesteps")
_MLPS = ("TimestepEmbedding",)
# The blocks' own projections of emb: diffusers ResnetBlock2D, ours, ResidualTemporalBlock1D, Wan.
_MODULATION_LINEARS = ("time_emb_proj", "emb_proj", "time_emb", "time_proj")


@dataclass
class TimePathTrace:
    """What [`trace_time_path`][timestep_embed.interop.trace_time_path] saw: the stages in call order and the flags
    raised on them."""

    model: str
    contract: str | None
    stages: list[Stage]
    flags: list[str]

    @property
    def opaque(self) -> bool:
        """Whether its modules recorded nothing: only the timestep and the output (an inline sinusoid and MLP)."""
        return {s.kind for s in self.stages} <= {"timestep", "output"}

    def find(self, kind: str, label: str = "timestep") -> list[Stage]:
        """The stages of ``kind`` carrying ``label``, in call order."""
        return [s for s in self.stages if s.kind == kind and s.label == label]

    def precision(self, dtype: torch.dtype = torch.bfloat16, **options):
        """The precision of this model's time path in ``dtype`` over its family's real sampling run
        (`timestep_embed.interop.precision.schedule_precision` of the trace's contract)."""
        if self.contract is None:
            raise ValueError(f"this trace of {self.model} has no contract: pass contract= to trace_time_path")
        return schedule_precision(self.contract, dtype, **options)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "contract": self.contract,
            "stages": [s.summary() for s in self.stages],
            "flags": self.flags,
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **{"indent": 2, "allow_nan": False, **kwargs})

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
def is_dit_style(module: nn.Module) -> bool:
    """DiT's ``TimestepEmbedder`` as its ports copy it (Z-Image, BRIA-FIBO 2): the sinusoid is the
    static ``timestep_embedding(t, dim)``, the MLP the ``nn.Sequential`` ``mlp`` it feeds."""
    return callable(getattr(module, "timestep_embedding", None)) and isinstance(
        getattr(module, "mlp", None), nn.Sequential
    )


def _kind_of(module: nn.Module, name: str, parent: nn.Module | None) -> str | None:
    cls = type(module).__name__
    if is_dit_style(module):
        return "dit embedder"
    if parent is not None and is_dit_style(parent) and name.rpartition(".")[2] == "mlp":
        return "dit mlp"
    if isinstance(module, (SinusoidalEmbedding, FourierEmbedding)) or cls in _SINUSOIDS:
        return "sinusoid"
    if isinstance(module, TimestepMLP) or cls in _MLPS:
        return "time embedding"
    if isinstance(module, nn.Sequential) and name.rpartition(".")[2] == "fps_embedding":
        return "time embedding"  # I2VGen-XL's fps MLP (unet_i2vgen_xl.py): Linear, SiLU, Linear
    leaf = name.rpartition(".")[2]
    if isinstance(module, nn.Linear) and leaf in _MODULATION_LINEARS:
        return "modulation"
    if isinstance(module, nn.Linear) and leaf == "linear" and type(parent).__name__.startswith("AdaLayerNorm"):
        return "modulation"  # AdaLayerNormZero / Single / Continuous: linear(SiLU(emb))
    return None


def _label(path: str) -> str:
    """What a time-path module carries, from its name (the sinusoid's label then follows the MLP it feeds)."""
    if "context_embedder.time_text_embed" in path or "txt_in.t_embedder" in path:
        return "refiner"  # HunyuanVideo's text refiner (diffusers and the original)
    leaf = path.rpartition(".")[2]
    labels = (
        ("guidance", "guidance"),
        ("add_", "time ids"),
        ("resolution", "resolution"),
        ("aspect", "aspect ratio"),
        ("condition_proj", "size"),  # CogView's original size, target size and crop coordinates
        ("size_proj", "size"),  # HunyuanDiT's image meta size
        ("pooled", "text"),  # HiDream's pooled text embedder (a TimestepEmbedding)
        ("fps", "fps"),  # I2VGen-XL: fps_embedding(time_proj(fps))
        ("pos_embed", "frame index"),  # SVD's temporal attention: time_pos_embed(time_proj(arange(frames)))
    )
    return next((label for key, label in labels if key in leaf), "timestep")


def _first_tensor(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    sample = getattr(out, "sample", None)
    return sample if isinstance(sample, torch.Tensor) else None


def phase_of(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """``(phase, frequency)`` of a sinusoid module's input ``x`` (see [`Stage`][timestep_embed.interop.Stage])."""
    if isinstance(module, SinusoidalEmbedding):
        c = module.convention
        if scales_in_input_dtype(module.scale_in_input_dtype, x, c):
            phase = (c.scale * x).double()  # the product formed in x's dtype, as the module forms it
        else:
            phase = x.double() * c.scale
        return phase, max(1.0, 1.0 / c.max_period)
    if isinstance(module, FourierEmbedding) or type(module).__name__ == "GaussianFourierProjection":
        w = torch.as_tensor(module.weight).detach().double()
        frequency = 2 * math.pi * float(w.abs().sum(-1).max() if w.dim() > 1 else w.abs().max())
        return (x.double().log() if module.log else x.double()), frequency
    return x.double() * float(getattr(module, "scale", 1.0)), 1.0  # diffusers' Timesteps: scale * (t w)


def _record(model: nn.Module, run: Callable[[], object]) -> list[Stage]:
    stages: list[Stage] = []
    pending: list[int] = []  # sinusoid calls whose label waits for the MLP that consumes them

    def pre_hook(path: str):  # a DiT-style embedder's input reaches its inline sinusoid
        def fn(module, args):
            arg = args[0] if args else None
            if isinstance(arg, torch.Tensor):
                t = arg.detach().clone()
                stages.append(Stage("sinusoid input", _label(path), path, t, t.double(), 1.0))

        return fn

    def hook(kind: str, path: str):
        def fn(module, args, out):
            if kind == "dit mlp":  # in: the sinusoid; out: the time embedding
                owner = path.rpartition(".")[0]
                stages.append(Stage("sinusoid", _label(owner), owner, args[0].detach().clone()))
                stages.append(Stage("time embedding", _label(owner), path, out.detach().clone()))
                return
            value = out.detach().clone() if isinstance(out, torch.Tensor) else None
            if kind == "sinusoid":
                arg = args[0] if args else None
                if isinstance(arg, torch.Tensor):
                    phase, frequency = phase_of(module, arg.detach())
                    stages.append(Stage("sinusoid input", _label(path), path, arg.detach().clone(), phase, frequency))
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
    kinds = {name: _kind_of(module, name, modules.get(name.rpartition(".")[0])) for name, module in modules.items()}
    handles = [
        modules[name].register_forward_pre_hook(pre_hook(name))
        if kind == "dit embedder"
        else modules[name].register_forward_hook(hook(kind, name))
        for name, kind in kinds.items()
        if kind is not None
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
        contract: the [`TimestepContract`][timestep_embed.families.TimestepContract] (or its name) to check against;
            ``"auto"`` picks the one of a diffusers model's class
            ([`contract_for`][timestep_embed.families.contract_for]); None checks without one.
        timestep_arg: the keyword the timestep is passed as, with ``inputs`` (``"t"`` for the DDPM UNet).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module (a diffusers model or one of ours), got {type(model).__name__}")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise TypeError(f"inputs must be a mapping of the model's keyword arguments, got {type(inputs).__name__}")
    if not isinstance(timestep_arg, str) or not timestep_arg.isidentifier():
        raise TypeError(f"timestep_arg must be the keyword the timestep is passed as (a name), got {timestep_arg!r}")
    t = as_tensor(timesteps)
    _check_some(t)
    if inputs is None:
        stages = _record(model, lambda: model(t))
    else:
        stages = _record(model, lambda: model(**inputs, **{timestep_arg: t}))
    chosen = contract_for(model) if contract == "auto" else contract
    chosen = get_contract(chosen) if isinstance(chosen, str) else chosen
    stages.insert(0, Stage("timestep", "timestep", "", t.detach().clone()))
    return TimePathTrace(type(model).__name__, chosen.name if chosen else None, stages, flag_stages(stages, chosen))


def _check_some(t: torch.Tensor) -> None:
    if t.numel() == 0:
        raise ValueError(f"timesteps is empty (shape {tuple(t.shape)}): a trace needs at least one timestep")


def trace_stages(stages: Mapping[str, Callable], timesteps: TimestepsLike, name: str = "stages") -> TimePathTrace:
    """A trace from callables per stage: ``{"sinusoid input": f, "sinusoid": g, "time embedding": h, ...}``
    applied in `STAGE_KINDS` order, each to the previous stage's value (for
    [`verify_port`][timestep_embed.interop.verify_port])."""
    unknown = set(stages) - set(STAGE_KINDS[1:])
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages are {', '.join(STAGE_KINDS[1:])}")
    value = as_tensor(timesteps)
    _check_some(value)
    recorded = [Stage("timestep", "timestep", "", value)]
    with torch.no_grad():
        for kind in STAGE_KINDS[1:]:
            if kind == "sinusoid" and kind in stages:  # what reaches the sinusoid, as a model's trace records it
                fn = stages[kind]
                phase, frequency = phase_of(fn, value) if isinstance(fn, nn.Module) else (value.double(), 1.0)
                if "sinusoid input" not in stages:
                    recorded.append(Stage("sinusoid input", "timestep", name, value.detach(), phase, frequency))
                else:
                    recorded[-1].phase, recorded[-1].frequency = phase, frequency
            if kind in stages:
                value = stages[kind](value)
                recorded.append(Stage(kind, "timestep", name, value.detach()))
    return TimePathTrace(name, None, recorded, flag_stages(recorded, None))
