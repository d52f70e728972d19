"""The timestep contracts of the image transformers diffusers ports beyond DiT, PixArt, SD3 and Flux:
Qwen-Image, Lumina 2, SANA, CogView 4, AuraFlow. Each is read from the diffusers model and pipeline
files it cites (what the pipeline passes as ``timestep``, what the model does with it)."""

from __future__ import annotations

from ..conventions import convention_from_diffusers, get_convention
from .timestep_contract import TimestepContract, diffusers_sources, in_model_dtype, over_1000

__all__ = ["IMAGE_CONTRACTS"]

ADM = get_convention("adm")
ADM_1000 = convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000)
FLOW = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler)"


IMAGE_CONTRACTS = [
    TimestepContract(
        name="qwen_image",
        family="Qwen-Image (MMDiT, rectified flow)",
        sources=diffusers_sources("transformer_qwenimage", "qwenimage/pipeline_qwenimage"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="timestep / 1000: sigma",
        inside="timestep.to(model dtype); Timesteps(256, scale=1000) multiplies the phase by 1000",
        formed_in="the model's dtype (bfloat16 rounds sigma before the * 1000 inside the sinusoid)",
        convention=ADM_1000,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (QwenTimestepProjEmbeddings)",
        injection="adaLN (the image and text streams' modulation per block)",
        diffusers="QwenImageTransformer2DModel",
        to_model=over_1000,
        to_sinusoid=in_model_dtype,
    ),
    TimestepContract(
        name="lumina2",
        family="Lumina-Image 2.0 (Lumina2Transformer2DModel)",
        sources=diffusers_sources("transformer_lumina2", "lumina2/pipeline_lumina2"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="1 - t / 1000: the flow time in [0, 1], counting from noise",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> min(hidden, 1024) -> same, SiLU (Lumina2CombinedTimestepCaptionEmbedding)",
        injection="adaLN (LuminaRMSNormZero per block)",
        diffusers="Lumina2Transformer2DModel",
        notes="the sinusoid is fed t in [0, 1] as it is (scale 1): its high frequencies barely turn",
        to_model=lambda t: 1 - t.float() / 1000,
    ),
    TimestepContract(
        name="sana",
        family="SANA (linear DiT, flow matching)",
        sources=diffusers_sources("sana_transformer", "sana/pipeline_sana"),
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete / DPM-Solver++ flow)",
        raw_range=(0.0, 1000.0),
        pipeline="t * timestep_scale (1.0 in the released configs)",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single",
        diffusers="SanaTransformer2DModel",
    ),
    TimestepContract(
        name="cogview4",
        family="CogView 4",
        sources=diffusers_sources("transformer_cogview4", "cogview4/pipeline_cogview4"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="in_channels -> time_embed_dim -> time_embed_dim, SiLU (CogView3CombinedTimestepSizeEmbeddings)",
        injection="adaLN-Zero",
        extra=(
            "original size, target size, crop coordinates: each through a sinusoid (condition_proj), projected, added",
        ),
        diffusers="CogView4Transformer2DModel",
    ),
    TimestepContract(
        name="auraflow",
        family="AuraFlow",
        sources=diffusers_sources("auraflow_transformer_2d", "aura_flow/pipeline_aura_flow"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t / 1000 in the latents' dtype",
        inside="Timesteps(256, scale=1000) multiplies the phase by 1000",
        convention=ADM_1000,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (time_step_proj)",
        injection="adaLN-Zero (AdaLayerNormZero in the MMDiT and DiT blocks)",
        diffusers="AuraFlowTransformer2DModel",
        to_model=over_1000,
    ),
]
