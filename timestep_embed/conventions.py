"""Named conventions of the sinusoid: the presets real codebases use, diffusers' flags, column permutations.

A [`Convention`][timestep_embed.Convention] fixes everything about the sinusoid but its width: how the sin/cos columns
are arranged (``layout``, ``first``), the frequencies (``freq_shift``, ``max_period``) and the
argument's multiplier ``scale`` and an output ``gain``. With ``h = dim // 2`` and ``k = 0 .. h-1``:
``w_k = max_period ** (-k / (h - freq_shift))`` and the columns hold ``gain * sin(scale * t * w_k)``
and ``gain * cos(scale * t * w_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from .checks import check_int, check_real

__all__ = [
    "Convention",
    "PRESETS",
    "get_convention",
    "resolve_convention",
    "convention_from_diffusers",
    "convention_to_diffusers",
    "layout_permutation",
]

LAYOUTS = ("concat", "interleaved")
_GRID_FIELDS = ("freq_shift", "max_period", "scale", "gain")  # everything but the column order
FIRSTS = ("sin", "cos")


@dataclass(frozen=True)
class Convention:
    """How a sinusoidal embedding is laid out and which frequencies it uses.

    Attributes:
        layout: ``"concat"``: halves ``[first(x_0..x_{h-1}), second(x_0..x_{h-1})]``;
            ``"interleaved"``: pairs ``[first(x_0), second(x_0), first(x_1), ...]``.
        first: ``"sin"`` or ``"cos"``: the function of the first half / the even columns.
        freq_shift: ``w_k = max_period ** (-k / (h - freq_shift))``. 0 spaces the exponents over
            [0, 1) (ADM, Vaswani), 1 over [0, 1] (DDPM, TF's ``half_dim - 1``).
        max_period: the longest period of the frequencies (10000 in every codebase we know).
        scale: multiplies the argument: ``sin(scale * t * w_k)``.
        gain: multiplies the output: ``gain * sin(...)`` (x-transformers' ScaledSinusoidalEmbedding
            starts at ``dim ** -0.5``); 1 everywhere else.
    """

    layout: str = "concat"
    first: str = "cos"
    freq_shift: float = 0.0
    max_period: float = 10000.0
    scale: float = 1.0
    gain: float = 1.0

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.first not in FIRSTS:
            raise ValueError(f"first must be one of {FIRSTS}, got {self.first!r}")
        for name in _GRID_FIELDS:
            check_real(getattr(self, name), name)
        if self.max_period <= 0:
            raise ValueError(f"max_period must be > 0 (the longest period of the frequencies), got {self.max_period!r}")

    def same_frequencies(self, other: Convention) -> bool:
        """True when both hold the same values (possibly in another column order)."""
        return all(getattr(self, name) == getattr(other, name) for name in _GRID_FIELDS)

    def column_of(self, function: str, k: int, dim: int) -> int:
        """Column of ``function`` ("sin"/"cos") of frequency k in an embedding of width ``dim``."""
        slot = 0 if function == self.first else 1
        return slot * (dim // 2) + k if self.layout == "concat" else 2 * k + slot


# Each preset cites the file whose formula it reproduces; tests/test_conventions.py transcribes
# each of those formulas independently and checks the preset against it.
PRESETS: dict[str, Convention] = {
    # Vaswani et al. 2017, sec. 3.5: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...);
    # The Annotated Transformer `PositionalEncoding` (div_term = exp(arange(0, d, 2) * -ln(1e4)/d)).
    "vaswani": Convention("interleaved", "sin", 0.0),
    # Ho et al. 2020, diffusion_tf/nn.py `get_timestep_embedding`: ln(1e4)/(half_dim - 1), concat
    # [sin, cos]; the same in score_sde `layers.get_timestep_embedding`, fairseq
    # `SinusoidalPositionalEmbedding`, tensor2tensor, lucidrains' denoising-diffusion-pytorch
    # `SinusoidalPosEmb`, and the defaults of diffusers' `get_timestep_embedding`.
    "ddpm": Convention("concat", "sin", 1.0),
    # improved-diffusion / guided-diffusion `nn.timestep_embedding`: freqs = exp(-ln(max_period) *
    # arange(half) / half), concat [cos, sin]; the same in Stable Diffusion (ldm
    # `diffusionmodules/util.timestep_embedding`), DiT `TimestepEmbedder.timestep_embedding`, and
    # diffusers UNet2DModel / UNet2DConditionModel defaults (flip_sin_to_cos=True, freq_shift=0).
    "adm": Convention("concat", "cos", 0.0),
    # EDM (Karras et al. 2022) training/networks.py `PositionalEmbedding(endpoint=False)`:
    # freqs = (1/max_positions) ** (arange(C/2) / (C/2)), concat [cos, sin] (DhariwalUNet). The same
    # numbers as "adm"; EDM feeds it c_noise = ln(sigma) / 4 instead of an index.
    "edm": Convention("concat", "cos", 0.0),
    # EDM SongUNet with embedding_type="positional": PositionalEmbedding(endpoint=True), whose
    # [cos, sin] halves SongUNet then swaps (reshape(2, -1).flip): sin first, shift 1.
    "edm_song": Convention("concat", "sin", 1.0),
    # MAE (He et al. 2022) util/pos_embed.py `get_1d_sincos_pos_embed_from_grid`: omega =
    # 1 / 10000 ** (arange(D/2) / (D/2)), concat [sin, cos]: the patch-grid position embedding of DiT,
    # PixArt and SD3 (diffusers `get_1d_sincos_pos_embed_from_grid`), timm's `build_sincos2d_pos_embed`
    # (per axis) and x-transformers' `ScaledSinusoidalEmbedding` (times a learned gain).
    "mae": Convention("concat", "sin", 0.0),
}
# Aliases: codebase names for the conventions above.
PRESETS.update(ldm=PRESETS["adm"], dit=PRESETS["adm"], diffusers_unet=PRESETS["adm"], diffusers=PRESETS["ddpm"])


def get_convention(name: str) -> Convention:
    """The preset called ``name`` (see `PRESETS`)."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"convention must be one of {sorted(PRESETS)} or a Convention, got {name!r}")
    return PRESETS[name]


_FIELDS = frozenset(f.name for f in fields(Convention))


def resolve_convention(convention: str | Convention = "adm", **overrides) -> Convention:
    """A Convention from a preset name or a Convention, with the non-None ``overrides`` applied."""
    base = convention if isinstance(convention, Convention) else get_convention(convention)
    unknown = set(overrides) - _FIELDS
    if unknown:
        raise TypeError(f"unknown convention option(s) {sorted(unknown)}; accepted: {sorted(_FIELDS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **changes) if changes else base


def convention_from_diffusers(
    flip_sin_to_cos: bool = False, downscale_freq_shift: float = 1, scale: float = 1, max_period: float = 10000
) -> Convention:
    """The Convention that diffusers' ``get_timestep_embedding`` flags describe (diffusers' defaults)."""
    if isinstance(flip_sin_to_cos, (str, bytes, float)) or flip_sin_to_cos not in (0, 1):
        raise TypeError(f"flip_sin_to_cos must be True or False, got {flip_sin_to_cos!r}")
    first = "cos" if flip_sin_to_cos else "sin"
    shift, scale = check_real(downscale_freq_shift, "downscale_freq_shift"), check_real(scale, "scale")
    return Convention("concat", first, shift, check_real(max_period, "max_period", positive=True), scale)


def convention_to_diffusers(convention: str | Convention) -> dict:
    """diffusers' flags for a Convention; raises ValueError for the interleaved layout."""
    conv = resolve_convention(convention)
    if conv.layout != "concat":
        raise ValueError(
            f"diffusers only has the concatenated layout; {conv} is {conv.layout!r}. "
            "Use layout_permutation() to map its columns onto a concat convention."
        )
    if conv.gain != 1:
        raise ValueError(f"diffusers' sinusoid has no output gain; {conv} has gain={conv.gain}")
    return {
        "flip_sin_to_cos": conv.first == "cos",
        "downscale_freq_shift": conv.freq_shift,
        "scale": conv.scale,
        "max_period": conv.max_period,
    }


def layout_permutation(source: str | Convention, target: str | Convention, dim: int) -> np.ndarray:
    """Column permutation ``perm`` [dim] with ``emb_target == emb_source[..., perm]``.

    Exists when both conventions share the frequencies (freq_shift, max_period, scale). To keep
    a trained model's output when its embedding switches from ``source`` to ``target``, permute the
    first Linear layer's input columns: ``W_new = W[:, perm]`` gives ``W_new @ emb_target == W @ emb_source``.
    """
    src, dst = resolve_convention(source), resolve_convention(target)
    check_int(dim, "dim")
    if not src.same_frequencies(dst):
        names = [n for n in _GRID_FIELDS if getattr(src, n) != getattr(dst, n)]
        diffs = "; ".join(f"{n}: {getattr(src, n)} vs {getattr(dst, n)}" for n in names)
        raise ValueError(
            f"no column permutation maps these conventions onto each other: their frequencies differ ({diffs}), "
            "so the values themselves differ"
        )
    perm = np.arange(dim)  # an odd dim's zero column stays last
    for k in range(dim // 2):
        for function in FIRSTS:
            perm[dst.column_of(function, k, dim)] = src.column_of(function, k, dim)
    return perm
