"""The CogView families and their kin (the time embedding summed with sinusoids of sizes and crop
coordinates): CogView 4, CogView 3 Plus, GLM-Image; and CogVideoX (and ConsisID on it)."""

from __future__ import annotations

from .schema import Family, Layout, MLPKeys, diffusers_contract, every

__all__ = ["FAMILIES"]

_STEPS = "integer step t in 0..999 (CogVideoXDDIMScheduler / CogVideoXDPMScheduler)"
_SIZES = "original size, target size, crop coordinates: each through a sinusoid (condition_proj), projected, added"
_KEYS = (
    MLPKeys("timestep", "time_condition_embed.timestep_embedder."),
    MLPKeys("size", "time_condition_embed.condition_embedder.", fed="sizes and crop coordinates through a sinusoid"),
)


def _adm_flags(config) -> bool:
    """flip_sin_to_cos and freq_shift of the config: ADM's [cos | sin], shift 0 (the released models')."""
    return bool(config.get("flip_sin_to_cos", True)) and config.get("freq_shift", 0) == 0


# fmt: off
# (a table: each call keeps its facts a line apiece)
COGVIEW4 = Family(
    diffusers_contract(
        "cogview4", "CogView 4", "transformer_cogview4", "cogview4/pipeline_cogview4", sinusoid_dim=None,
        raw="integer-valued float timesteps: linspace(1000, 1, steps) cast to int64 and back, not shifted (the shifted "
            "sigmas drive the scheduler's steps only)", raw_range=(1.0, 1000.0), pipeline="t.expand(batch)",
        mlp="inner dim -> time_embed_dim -> time_embed_dim, SiLU (CogView3CombinedTimestepSizeEmbeddings; the "
            "sinusoid is inner dim wide)",
        injection="adaLN-Zero", extra=(_SIZES,), diffusers="CogView4Transformer2DModel"),
    layouts=(Layout("cogview4", _KEYS),),
    classes=every("CogView4Transformer2DModel"))

# CogView 3 Plus keeps CogView 4's keys (integer steps where CogView 4 gets sigma * 1000): by family only
COGVIEW3PLUS = Family(
    diffusers_contract(
        "cogview3plus", "CogView 3 Plus", "transformer_cogview3plus", "cogview3/pipeline_cogview3plus", raw=_STEPS,
        raw_range=(0, 999), sinusoid_dim=None,
        mlp="inner dim -> time_embed_dim -> time_embed_dim, SiLU (CogView3CombinedTimestepSizeEmbeddings)",
        injection="adaLN-Zero (CogView3PlusAdaLayerNormZeroTextImage)", extra=(_SIZES,),
        diffusers="CogView3PlusTransformer2DModel"),
    layouts=(Layout("cogview3plus", _KEYS, auto=False, classes=("CogView3PlusTransformer2DModel",)),),
    classes=every("CogView3PlusTransformer2DModel"))

GLM_IMAGE = Family(
    diffusers_contract(
        "glm_image", "GLM-Image", "transformer_glm_image", "glm_image/pipeline_glm_image",
        raw="integer-valued float timesteps: linspace(1000, 1, steps) cast to int64 and back", raw_range=(1.0, 1000.0),
        pipeline="t.expand(batch) - 1: 999..0", sinusoid_dim=None,
        mlp="time_embed_dim -> time_embed_dim -> time_embed_dim, SiLU (GlmImageCombinedTimestepSizeEmbeddings)",
        injection="adaLN-Zero",
        extra=("target size and crop coordinates: each through a sinusoid (condition_proj), projected, added",),
        diffusers="GlmImageTransformer2DModel", to_model=lambda t: t - 1),
    layouts=(Layout("glm_image", _KEYS, markers=("glyph_projector.",), parent="cogview4"),),
    classes=every("GlmImageTransformer2DModel"))

COGVIDEOX = Family(
    diffusers_contract(
        "cogvideox", "CogVideoX (3-D DiT, v-prediction)", "cogvideox_transformer_3d", "cogvideo/pipeline_cogvideox",
        raw=_STEPS, raw_range=(0, 999), sinusoid_dim=None,
        mlp="inner dim -> time_embed_dim -> time_embed_dim, SiLU (time_proj width = heads x head dim)",
        injection="adaLN (CogVideoXLayerNormZero per block)", diffusers="CogVideoXTransformer3DModel",
        notes="flip_sin_to_cos and freq_shift come from the config (True and 0 in the released models)"),
    classes=every("CogVideoXTransformer3DModel", "ConsisIDTransformer3DModel", when=_adm_flags))
# fmt: on

FAMILIES = (COGVIEW4, COGVIEW3PLUS, GLM_IMAGE, COGVIDEOX)
