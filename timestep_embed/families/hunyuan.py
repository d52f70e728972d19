"""Tencent's Hunyuan families: Hunyuan-DiT, HunyuanVideo (and Framepack on it), HunyuanVideo 1.5,
HunyuanImage 2.1, in diffusers' names and in the original releases'."""

from __future__ import annotations

from .schema import (
    MLP_EMBEDDER,
    SEQUENTIAL,
    Family,
    Layout,
    MLPKeys,
    TimestepContract,
    diffusers_contract,
    every,
    text_mlp,
)

__all__ = ["FAMILIES"]

_REFINER = MLPKeys("refiner", "context_embedder.time_text_embed.timestep_embedder.")
_DOUBLE = "adaLN (AdaLayerNormZero in the double and single blocks)"
_REFINED = "the text refiner: the same timestep through its own sinusoid and MLP"
_LATENTS = dict(pipeline="t.expand(batch).to(latents dtype)", formed_in="the latents' dtype", pipeline_cast="before")

# fmt: off
# (a table: each call keeps its facts a line apiece)
HUNYUAN_DIT = Family(
    diffusers_contract(
        "hunyuan_dit", "Hunyuan-DiT", "hunyuan_transformer_2d", "hunyuandit/pipeline_hunyuandit",
        raw="integer step t in 0..999 (DDPMScheduler)", raw_range=(0, 999),
        pipeline="torch.tensor([t] * batch).to(latents' dtype): float16 keeps every step, bfloat16 rounds above 256",
        inside="nothing (the sinusoid gets the float step)", formed_in="the latents' dtype",
        mlp="256 -> hidden -> hidden, SiLU (HunyuanCombinedTimestepTextSizeStyleEmbedding)",
        injection="additive: time, pooled T5 text, image size and style embeddings summed (AdaLayerNormShift)",
        extra=("image meta size (6 numbers) through the same sinusoid (size_proj), and a style embedding",),
        diffusers="HunyuanDiT2DModel", to_model=lambda t: t if t.is_floating_point() else t.float(),
        pipeline_cast="before"),
    layouts=(
        Layout("hunyuan_dit", (MLPKeys("timestep", "time_extra_emb.timestep_embedder."),
                               MLPKeys("size", "time_extra_emb.extra_embedder.",
                                       fed="the pooled text, image sizes and style"),
                               text_mlp("text_embedder."))),
        Layout("hunyuan_dit_original",
               (MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),
                MLPKeys("size", "extra_embedder.", SEQUENTIAL, fed="the pooled text, image sizes and style"),
                text_mlp("mlp_t5.", SEQUENTIAL)),
               "Tencent/HunyuanDiT: hydit/modules/models.py (diffusers' scripts/convert_hunyuandit_to_diffusers.py)",
               markers=("mlp_t5.0.weight",)),
    ),
    classes=every("HunyuanDiT2DModel", "HunyuanDiT2DControlNetModel"))

HUNYUAN_VIDEO = Family(
    TimestepContract(
        "hunyuan_video", "HunyuanVideo",
        ("Tencent/HunyuanVideo: hyvideo/modules/embed_layers.py",
         "huggingface/diffusers: models/transformers/transformer_hunyuan_video.py"),
        "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, shift 7)", (0.0, 1000.0),
        "the scheduler's timesteps", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero in double and single blocks)",
        extra=("guidance: the pipeline passes guidance_scale * 1000 formed in the transformer's dtype (bfloat16: 6 "
               "becomes 6016), through the same sinusoid and its own MLP",),
        diffusers="HunyuanVideoTransformer3DModel"),
    layouts=(
        Layout("hunyuan_video", (MLPKeys("timestep", "time_text_embed.timestep_embedder."),
                                 MLPKeys("guidance", "time_text_embed.guidance_embedder."), _REFINER,
                                 text_mlp("time_text_embed.text_embedder.")),
               "huggingface/diffusers: models/transformers/transformer_hunyuan_video.py",
               markers=("context_embedder.token_refiner.",)),
        Layout("hunyuan_video_original",
               (MLPKeys("timestep", "time_in.mlp.", SEQUENTIAL), MLPKeys("guidance", "guidance_in.mlp.", SEQUENTIAL),
                MLPKeys("refiner", "txt_in.t_embedder.mlp.", SEQUENTIAL), text_mlp("vector_in.", MLP_EMBEDDER)),
               "Tencent/HunyuanVideo: hyvideo/modules/models.py (diffusers' convert_hunyuan_video_to_diffusers.py)",
               markers=("txt_in.individual_token_refiner.",)),
    ),
    classes=every("HunyuanVideoTransformer3DModel", "HunyuanVideoFramepackTransformer3DModel"))

HUNYUAN_VIDEO15 = Family(
    diffusers_contract(
        "hunyuan_video15", "HunyuanVideo 1.5", "transformer_hunyuan_video15",
        "hunyuan_video1_5/pipeline_hunyuan_video1_5",
        **_LATENTS, mlp="256 -> hidden -> hidden, SiLU (HunyuanVideo15TimeEmbedding)", injection=_DOUBLE,
        extra=(_REFINED, "meanflow checkpoints (use_meanflow): timestep_r (the image-to-video pipeline's next "
               "timestep) through its own sinusoid and MLP (time_embed.timestep_embedder_r), added to t's"),
        diffusers="HunyuanVideo15Transformer3DModel"),
    layouts=(Layout("hunyuan_video15", (MLPKeys("timestep", "time_embed.timestep_embedder."), _REFINER,
                                        text_mlp("context_embedder.time_text_embed.text_embedder.")),
                    markers=("context_embedder_2.",)),),
    classes=every("HunyuanVideo15Transformer3DModel"))

HUNYUAN_IMAGE = Family(
    diffusers_contract(
        "hunyuan_image", "HunyuanImage 2.1", "transformer_hunyuanimage", "hunyuan_image/pipeline_hunyuanimage",
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler, shift)", **_LATENTS,
        mlp="256 -> hidden -> hidden, SiLU (HunyuanImageCombinedTimeGuidanceEmbedding)", injection=_DOUBLE,
        extra=(_REFINED, "meanflow (use_meanflow): the next timestep r through its own MLP, averaged with t's",
               "distilled guidance (guidance_embeds): through the same sinusoid and its own MLP, added"),
        diffusers="HunyuanImageTransformer2DModel"),
    layouts=(Layout("hunyuan_image", (MLPKeys("timestep", "time_guidance_embed.timestep_embedder."),
                                      MLPKeys("guidance", "time_guidance_embed.guidance_embedder."),
                                      MLPKeys("meanflow", "time_guidance_embed.timestep_embedder_r."), _REFINER),
                    markers=("context_embedder.time_text_embed.",)),),
    classes=every("HunyuanImageTransformer2DModel"))
# fmt: on

FAMILIES = (HUNYUAN_DIT, HUNYUAN_VIDEO, HUNYUAN_VIDEO15, HUNYUAN_IMAGE)
