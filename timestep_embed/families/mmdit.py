"""MMDiT-style families (image and text streams side by side): Stable Diffusion 3, AuraFlow, Qwen-Image,
NucleusMoE-Image, HiDream-I1, ERNIE-Image, BRIA 3.2 and BRIA-FIBO."""

from __future__ import annotations

from ..conventions import convention_from_diffusers
from .schema import (
    FLOW_SHIFTED,
    SEQUENTIAL,
    Family,
    Layout,
    MLPKeys,
    TimestepContract,
    diffusers_contract,
    every,
    in_model_dtype,
    over_1000,
    text_mlp,
)

__all__ = ["FAMILIES"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"
ADM_1000 = convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000)
_QWEN_KEYS = (MLPKeys("timestep", "time_text_embed.timestep_embedder."),)
_BRIA_KEYS = (MLPKeys("timestep", "time_embed.timestep_embedder."),)
_SIN_FIRST = convention_from_diffusers(flip_sin_to_cos=False, downscale_freq_shift=0)  # ERNIE-Image's Timesteps


def _theta(config) -> bool:
    return config.get("time_theta", 10000) == 10000  # BriaTimesteps' max_period: the released configs'


# fmt: off
# (a table: each call keeps its facts a line apiece)
SD3 = Family(
    TimestepContract(
        "sd3", "Stable Diffusion 3 / 3.5 (MMDiT, rectified flow)",
        ("huggingface/diffusers: models/transformers/transformer_sd3.py",
         "huggingface/diffusers: schedulers/scheduling_flow_match_euler_discrete.py"),
        "the scheduler's timesteps: sigma * 1000, sigma in [0, 1] (FlowMatchEulerDiscrete, shift 3.0)", (0.0, 1000.0),
        "the scheduler's timesteps, as they are", formed_in="float32 (the scheduler's timesteps)", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN-Zero in every joint block",
        extra=("pooled text embeddings: PixArtAlphaTextProjection added to the time embedding",),
        diffusers="SD3Transformer2DModel"),
    layouts=(
        Layout("sd3_original",
               (MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL), text_mlp("y_embedder.mlp.", SEQUENTIAL)),
               "Stability-AI/sd3.5: mmditx.py (the keys diffusers' convert_sd3_transformer_checkpoint_to_diffusers "
               "reads)",
               markers=("joint_blocks.",)),
        Layout("sd3", (MLPKeys("timestep", "time_text_embed.timestep_embedder."),
                       text_mlp("time_text_embed.text_embedder.")),
               markers=("pos_embed.proj.weight", "time_text_embed.text_embedder."),
               absent=("time_text_embed.guidance_embedder.",)),
    ),
    classes=every("SD3Transformer2DModel", "SD3ControlNetModel"))

AURAFLOW = Family(
    diffusers_contract(
        "auraflow", "AuraFlow", "auraflow_transformer_2d", "aura_flow/pipeline_aura_flow",
        pipeline="t / 1000 in the latents' dtype", inside="Timesteps(256, scale=1000) multiplies the phase by 1000",
        convention=ADM_1000, mlp="256 -> hidden -> hidden, SiLU (time_step_proj)",
        injection="adaLN-Zero (AdaLayerNormZero in the MMDiT and DiT blocks)", diffusers="AuraFlowTransformer2DModel",
        formed_in="the latents' dtype, then float32 (bfloat16: sigma 0.999 reaches the sinusoid as 1.0)",
        to_model=over_1000, pipeline_cast="after"),
    layouts=(Layout("auraflow", (MLPKeys("timestep", "time_step_proj."),),
                    _DIFFUSERS + "auraflow_transformer_2d.py (Timesteps(256, scale=1000) fed t / 1000)",
                    markers=("register_tokens",), scale=1000.0),),
    classes=every("AuraFlowTransformer2DModel"))

QWEN_IMAGE = Family(
    diffusers_contract(
        "qwen_image", "Qwen-Image (MMDiT, rectified flow)", "transformer_qwenimage", "qwenimage/pipeline_qwenimage",
        pipeline="t.expand(batch).to(latents dtype) / 1000: sigma",
        inside="timestep.to(model dtype); Timesteps(256, scale=1000) multiplies the phase by 1000",
        formed_in="the model's dtype (bfloat16 rounds sigma before the * 1000 inside the sinusoid)",
        convention=ADM_1000,
        mlp="256 -> hidden -> hidden, SiLU (QwenTimestepProjEmbeddings)",
        injection="adaLN (the image and text streams' modulation per block)", diffusers="QwenImageTransformer2DModel",
        to_model=over_1000, to_sinusoid=in_model_dtype, pipeline_cast="before"),
    layouts=(Layout("qwen_image", _QWEN_KEYS,
                    _DIFFUSERS + "transformer_qwenimage.py (timestep.to(dtype), then Timesteps(256, scale=1000))",
                    markers=("img_in.weight", "txt_norm.weight"), scale=1000.0, in_model_dtype=True,
                    scale_first=False),),
    classes=every("QwenImageTransformer2DModel", "QwenImageControlNetModel"))

NUCLEUS_MOE = Family(
    diffusers_contract(
        "nucleus_moe", "NucleusMoE-Image", "transformer_nucleusmoe_image", "nucleusmoe_image/pipeline_nucleusmoe_image",
        pipeline="t.expand(batch).to(latents dtype) / num_train_timesteps: sigma",
        inside="timestep.to(model dtype); Timesteps(scale=1000) multiplies the phase by 1000",
        formed_in="the model's dtype", convention=ADM_1000, sinusoid_dim=None,
        mlp="hidden -> 4 x hidden -> hidden, SiLU, then an RMSNorm (NucleusMoETimestepProjEmbeddings; the sinusoid is "
            "hidden wide)", injection="adaLN per block",
        diffusers="NucleusMoEImageTransformer2DModel", to_model=over_1000, to_sinusoid=in_model_dtype,
        pipeline_cast="before"),
    layouts=(Layout("nucleus_moe", _QWEN_KEYS,
                    _DIFFUSERS + "transformer_nucleusmoe_image.py (timestep.to(dtype), then Timesteps(scale=1000))",
                    markers=("img_in.weight", "txt_norm.weight", "time_text_embed.norm."), scale=1000.0,
                    in_model_dtype=True, scale_first=False, parent="qwen_image"),),
    classes=every("NucleusMoEImageTransformer2DModel"))

HIDREAM = Family(
    diffusers_contract(
        "hidream", "HiDream-I1", "transformer_hidream_image", "hidream_image/pipeline_hidream_image",
        raw=FLOW_SHIFTED, pipeline="t (passed as `timesteps`)",
        mlp="256 -> hidden -> hidden, SiLU (HiDreamImageTimestepEmbed); the sinusoid is cast to the model's dtype",
        injection="adaLN in the double and single stream blocks",
        extra=("pooled text: its own TimestepEmbedding (p_embedder.pooled_embedder) on the pooled embeddings, added",),
        diffusers="HiDreamImageTransformer2DModel"),
    layouts=(Layout("hidream", (MLPKeys("timestep", "t_embedder.timestep_embedder."),
                                text_mlp("p_embedder.pooled_embedder.")),
                                _DIFFUSERS + "transformer_hidream_image.py"),),
    classes=every("HiDreamImageTransformer2DModel"))

ERNIE_IMAGE = Family(
    diffusers_contract(
        "ernie_image", "ERNIE-Image", "transformer_ernie_image", "ernie_image/pipeline_ernie_image",
        pipeline="torch.full((batch,), t.item(), dtype=transformer dtype)", formed_in="the transformer's dtype",
        convention=_SIN_FIRST, sinusoid_dim=None,
        mlp="hidden -> hidden -> hidden, SiLU (time_embedding)",
        injection="adaLN: one shared modulation (adaLN_modulation) for all blocks",
        notes="[sin | cos] (flip_sin_to_cos=False), where most diffusers transformers use [cos | sin]",
        diffusers="ErnieImageTransformer2DModel", pipeline_cast="before"),
    layouts=(Layout("ernie_image", (MLPKeys("timestep", "time_embedding."),),
                    _DIFFUSERS + "transformer_ernie_image.py (Timesteps(flip_sin_to_cos=False): [sin | cos])",
                    markers=("adaLN_modulation.1.", "final_linear."),
                    convention=_SIN_FIRST,
                    parent="diffusers"),),
    classes=every("ErnieImageTransformer2DModel"))

BRIA = Family(
    diffusers_contract(
        "bria", "BRIA 3.2 (Flux-like MMDiT without guidance or pooled text)", "transformer_bria", "bria/pipeline_bria",
        inside="timestep.to(model dtype); BriaTimesteps: diffusers' sinusoid with max_period = time_theta",
        formed_in="the model's dtype", mlp="256 -> hidden -> hidden, SiLU (BriaTimestepProjEmbeddings)",
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle, Flux's blocks)",
        diffusers="BriaTransformer2DModel",
        notes="the keys are LongCat-Image's, whose pipeline passes sigma instead: the class (config.json) tells them "
        "apart; time_theta (10000 in the released config) lives in config.json", to_sinusoid=in_model_dtype),
    layouts=(Layout("bria", _BRIA_KEYS,
                    _DIFFUSERS + "transformer_bria.py (timestep.to(dtype); BriaTimesteps, max_period = time_theta)",
                    markers=("single_transformer_blocks.",), in_model_dtype=True, twins=("longcat_image",),
                    classes=("BriaTransformer2DModel",)),),
    classes=every("BriaTransformer2DModel", when=_theta))

BRIA_FIBO = Family(
    diffusers_contract(
        "bria_fibo", "BRIA-FIBO", "transformer_bria_fibo", "bria_fibo/pipeline_bria_fibo",
        pipeline="t.expand(batch).to(latents dtype)",
        inside="timestep.to(model dtype); BriaFiboTimesteps: max_period = time_theta",
        formed_in="the model's dtype", mlp="256 -> hidden -> hidden, SiLU (BriaFiboTimestepProjEmbeddings)",
        injection="adaLN (Flux's blocks)", diffusers="BriaFiboTransformer2DModel", to_sinusoid=in_model_dtype,
        pipeline_cast="before"),
    layouts=(Layout("bria_fibo", _BRIA_KEYS,
                    _DIFFUSERS + "transformer_bria_fibo.py (timestep.to(dtype); BriaFiboTimesteps)",
                    markers=("single_transformer_blocks.", "caption_projection.0.linear."), in_model_dtype=True,
                    parent="bria"),),
    classes=every("BriaFiboTransformer2DModel", when=_theta))
# fmt: on

FAMILIES = (SD3, AURAFLOW, QWEN_IMAGE, NUCLEUS_MOE, HIDREAM, ERNIE_IMAGE, BRIA, BRIA_FIBO)
