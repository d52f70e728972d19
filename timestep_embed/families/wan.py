"""Wan and the families on its architecture (Wan's keys, a 6 x dim modulation plus a learned table per
block): Wan 2.1 / 2.2 (and VACE, ChronoEdit, Wan-Animate on it), SkyReels-V2, AnyFlow, Helios, JoyImage."""

from __future__ import annotations

from .schema import SEQUENTIAL, Family, Layout, MLPKeys, TimestepContract, diffusers_contract, every, text_mlp

__all__ = ["FAMILIES"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"
_WAN_TEXT = text_mlp("condition_embedder.text_embedder.")
_WAN_KEYS = (MLPKeys("timestep", "condition_embedder.time_embedder."), _WAN_TEXT)
_ADAPTIVE = dict(mlp="256 -> dim -> dim, SiLU",
                 injection="adaLN: SiLU + Linear to 6 x dim (time_proj) plus a learned table per block")  # fmt: skip
_TABLE = "adaLN: the 6 x dim modulation plus a learned table per block"

# fmt: off
# (a table: each call keeps its facts a line apiece)
WAN21 = Family(
    TimestepContract(
        "wan21", "Wan 2.1 / 2.2 video DiT",
        ("Wan-Video/Wan2.1: wan/modules/model.py", "huggingface/diffusers: models/transformers/transformer_wan.py"),
        "the scheduler's timesteps: sigma * 1000 (UniPC / FlowMatch with shift)", (0.0, 1000.0),
        "the scheduler's timesteps; Wan 2.2 TI2V also per token: [B, tokens]", sinusoid_dim=256,
        mlp="256 -> dim -> dim, SiLU; then SiLU + Linear to 6 x dim (time_proj)", injection=_TABLE,
        diffusers="WanTransformer3DModel",
        notes="the original builds the sinusoid in float64 (sinusoidal_embedding_1d); diffusers in float32"),
    layouts=(
        Layout("wan21", _WAN_KEYS, _DIFFUSERS + "transformer_wan.py", markers=("condition_embedder.time_proj.",)),
        Layout("wan21_original", (MLPKeys("timestep", "time_embedding.", SEQUENTIAL), text_mlp("text_embedding.",
                                                                                               SEQUENTIAL)),
               "Wan-Video/Wan2.1: wan/modules/model.py (sinusoidal_embedding_1d in float64)",
               markers=("time_projection.1.", "head.modulation"), precise=True),
    ),
    classes=every("WanTransformer3DModel", "WanVACETransformer3DModel", "ChronoEditTransformer3DModel",
                  "WanAnimateTransformer3DModel"))

# SkyReels-V2's keys are Wan's; its SkyReelsV2Timesteps forms the sinusoid in float64 (picked by class only). Its
# frequencies are 1 / 10000 ** (k / h), the precise path's exp(-ln(10000) k / h): the float64 values differ in last
# bits, so a float32 output can round the other way (2 of 10^6 entries over t = 0..1000), a float64 one differs by ulps
SKYREELS_V2 = Family(
    diffusers_contract(
        "skyreels_v2", "SkyReels-V2 (Wan's architecture, diffusion forcing)", "transformer_skyreels_v2",
        "skyreels_v2/pipeline_skyreels_v2",
        raw="the scheduler's timesteps: sigma * 1000 (UniPC / FlowMatch with shift); per frame under diffusion forcing",
        pipeline="t; [B, frames] per frame (SkyReelsV2DiffusionForcingPipeline)",
        inside="SkyReelsV2Timesteps: get_1d_sincos_pos_embed_from_grid, the sinusoid in float64",
        formed_in="float64, cast to the MLP's dtype",
        mlp="256 -> dim -> dim, SiLU; then SiLU + Linear to 6 x dim (time_proj)",
        injection=_TABLE, diffusers="SkyReelsV2Transformer3DModel",
        notes="the keys are Wan's, the sinusoid is formed in float64 where Wan's diffusers port uses float32"),
    layouts=(Layout("skyreels_v2", _WAN_KEYS,
                    _DIFFUSERS + "transformer_skyreels_v2.py (get_1d_sincos_pos_embed_from_grid in float64)",
                    precise=True, auto=False, classes=("SkyReelsV2Transformer3DModel",)),),
    classes=every("SkyReelsV2Transformer3DModel", when=lambda config: bool(config.get("flip_sin_to_cos", True))))

ANYFLOW = Family(
    diffusers_contract(
        "anyflow", "AnyFlow / AnyFlow-FAR (flow maps on Wan's architecture)", "transformer_anyflow",
        "anyflow/pipeline_anyflow", **_ADAPTIVE,
        raw="FlowMapEulerDiscreteScheduler timesteps: sigma * 1000, and r = the next sigma * 1000",
        pipeline="t per token: t.expand(batch).unsqueeze(-1).repeat(1, frames)",
        extra=("r_timestep: r (or t - r, deltatime_type) through the same sinusoid and its own MLP (delta_embedder), "
               "mixed with the time embedding by a fixed gate",),
        diffusers="AnyFlowTransformer3DModel, AnyFlowFARTransformer3DModel"),
    layouts=(Layout("anyflow", (MLPKeys("timestep", "condition_embedder.time_embedder."),
                                MLPKeys("delta", "condition_embedder.delta_embedder."), _WAN_TEXT),
                    markers=("condition_embedder.time_proj.", "condition_embedder.delta_embedder."), parent="wan21"),),
    classes=every("AnyFlowTransformer3DModel", "AnyFlowFARTransformer3DModel"))

HELIOS = Family(
    diffusers_contract(
        "helios", "Helios (long video on Wan 2.1's architecture)", "transformer_helios", "helios/pipeline_helios",
        **_ADAPTIVE, raw="the HeliosScheduler's timesteps (sigma * 1000); the pyramid pipeline casts them to int64",
        extra=("history frames: a zero timestep through the same sinusoid and MLP (zero_history_timestep)",),
        diffusers="HeliosTransformer3DModel"),
    layouts=(Layout("helios", _WAN_KEYS, markers=("condition_embedder.time_proj.", "patch_long."), parent="wan21"),),
    classes=every("HeliosTransformer3DModel"))

JOYIMAGE = Family(
    diffusers_contract(
        "joyimage", "JoyImage-Edit / JoyImage-Edit-Plus", "transformer_joyimage", "joyimage/pipeline_joyimage_edit",
        **_ADAPTIVE, pipeline="t.repeat(batch)",
        diffusers="JoyImageEditTransformer3DModel, JoyImageEditPlusTransformer3DModel"),
    layouts=(Layout("joyimage", _WAN_KEYS, _DIFFUSERS + "transformer_joyimage.py, transformer_joyimage_edit_plus.py",
                    markers=("condition_embedder.time_proj.", "img_in."), parent="wan21"),),
    classes=every("JoyImageEditTransformer3DModel", "JoyImageEditPlusTransformer3DModel"))
# fmt: on

FAMILIES = (WAN21, SKYREELS_V2, ANYFLOW, HELIOS, JOYIMAGE)
