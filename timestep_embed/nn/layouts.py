"""What a checkpoint layout is: the MLPs of a time path under their key names, the keys that tell a
layout apart, and what the layout says about the sinusoid in front of its MLP.

Data only (no diffusers import). The layouts are in `timestep_embed.nn.unet_layouts` and
`timestep_embed.nn.transformer_layouts`; [`time_path`][timestep_embed.nn.time_path] finds one in a
state dict. Each layout names the files its keys were read from; the original releases' names are
those diffusers' converters (``diffusers/loaders/single_file_utils.py``,
``scripts/convert_*_to_diffusers.py``) map.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..conventions import Convention

__all__ = ["MLPKeys", "Layout", "KNOWN_PREFIXES", "DIFFUSERS", "SEQUENTIAL", "MLP_EMBEDDER", "text_mlp", "table"]

# Where whole-model checkpoints keep the network: none, original Stable Diffusion / LDM / ComfyUI
# saves, pipeline dumps, EDM's EDMPrecond (the net as `model`), Cosmos' `net.`, k-diffusion
# wrappers, DistributedDataParallel.
KNOWN_PREFIXES = ("", "model.diffusion_model.", "unet.", "transformer.", "model.", "net.", "inner_model.", "module.")
DIFFUSERS = ("linear_1", "linear_2")  # diffusers TimestepEmbedding
SEQUENTIAL = ("0", "2")  # nn.Sequential(Linear, SiLU, Linear)
MLP_EMBEDDER = ("in_layer", "out_layer")  # Flux / HunyuanVideo MLPEmbedder


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


@dataclass(frozen=True)
class Layout:
    """A checkpoint layout: its MLPs (the main time path first), the keys that tell it apart
    (``markers``: substrings some key must hold; ``absent``: substrings no key may hold), and the
    sinusoid in front of the main MLP.

    ``convention`` None: the weights do not say (diffusers UNets keep ``flip_sin_to_cos`` and
    ``freq_shift`` in ``config.json``). ``scale``: the sinusoid's scale (Qwen-Image's
    ``Timesteps(scale=1000)``); ``in_model_dtype``: the timestep is cast to the model's dtype first;
    ``scale_first``: ``scale * t`` is formed in that dtype before the sinusoid (Flux's ``* 1000``; None:
    as ``in_model_dtype``), else the scale multiplies the float32 phase (diffusers' ``Timesteps``).
    ``time_input``: what the model does to its timestep before
    the sinusoid (k-diffusion: ``ln(sigma) / 4``). ``fourier``: the Fourier weights' key and the
    [`FourierEmbedding`][timestep_embed.FourierEmbedding] options instead of a sinusoid. ``auto=False``: picked only
    when the family or the layout is named (its keys are a generic layout's)."""

    name: str
    family: str | None
    source: str
    mlps: tuple[MLPKeys, ...]
    markers: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    convention: str | Convention | None = "adm"
    scale: float = 1.0
    in_model_dtype: bool = False
    scale_first: bool | None = None
    precise: bool = False
    fourier: tuple[str, dict] | None = field(default=None, compare=False)
    act: str = "silu"
    post_act: str | None = None
    time_input: str = "identity"
    auto: bool = True


def text_mlp(prefix: str, names: tuple[str, ...] = DIFFUSERS) -> MLPKeys:
    return MLPKeys("text", prefix, names, fed="pooled text embeddings")


def table(label: str, key: str) -> MLPKeys:
    return MLPKeys(label, key, (), fed="class labels (an embedding table)")
