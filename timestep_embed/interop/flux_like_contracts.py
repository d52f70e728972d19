"""The timestep contracts of the image transformers built on Flux's time path (the pipeline divides
the scheduler's sigma * 1000 by 1000, the model multiplies by 1000 again in its own dtype): FLUX.2,
Chroma, LongCat-Image, Ovis-Image; and of HiDream-I1, CogView 3 Plus and Hunyuan-DiT. Each is read
from the diffusers model and pipeline files it cites."""

from __future__ import annotations

from ..conventions import get_convention
from .timestep_contract import TimestepContract, diffusers_sources, in_dtype_times_1000, over_1000

__all__ = ["FLUX_LIKE_CONTRACTS"]

ADM = get_convention("adm")
FLOW = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler, resolution-dependent shift)"


def _flux_like(name: str, family: str, model: str, pipeline: str, mlp: str, **fields) -> TimestepContract:
    return TimestepContract(
        name=name,
        family=family,
        sources=diffusers_sources(model, pipeline),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t.expand(batch).to(latents dtype) / 1000: sigma again, in the latents' dtype",
        inside="timestep.to(model dtype) * 1000",
        formed_in="the model's dtype (bfloat16: sigma 0.99 reaches the sinusoid as 988)",
        convention=ADM,
        mlp=mlp,
        to_model=over_1000,
        to_sinusoid=in_dtype_times_1000,
        pipeline_cast="before",
        **fields,
    )


FLUX_LIKE_CONTRACTS = [
    _flux_like(
        "flux2",
        "FLUX.2 [dev] / [klein]",
        "transformer_flux2",
        "flux2/pipeline_flux2",
        "256 -> hidden -> hidden, SiLU, no biases in the released config (Flux2TimestepGuidanceEmbeddings)",
        sinusoid_dim=256,
        injection="adaLN: one modulation per stream shared by all blocks (Flux2Modulation)",
        extra=(
            "guidance: the guidance scale in float32 .to(model dtype) * 1000, through the same sinusoid and its "
            "own MLP (guidance_embedder), added; absent in the [klein] configs (guidance_embeds=False)",
        ),
        diffusers="Flux2Transformer2DModel",
    ),
    _flux_like(
        "chroma",
        "Chroma (Flux schnell with the modulation MLPs distilled into one approximator)",
        "transformer_chroma",
        "chroma/pipeline_chroma",
        "no time MLP: [sinusoid(t), sinusoid(0)] (approximator_num_channels / 4 wide each) joined with a fixed table "
        "of modulation indices, then ChromaApproximator (in_proj, residual MLP layers, out_proj) gives every "
        "block's modulation",
        sinusoid_dim=None,
        injection="adaLN: each block reads its own slice of the approximator's output",
        extra=("guidance: always 0 (the guidance sinusoid is fed torch.tensor([0] * batch))",),
        diffusers="ChromaTransformer2DModel",
        notes="no TimestepEmbedding: the embedder's two-layer MLP cannot stand for the approximator",
    ),
    _flux_like(
        "longcat_image",
        "LongCat-Image",
        "transformer_longcat_image",
        "longcat_image/pipeline_longcat_image",
        "256 -> hidden -> hidden, SiLU (LongCatImageTimestepEmbeddings)",
        sinusoid_dim=256,
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle, Flux's blocks)",
        diffusers="LongCatImageTransformer2DModel",
    ),
    _flux_like(
        "ovis_image",
        "Ovis-Image",
        "transformer_ovis_image",
        "ovis_image/pipeline_ovis_image",
        "256 -> hidden -> hidden, SiLU (timestep_embedder)",
        sinusoid_dim=256,
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle, Flux's blocks)",
        diffusers="OvisImageTransformer2DModel",
    ),
    TimestepContract(
        name="hidream",
        family="HiDream-I1",
        sources=diffusers_sources("transformer_hidream_image", "hidream_image/pipeline_hidream_image"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t (passed as `timesteps`)",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (HiDreamImageTimestepEmbed); the sinusoid is cast to the model's dtype",
        injection="adaLN in the double and single stream blocks",
        extra=("pooled text: its own TimestepEmbedding (p_embedder.pooled_embedder) on the pooled embeddings, added",),
        diffusers="HiDreamImageTransformer2DModel",
    ),
    TimestepContract(
        name="cogview3plus",
        family="CogView 3 Plus",
        sources=diffusers_sources("transformer_cogview3plus", "cogview3/pipeline_cogview3plus"),
        raw="integer step t in 0..999 (CogVideoXDDIMScheduler / CogVideoXDPMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="time_embed_dim -> hidden -> hidden, SiLU (CogView3CombinedTimestepSizeEmbeddings)",
        injection="adaLN-Zero (CogView3PlusAdaLayerNormZeroTextImage)",
        extra=(
            "original size, target size, crop coordinates: each through a sinusoid (condition_proj), projected, added",
        ),
        diffusers="CogView3PlusTransformer2DModel",
    ),
    TimestepContract(
        name="hunyuan_dit",
        family="Hunyuan-DiT",
        sources=diffusers_sources("hunyuan_transformer_2d", "hunyuandit/pipeline_hunyuandit"),
        raw="integer step t in 0..999 (DDPMScheduler)",
        raw_range=(0, 999),
        pipeline="torch.tensor([t] * batch).to(latents' dtype): float16 keeps every step, bfloat16 rounds above 256",
        inside="nothing (the sinusoid gets the float step)",
        formed_in="the latents' dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (HunyuanCombinedTimestepTextSizeStyleEmbedding)",
        injection="additive: time, pooled T5 text, image size and style embeddings summed (AdaLayerNormShift)",
        extra=("image meta size (6 numbers) through the same sinusoid (size_proj), and a style embedding",),
        diffusers="HunyuanDiT2DModel",
        to_model=lambda t: t if t.is_floating_point() else t.float(),
        pipeline_cast="before",
    ),
]
