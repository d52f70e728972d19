"""The timestep contracts of the video transformers diffusers ports beyond Wan and HunyuanVideo:
Allegro, CogVideoX, Mochi, LTX-Video, Latte. Each is read from the diffusers model and pipeline
files it cites."""

from __future__ import annotations

from ..conventions import get_convention
from .timestep_contract import TimestepContract, diffusers_sources

__all__ = ["VIDEO_CONTRACTS"]

ADM = get_convention("adm")


VIDEO_CONTRACTS = [
    TimestepContract(
        name="allegro",
        family="Allegro (3-D DiT)",
        sources=diffusers_sources("transformer_allegro", "allegro/pipeline_allegro"),
        raw="integer step t in 0..999 (EulerAncestralDiscreteScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single",
        diffusers="AllegroTransformer3DModel",
    ),
    TimestepContract(
        name="cogvideox",
        family="CogVideoX (3-D DiT, v-prediction)",
        sources=diffusers_sources("cogvideox_transformer_3d", "cogvideo/pipeline_cogvideox"),
        raw="integer step t in 0..999 (CogVideoXDDIMScheduler / CogVideoXDPMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="inner dim -> time_embed_dim -> time_embed_dim, SiLU (time_proj width = heads x head dim)",
        injection="adaLN (CogVideoXLayerNormZero per block)",
        diffusers="CogVideoXTransformer3DModel",
        notes="flip_sin_to_cos and freq_shift come from the config (True and 0 in the released models)",
    ),
    TimestepContract(
        name="mochi",
        family="Mochi 1 (asymmetric DiT, flow matching counted from noise)",
        sources=diffusers_sources("transformer_mochi", "mochi/pipeline_mochi"),
        raw="FlowMatchEulerDiscreteScheduler(invert_sigmas=True) timesteps: (1 - sigma) * 1000, t = 0 is noise",
        raw_range=(0.0, 1000.0),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the attention-pooled caption (MochiCombinedTimestepCaptionEmbedding)",
        injection="adaLN (MochiRMSNormZero per block)",
        diffusers="MochiTransformer3DModel",
        notes="the model counts time the other way round: pass 1000 - sigma * 1000 (the pipeline's invert_sigmas)",
    ),
    TimestepContract(
        name="ltx_video",
        family="LTX-Video",
        sources=diffusers_sources("transformer_ltx", "ltx/pipeline_ltx"),
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler)",
        raw_range=(0.0, 1000.0),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single",
        diffusers="LTXVideoTransformer3DModel",
    ),
    TimestepContract(
        name="latte",
        family="Latte (latent video DiT)",
        sources=diffusers_sources("latte_transformer_3d", "latte/pipeline_latte"),
        raw="integer step t in 0..999 (DDIMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single in the spatial and the temporal blocks",
        diffusers="LatteTransformer3DModel",
    ),
    TimestepContract(
        name="skyreels_v2",
        family="SkyReels-V2 (Wan's architecture, diffusion forcing)",
        sources=diffusers_sources("transformer_skyreels_v2", "skyreels_v2/pipeline_skyreels_v2"),
        raw="the scheduler's timesteps: sigma * 1000 (UniPC / FlowMatch with shift); per frame under diffusion forcing",
        raw_range=(0.0, 1000.0),
        pipeline="t; [B, frames] per frame (SkyReelsV2DiffusionForcingPipeline)",
        inside="SkyReelsV2Timesteps: get_1d_sincos_pos_embed_from_grid, the sinusoid in float64",
        formed_in="float64, cast to the MLP's dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> dim -> dim, SiLU; then SiLU + Linear to 6 x dim (time_proj)",
        injection="adaLN: the 6 x dim modulation plus a learned table per block",
        diffusers="SkyReelsV2Transformer3DModel",
        notes="the keys are Wan's, the sinusoid is formed in float64 where Wan's diffusers port uses float32",
    ),
]
