"""The timestep contract of a model family: what its scheduler produces, what reaches the sinusoid.

A [`TimestepContract`][timestep_embed.interop.TimestepContract] follows one number from the scheduler to the blocks: the
raw value (an integer step, sigma, sigma * 1000 ...), what the pipeline passes as the model's ``timestep``
(`TimestepContract.to_model`), what the model does with it before the sinusoid and in which
dtype (`TimestepContract.to_sinusoid`), the sinusoid, the MLP and how the embedding enters
the blocks. The registry of real families is [`timestep_embed.interop.contracts`][timestep_embed.interop.contracts].

No diffusers import: a contract is data and a few lines of arithmetic on tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..conventions import Convention

__all__ = ["TimestepContract", "over_1000", "in_model_dtype", "in_dtype_times_1000", "diffusers_sources"]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def diffusers_sources(model: str, pipeline: str) -> tuple[str, str]:
    """The ``sources`` of a contract read from a diffusers transformer and its pipeline."""
    return f"huggingface/diffusers: models/transformers/{model}.py", f"huggingface/diffusers: pipelines/{pipeline}.py"


def over_1000(t: torch.Tensor) -> torch.Tensor:
    """``timestep / 1000`` (Flux's pipelines), in t's floating dtype (an integer t in float32)."""
    return (t if t.is_floating_point() else t.float()) / 1000


def in_model_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``timestep.to(model dtype)`` before the sinusoid (Qwen-Image)."""
    return t.to(dtype)


def in_dtype_times_1000(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``timestep.to(hidden_states.dtype) * 1000`` in the model's dtype (Flux: bf16 sigma 0.99 -> 988)."""
    return t.to(dtype) * 1000


def _unchanged(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t


@dataclass(frozen=True)
class TimestepContract:
    """The time path of one model family, from the scheduler's value to the blocks.

    Attributes:
        name: the key in `timestep_embed.interop.contracts.CONTRACTS`.
        family: the models it covers, in words.
        sources: ``repository: path`` of every file it was read from.
        raw: what the scheduler or sampler produces, in words (``"integer step t in 0..999"``).
        raw_range: the range of the raw value over a sampling run.
        pipeline: what the pipeline passes to the model as ``timestep``, as math on the raw value.
        convention: the sinusoid (None: Fourier features, see ``notes``).
        sinusoid_dim: its width (None: set by the model's config, see ``mlp``).
        mlp: the MLP after the sinusoid, in words (widths, activation).
        injection: how the embedding enters the blocks (additive, scale-shift, adaLN-Zero, adaLN-single).
        inside: what the model does with ``timestep`` before the sinusoid, as math.
        formed_in: the dtype the sinusoid's input is formed in.
        extra: other time-like inputs (guidance, size ids, class labels) and how they are formed.
        diffusers: the diffusers class that implements the family (None: not in diffusers).
        notes: caveats, differences between ports.
        to_model: ``pipeline`` on tensors: raw scheduler values -> the model's ``timestep`` argument.
        to_sinusoid: ``inside`` on tensors: ``(timestep, model dtype) -> the sinusoid's input``.
        pipeline_cast: where the pipeline casts the timestep to the latents' dtype: ``"before"``
            ``to_model`` (Flux: ``t.expand(b).to(latents.dtype)``, then ``/ 1000`` in that dtype),
            ``"after"`` it (AuraFlow: ``torch.tensor([t / 1000]).to(latents.dtype)``), or None (never).
    """

    name: str
    family: str
    sources: tuple[str, ...]
    raw: str
    raw_range: tuple[float, float]
    pipeline: str
    convention: Convention | None
    sinusoid_dim: int | None
    mlp: str
    injection: str
    inside: str = "nothing"
    formed_in: str = "float32"
    extra: tuple[str, ...] = ()
    diffusers: str | None = None
    notes: str = ""
    to_model: Callable[[torch.Tensor], torch.Tensor] = field(default=_identity, repr=False, compare=False)
    to_sinusoid: Callable[[torch.Tensor, torch.dtype], torch.Tensor] = field(
        default=_unchanged, repr=False, compare=False
    )
    pipeline_cast: str | None = None

    def __post_init__(self):
        if self.pipeline_cast not in (None, "before", "after"):
            raise ValueError(f"pipeline_cast must be None, 'before' or 'after', got {self.pipeline_cast!r}")

    def model_range(self) -> tuple[float, float]:
        """The range of the model's ``timestep`` argument over a sampling run."""
        ends = self.to_model(torch.tensor(self.raw_range, dtype=torch.float64))
        return float(ends.min()), float(ends.max())

    def value_range(self, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
        """The range of the value inside the sinusoid over a sampling run, in a model of ``dtype``."""
        ends = self.sinusoid_input(torch.tensor(self.raw_range, dtype=torch.float64), dtype)
        return float(ends.min()), float(ends.max())

    def model_input(self, raw, latents_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The model's ``timestep`` for raw scheduler values, the pipeline's latents in ``latents_dtype``
        (None: the timestep stays as ``to_model`` forms it, float32 for float32 scheduler values)."""
        raw = torch.as_tensor(raw)
        if latents_dtype is None or self.pipeline_cast is None:
            return self.to_model(raw)
        if self.pipeline_cast == "before":
            return self.to_model(raw.to(latents_dtype))
        return self.to_model(raw).to(latents_dtype)

    def sinusoid_input(
        self, raw, dtype: torch.dtype = torch.float32, latents_dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """The value that reaches the sinusoid for raw scheduler values ``raw`` in a model of ``dtype``
        (the pipeline's latents in ``latents_dtype``: see
        [`model_input`][timestep_embed.interop.timestep_contract.TimestepContract.model_input])."""
        return self.to_sinusoid(self.model_input(raw, latents_dtype), dtype)

    def describe(self) -> str:
        """The contract as a few aligned lines of text."""
        lines = [
            f"{self.name}: {self.family}",
            f"  scheduler gives: {self.raw} (range {self.raw_range[0]:g}..{self.raw_range[1]:g})",
            f"  pipeline passes: timestep = {self.pipeline}",
            f"  model does:      {self.inside} (formed in {self.formed_in})",
            f"  sinusoid:        {self.convention} x {self.sinusoid_dim or 'config width'}",
            f"  MLP:             {self.mlp}",
            f"  into the blocks: {self.injection}",
            *[f"  also:            {e}" for e in self.extra],
            f"  diffusers:       {self.diffusers or '(not in diffusers)'}",
            *[f"  source:          {s}" for s in self.sources],
        ]
        return "\n".join(lines + ([f"  note: {self.notes}"] if self.notes else []))
