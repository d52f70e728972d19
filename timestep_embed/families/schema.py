"""What a model family is, as data: its timestep contract (what the scheduler gives, what the pipeline
passes, what the model does to it before the sinusoid and in which dtype), its checkpoint layouts
(the key names of its time MLPs and the keys that tell a checkpoint apart) and the diffusers classes
it covers.

No diffusers, nn or interop import: a family is strings, a few lines of arithmetic on tensors, and
tests of a model's ``config.json``. The families are in the modules beside this one, listed by
[`registry`][timestep_embed.families.registry]; [`find_time_paths`][timestep_embed.nn.find_time_paths]
matches the layouts, the interop tools read the contracts. The original releases' key names are those
diffusers' converters (``diffusers/loaders/single_file_utils.py``, ``scripts/convert_*_to_diffusers.py``) map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field

import torch

from ..checks import check_float_dtype, real_array
from ..conventions import Convention, get_convention

__all__ = ["MLPKeys", "Layout", "TimestepContract", "Family", "KNOWN_PREFIXES", "DIFFUSERS", "SEQUENTIAL"]
__all__ += ["MLP_EMBEDDER", "ADM", "FLOW", "FLOW_SHIFTED", "text_mlp", "table", "every", "diffusers_contract"]
__all__ += ["diffusers_sources", "over_1000", "in_model_dtype", "in_dtype_times_1000"]

# Where whole-model checkpoints keep the network: none, original Stable Diffusion / LDM / ComfyUI
# saves, pipeline dumps, EDM's EDMPrecond (the net as `model`), Cosmos' `net.`, k-diffusion
# wrappers, DistributedDataParallel.
KNOWN_PREFIXES = ("", "model.diffusion_model.", "unet.", "transformer.", "model.", "net.", "inner_model.", "module.")
DIFFUSERS = ("linear_1", "linear_2")  # diffusers TimestepEmbedding
SEQUENTIAL = ("0", "2")  # nn.Sequential(Linear, SiLU, Linear)
MLP_EMBEDDER = ("in_layer", "out_layer")  # Flux / HunyuanVideo MLPEmbedder
ADM = get_convention("adm")
FLOW = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler)"
FLOW_SHIFTED = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler, resolution-dependent shift)"


@dataclass(frozen=True)
class MLPKeys:
    """One MLP of a layout: ``label`` (what it carries), ``prefix`` (may hold ``{i}``: one copy per
    block), the two Linear layers' names, and what it is fed (``"sinusoid"``: a time path this
    package loads; anything else is named, not loaded). ``names=()``: a single tensor at ``prefix``."""

    label: str
    prefix: str
    names: tuple[str, ...] = DIFFUSERS
    fed: str = "sinusoid"

    def key(self, i: int | None = None, which: int = 0) -> str:
        """The key of the first (``which=0``) or second Linear's weight (block ``i`` for ``{i}``)."""
        prefix = self.prefix.replace("{i}", str(i if i is not None else 0))
        return prefix + self.names[which] + ".weight" if self.names else prefix


def text_mlp(prefix: str, names: tuple[str, ...] = DIFFUSERS) -> MLPKeys:
    return MLPKeys("text", prefix, names, fed="pooled text embeddings")


def table(label: str, key: str) -> MLPKeys:
    return MLPKeys(label, key, (), fed="class labels (an embedding table)")


@dataclass(frozen=True)
class Layout:
    """A checkpoint layout: its MLPs (the main time path first), the keys that tell it apart
    (``markers``: substrings some key must hold; ``absent``: substrings no key may hold), and the
    sinusoid in front of the main MLP.

    ``source``: the file its keys were read from ("": its family's first source). ``family``: the
    contract's name, filled in by its [`Family`][timestep_embed.families.Family] (None: a generic
    layout). ``convention`` None: the weights do not say (diffusers UNets keep ``flip_sin_to_cos`` and
    ``freq_shift`` in ``config.json``). ``scale``: the sinusoid's scale (Qwen-Image's
    ``Timesteps(scale=1000)``); ``in_model_dtype``: the timestep is cast to the model's dtype first;
    ``scale_first``: ``scale * t`` is formed in that dtype before the sinusoid (Flux's ``* 1000``; None:
    as ``in_model_dtype``), else the scale multiplies the float32 phase (diffusers' ``Timesteps``).
    ``time_input``: what the model does to its timestep before the sinusoid (k-diffusion: ``ln(sigma) / 4``).
    ``fourier``: the Fourier weights' key and the [`FourierEmbedding`][timestep_embed.FourierEmbedding]
    options instead of a sinusoid; ``fourier_column``: that weight is stored ``[n, 1]`` (k-diffusion's
    ``FourierFeatures(1, width)``), not ``[n]``. ``auto=False``: picked only when the family or the layout is named
    (its keys are a generic layout's). ``parent``: the layout whose keys these extend (the one with more
    markers wins); ``twins``: layouts with the very same keys (a state dict alone cannot tell them
    apart). ``classes``: diffusers classes whose folder names this layout (their keys are another's)."""

    name: str
    mlps: tuple[MLPKeys, ...]
    source: str = ""
    _: KW_ONLY
    family: str | None = None
    markers: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    convention: str | Convention | None = "adm"
    scale: float = 1.0
    in_model_dtype: bool = False
    scale_first: bool | None = None
    precise: bool = False
    fourier: tuple[str, dict] | None = field(default=None, compare=False)
    fourier_column: bool = False
    act: str = "silu"
    post_act: str | None = None
    time_input: str = "identity"
    auto: bool = True
    parent: str | None = None
    twins: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()

    def required_keys(self) -> list[str]:
        """The keys its main time path cannot load without: both Linear weights (block 0's copy) and
        its Fourier weight."""
        mlp = self.mlps[0]
        keys = [mlp.key(0, w) for w in range(len(mlp.names))] if mlp.names else [mlp.key(0)]
        return keys + ([self.fourier[0]] if self.fourier else [])

    def fits(self, keys: Iterable[str], prefix: str = "") -> bool:
        """Whether the keys under ``prefix`` hold every marker and no absent key."""
        under = [k[len(prefix) :] for k in keys if k.startswith(prefix)]
        return all(any(m in k for k in under) for m in self.markers) and not any(
            a in k for a in self.absent for k in under
        )


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _unchanged(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t


def over_1000(t: torch.Tensor) -> torch.Tensor:
    """``timestep / 1000`` (Flux's pipelines), in t's floating dtype (an integer t in float32)."""
    return (t if t.is_floating_point() else t.float()) / 1000


def in_model_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``timestep.to(model dtype)`` before the sinusoid (Qwen-Image)."""
    return t.to(dtype)


def in_dtype_times_1000(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``timestep.to(hidden_states.dtype) * 1000`` in the model's dtype (Flux: bf16 sigma 0.99 -> 988)."""
    return t.to(dtype) * 1000


@dataclass(frozen=True)
class TimestepContract:
    """The time path of one model family, from the scheduler's value to the blocks.

    Attributes:
        name: the key in ``CONTRACTS`` ([`registry`][timestep_embed.families.registry]).
        family: the models it covers, in words.
        sources: ``repository: path`` of every file it was read from.
        raw: what the scheduler or sampler produces, in words (``"integer step t in 0..999"``).
        raw_range: the range of the raw value over a sampling run.
        pipeline: what the pipeline passes to the model as ``timestep``, as math on the raw value.
        mlp: the MLP after the sinusoid, in words (widths, activation).
        injection: how the embedding enters the blocks (additive, scale-shift, adaLN-Zero, adaLN-single).
        convention: the sinusoid (None: Fourier features, see ``notes``).
        sinusoid_dim: its width (None: set by the model's config, see ``mlp``).
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
    _: KW_ONLY
    mlp: str
    injection: str
    convention: Convention | None = ADM
    sinusoid_dim: int | None = None
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

    def value_range(self, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
        """The range of the value inside the sinusoid over a sampling run, in a model of ``dtype``."""
        ends = self.sinusoid_input(torch.tensor(self.raw_range, dtype=torch.float64), dtype)
        return float(ends.min()), float(ends.max())

    def model_input(self, raw, latents_dtype: torch.dtype | None = None) -> torch.Tensor:
        """The model's ``timestep`` for raw scheduler values, the pipeline's latents in ``latents_dtype``
        (None: the timestep stays as ``to_model`` forms it, float32 for float32 scheduler values)."""
        if isinstance(raw, torch.Tensor):
            if raw.dtype == torch.bool or raw.dtype.is_complex:
                raise TypeError(f"raw must hold the scheduler's real time values, got a tensor of dtype {raw.dtype}")
        else:
            real_array(raw, "raw")  # strings, bools, complex and ragged lists get a named TypeError
        raw = torch.as_tensor(raw)
        if latents_dtype is not None:
            check_float_dtype(latents_dtype, "latents_dtype")
        if latents_dtype is None or self.pipeline_cast is None:
            return self.to_model(raw)
        if self.pipeline_cast == "before":
            return self.to_model(raw.to(latents_dtype))
        return self.to_model(raw).to(latents_dtype)

    def sinusoid_input(
        self, raw, dtype: torch.dtype = torch.float32, latents_dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """The value that reaches the sinusoid for raw scheduler values ``raw`` in a model of ``dtype``
        (the pipeline's latents in ``latents_dtype``: see `model_input`)."""
        return self.to_sinusoid(self.model_input(raw, latents_dtype), check_float_dtype(dtype))

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


def diffusers_sources(model: str, pipeline: str) -> tuple[str, str]:
    """The ``sources`` of a contract read from a diffusers transformer and its pipeline."""
    return f"huggingface/diffusers: models/transformers/{model}.py", f"huggingface/diffusers: pipelines/{pipeline}.py"


def diffusers_contract(name: str, family: str, model_file: str, pipeline_file: str, **fields) -> TimestepContract:
    """The contract of a diffusers transformer read from its model and pipeline files: by default the
    flow-matching scheduler's sigma * 1000 passed as it is to a 256-wide ADM sinusoid and a SiLU MLP."""
    defaults = dict(raw=FLOW, raw_range=(0.0, 1000.0), pipeline="t", sinusoid_dim=256)
    defaults["mlp"] = "256 -> hidden -> hidden, SiLU"
    return TimestepContract(name, family, diffusers_sources(model_file, pipeline_file), **{**defaults, **fields})


ConfigTest = Callable[[Mapping], bool]


def every(*names: str, when: ConfigTest | None = None) -> dict[str, ConfigTest | None]:
    """``classes`` of a [`Family`][timestep_embed.families.Family]: each of ``names`` is the family's
    when its ``config.json`` passes ``when`` (None: always)."""
    return dict.fromkeys(names, when)


@dataclass(frozen=True)
class Family:
    """One model family: its contract, its checkpoint layouts (each given ``family=`` the contract's
    name, and the contract's first source where it names none) and the diffusers classes it covers
    (``classes``: class name -> a test of the model's config, None: always this family)."""

    contract: TimestepContract
    layouts: tuple[Layout, ...] = ()
    classes: Mapping[str, ConfigTest | None] = field(default_factory=dict)

    def __post_init__(self):
        source = self.contract.sources[0]
        owned = tuple(dataclasses.replace(x, family=self.name, source=x.source or source) for x in self.layouts)
        object.__setattr__(self, "layouts", owned)

    @property
    def name(self) -> str:
        return self.contract.name
