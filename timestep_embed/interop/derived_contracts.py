"""The timestep contracts of the diffusers transformers built after 2024 whose time path is a plain
``Timesteps`` + ``TimestepEmbedding`` (many on Wan's, HunyuanVideo's or SANA's): Helios, JoyImage,
AnyFlow, HunyuanVideo 1.5, LTX-2, SANA-Video, Lumina-Next, Motif-Video, NucleusMoE-Image, ERNIE-Image,
GLM-Image, Cosmos 3 Omni, EasyAnimate, MiniMax-H3. Each is read from the diffusers model and pipeline
files it cites; ChronoEdit and Wan-Animate use :data:`wan21`'s, ConsisID CogVideoX's and
HunyuanVideo-Framepack HunyuanVideo's (the same pipeline arithmetic)."""

from __future__ import annotations

from ..conventions import convention_from_diffusers, get_convention
from .contract import TimestepContract, diffusers_sources, in_model_dtype, over_1000

__all__ = ["DERIVED_CONTRACTS"]

ADM = get_convention("adm")
FLOW = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler)"
ADAPTIVE = "adaLN: SiLU + Linear to 6 x dim (time_proj) plus a learned table per block"


def _contract(name: str, family: str, model: str, pipeline_file: str, **fields) -> TimestepContract:
    defaults = dict(
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> dim -> dim, SiLU",
        injection=ADAPTIVE,
        diffusers=None,
    )
    return TimestepContract(
        name=name, family=family, sources=diffusers_sources(model, pipeline_file), **{**defaults, **fields}
    )


DERIVED_CONTRACTS = [
    _contract(
        "helios",
        "Helios (long video on Wan 2.1's architecture)",
        "transformer_helios",
        "helios/pipeline_helios",
        raw="the HeliosScheduler's timesteps (sigma * 1000); the pyramid pipeline casts them to int64",
        extra=("history frames: a zero timestep through the same sinusoid and MLP (zero_history_timestep)",),
        diffusers="HeliosTransformer3DModel",
    ),
    _contract(
        "joyimage",
        "JoyImage-Edit / JoyImage-Edit-Plus",
        "transformer_joyimage",
        "joyimage/pipeline_joyimage_edit",
        pipeline="t.repeat(batch)",
        diffusers="JoyImageEditTransformer3DModel, JoyImageEditPlusTransformer3DModel",
    ),
    _contract(
        "anyflow",
        "AnyFlow / AnyFlow-FAR (flow maps on Wan's architecture)",
        "transformer_anyflow",
        "anyflow/pipeline_anyflow",
        raw="FlowMapEulerDiscreteScheduler timesteps: sigma * 1000, and r = the next sigma * 1000",
        pipeline="t per token: t.expand(batch).unsqueeze(-1).repeat(1, frames)",
        extra=(
            "r_timestep: r (or t - r, deltatime_type) through the same sinusoid and its own MLP (delta_embedder), "
            "mixed with the time embedding by a fixed gate",
        ),
        diffusers="AnyFlowTransformer3DModel, AnyFlowFARTransformer3DModel",
    ),
    _contract(
        "hunyuan_video15",
        "HunyuanVideo 1.5",
        "transformer_hunyuan_video15",
        "hunyuan_video1_5/pipeline_hunyuan_video1_5",
        pipeline="t.expand(batch).to(latents dtype)",
        formed_in="the latents' dtype",
        mlp="256 -> hidden -> hidden, SiLU (HunyuanVideo15TimeEmbedding)",
        injection="adaLN (AdaLayerNormZero in the double and single blocks)",
        extra=("the text refiner: the same timestep through its own sinusoid and MLP",),
        diffusers="HunyuanVideo15Transformer3DModel",
        pipeline_cast="before",
    ),
    _contract(
        "ltx2",
        "LTX-2 (audio-video)",
        "transformer_ltx2",
        "ltx2/pipeline_ltx2",
        pipeline="t per token: t.expand(batch).unsqueeze(-1) * (1 - conditioning_mask); audio_timestep = t",
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear (AdaLayerNormSingle)",
        injection="adaLN-single for video, audio and the audio-video cross attention",
        extra=("audio, and the cross-attention scale/shift and gates: the same sinusoid, own MLPs",),
        diffusers="LTX2VideoTransformer3DModel",
    ),
    _contract(
        "sana_video",
        "SANA-Video",
        "transformer_sana_video",
        "sana_video/pipeline_sana_video",
        raw="the scheduler's timesteps (DPMSolverMultistepScheduler with flow sigmas)",
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single",
        diffusers="SanaVideoTransformer3DModel",
    ),
    _contract(
        "lumina_next",
        "Lumina-Next (LuminaNextDiT2DModel)",
        "lumina_nextdit2d",
        "lumina/pipeline_lumina",
        pipeline="1 - t / 1000: the flow time in [0, 1], counting from noise",
        raw_range=(0.0, 1000.0),
        mlp="256 -> min(hidden, 1024) -> same, SiLU (LuminaCombinedTimestepCaptionEmbedding)",
        injection="adaLN (LuminaRMSNormZero per block)",
        notes="the sinusoid is fed t in [0, 1] as it is (scale 1): its high frequencies barely turn",
        diffusers="LuminaNextDiT2DModel",
        to_model=lambda t: 1 - over_1000(t),
    ),
    _contract(
        "motif_video",
        "Motif-Video",
        "transformer_motif_video",
        "motif_video/pipeline_motif_video",
        raw="the scheduler's timesteps (DPMSolverMultistepScheduler)",
        mlp="256 -> hidden -> hidden, SiLU (MotifVideoConditionEmbedding)",
        injection="adaLN (AdaLayerNormZero per block)",
        diffusers="MotifVideoTransformer3DModel",
    ),
    _contract(
        "nucleus_moe",
        "NucleusMoE-Image",
        "transformer_nucleusmoe_image",
        "nucleusmoe_image/pipeline_nucleusmoe_image",
        pipeline="t.expand(batch).to(latents dtype) / num_train_timesteps: sigma",
        inside="timestep.to(model dtype); Timesteps(scale=1000) multiplies the phase by 1000",
        formed_in="the model's dtype",
        convention=convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000),
        sinusoid_dim=None,
        mlp="time_embed_dim -> hidden -> hidden, SiLU (NucleusMoETimestepProjEmbeddings)",
        injection="adaLN per block",
        diffusers="NucleusMoEImageTransformer2DModel",
        to_model=over_1000,
        to_sinusoid=in_model_dtype,
        pipeline_cast="before",
    ),
    _contract(
        "ernie_image",
        "ERNIE-Image",
        "transformer_ernie_image",
        "ernie_image/pipeline_ernie_image",
        pipeline="torch.full((batch,), t.item(), dtype=transformer dtype)",
        formed_in="the transformer's dtype",
        convention=convention_from_diffusers(flip_sin_to_cos=False, downscale_freq_shift=0),
        sinusoid_dim=None,
        mlp="hidden -> hidden -> hidden, SiLU (time_embedding)",
        injection="adaLN: one shared modulation (adaLN_modulation) for all blocks",
        notes="[sin | cos] (flip_sin_to_cos=False), where most diffusers transformers use [cos | sin]",
        diffusers="ErnieImageTransformer2DModel",
        pipeline_cast="before",
    ),
    _contract(
        "glm_image",
        "GLM-Image",
        "transformer_glm_image",
        "glm_image/pipeline_glm_image",
        raw="integer-valued float timesteps: linspace(1000, 1, steps) cast to int64 and back",
        raw_range=(1.0, 1000.0),
        pipeline="t.expand(batch) - 1: 999..0",
        sinusoid_dim=None,
        mlp="time_embed_dim -> hidden -> hidden, SiLU (GlmImageCombinedTimestepSizeEmbeddings)",
        injection="adaLN-Zero",
        extra=("target size and crop coordinates: each through a sinusoid (condition_proj), projected, added",),
        diffusers="GlmImageTransformer2DModel",
        to_model=lambda t: t - 1,
    ),
    _contract(
        "cosmos3",
        "Cosmos 3 Omni (vision, sound and action tokens)",
        "transformer_cosmos3",
        "cosmos/pipeline_cosmos3_omni",
        raw="UniPCMultistepScheduler timesteps (flow sigmas * 1000)",
        pipeline="torch.full((tokens,), t.item()): one timestep per noisy token",
        inside="timesteps * timestep_scale (0.001): sigma in [0, 1]",
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (time_embedder), shared by the three modalities",
        injection="adaLN per token",
        notes="the sinusoid is fed sigma in [0, 1] (scale 1): its high frequencies barely turn",
        diffusers="Cosmos3OmniTransformer",
        to_sinusoid=lambda t, dtype: t * 0.001,
    ),
    _contract(
        "easyanimate",
        "EasyAnimate",
        "transformer_easyanimate",
        "easyanimate/pipeline_easyanimate",
        raw="the scheduler's timesteps (FlowMatchEulerDiscreteScheduler or DDIMScheduler)",
        pipeline="torch.tensor([t] * batch).to(latents dtype)",
        formed_in="the latents' dtype",
        sinusoid_dim=None,
        mlp="time_embed_dim -> hidden -> hidden, SiLU (time_embedding)",
        injection="adaLN (EasyAnimateLayerNormZero per block)",
        diffusers="EasyAnimateTransformer3DModel",
        pipeline_cast="before",
    ),
    TimestepContract(
        name="minimax_h3",
        family="MiniMax-H3 (audio-video; no diffusers pipeline)",
        sources=("huggingface/diffusers: models/transformers/transformer_minimax_h3.py",),
        raw="the distinct timesteps of the packed sequence, in [0, 1] and unscaled",
        raw_range=(0.0, 1.0),
        pipeline="t (with timestep_indices naming each row's timestep)",
        convention=ADM,
        sinusoid_dim=None,
        mlp="freq_dim -> hidden -> hidden, SiLU (time_embedder)",
        injection="adaLN per modality and timestep (adaln_indices)",
        notes="the sinusoid is fed t in [0, 1] as it is (scale 1)",
        diffusers="MiniMaxH3Transformer3DModel",
    ),
]
