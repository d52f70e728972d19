"""The timestep contracts of transformer families: DiT, PixArt, SD3, Flux, Wan, HunyuanVideo."""

from __future__ import annotations

import torch

from ..conventions import convention_from_diffusers, get_convention
from .timestep_contract import TimestepContract, in_dtype_times_1000, over_1000

__all__ = ["TRANSFORMER_CONTRACTS"]

ADM = get_convention("adm")


def edm_vp_c_noise(sigma: torch.Tensor, beta_d: float = 19.9, beta_min: float = 0.1, m: int = 1000) -> torch.Tensor:
    """EDM VPPrecond's c_noise = (M - 1) sigma^-1(sigma), the VP time of a noise level (Karras et al. 2022, Table 1)."""
    t = ((beta_min**2 + 2 * beta_d * (1 + sigma**2).log()).sqrt() - beta_min) / beta_d
    return (m - 1) * t


TRANSFORMER_CONTRACTS = [
    TimestepContract(
        name="dit",
        family="DiT (Peebles & Xie 2023), the original code",
        sources=("facebookresearch/DiT: models.py",),
        raw="integer step t in 0..999",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (TimestepEmbedder.mlp)",
        injection="adaLN-Zero: c = t_emb + y_emb, SiLU, Linear to 6 x hidden per block",
        extra=("class labels: LabelEmbedding (with a null class for guidance) added to t_emb",),
        notes="TimestepEmbedder.timestep_embedding divides by half: shift 0, [cos | sin]",
    ),
    TimestepContract(
        name="dit_diffusers",
        family="DiT as diffusers ports it",
        sources=("huggingface/diffusers: models/embeddings.py (CombinedTimestepLabelEmbeddings)",),
        raw="integer step t in 0..999",
        raw_range=(0, 999),
        pipeline="t",
        convention=convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=1),
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU",
        injection="adaLN-Zero (AdaLayerNormZero)",
        extra=("class labels: LabelEmbedding added to the time embedding",),
        diffusers="DiTTransformer2DModel",
        notes="the port uses Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1): half - 1 in the exponent "
        "where the original divides by half; max difference 1.98 over t = 0..999, absorbed by the converted weights "
        "only approximately",
    ),
    TimestepContract(
        name="pixart",
        family="PixArt-alpha / PixArt-sigma",
        sources=(
            "PixArt-alpha/PixArt-alpha: diffusion/model/nets/PixArt_blocks.py",
            "huggingface/diffusers: models/normalization.py (AdaLayerNormSingle)",
        ),
        raw="integer step t in 0..999 (DPM-Solver / IDDPM)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU",
        injection="adaLN-single: one SiLU + Linear to 6 x hidden for all blocks, plus a learned table per block",
        extra=("resolution and aspect ratio (PixArt-alpha 1024): the same sinusoid, own MLPs, added",),
        diffusers="PixArtTransformer2DModel",
    ),
    TimestepContract(
        name="sd3",
        family="Stable Diffusion 3 / 3.5 (MMDiT, rectified flow)",
        sources=(
            "huggingface/diffusers: models/transformers/transformer_sd3.py",
            "huggingface/diffusers: schedulers/scheduling_flow_match_euler_discrete.py",
        ),
        raw="the scheduler's timesteps: sigma * 1000, sigma in [0, 1] (FlowMatchEulerDiscrete, shift 3.0)",
        raw_range=(0.0, 1000.0),
        pipeline="the scheduler's timesteps, as they are",
        formed_in="float32 (the scheduler's timesteps)",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN-Zero in every joint block",
        extra=("pooled text embeddings: PixArtAlphaTextProjection added to the time embedding",),
        diffusers="SD3Transformer2DModel",
    ),
    TimestepContract(
        name="flux_dev",
        family="FLUX.1 [dev] (guidance-distilled)",
        sources=(
            "black-forest-labs/flux: src/flux/model.py",
            "black-forest-labs/flux: src/flux/modules/layers.py",
            "huggingface/diffusers: models/transformers/transformer_flux.py",
        ),
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, resolution-dependent shift)",
        raw_range=(0.0, 1000.0),
        pipeline="t.expand(batch).to(latents dtype) / 1000: sigma again, in the latents' dtype",
        inside="timestep.to(model dtype) * 1000",
        formed_in="the model's dtype (bfloat16: sigma 0.99 reaches the sinusoid as 988, 0.75 as 752)",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero in double blocks, AdaLayerNormZeroSingle in single blocks)",
        extra=(
            "guidance: the guidance scale (e.g. 3.5) .to(model dtype) * 1000, through the same sinusoid and "
            "its own MLP (guidance_embedder), added",
        ),
        diffusers="FluxTransformer2DModel (guidance_embeds=True)",
        notes="the original's timestep_embedding(t, 256, time_factor=1000) forms 1000 * t in t's dtype and returns "
        "that dtype: sinusoidal_embedding(sigma, 256, 'adm', scale=1000, scale_in_input_dtype=True, dtype=t.dtype)",
        to_model=over_1000,
        to_sinusoid=in_dtype_times_1000,
        pipeline_cast="before",
    ),
    TimestepContract(
        name="flux_schnell",
        family="FLUX.1 [schnell] (timestep-distilled, no guidance input)",
        sources=(
            "black-forest-labs/flux: src/flux/model.py",
            "huggingface/diffusers: models/transformers/transformer_flux.py",
        ),
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, no shift)",
        raw_range=(0.0, 1000.0),
        pipeline="t.expand(batch).to(latents dtype) / 1000",
        inside="timestep.to(model dtype) * 1000",
        formed_in="the model's dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle)",
        diffusers="FluxTransformer2DModel (guidance_embeds=False)",
        to_model=over_1000,
        to_sinusoid=in_dtype_times_1000,
        pipeline_cast="before",
    ),
    TimestepContract(
        name="wan21",
        family="Wan 2.1 / 2.2 video DiT",
        sources=(
            "Wan-Video/Wan2.1: wan/modules/model.py",
            "huggingface/diffusers: models/transformers/transformer_wan.py",
        ),
        raw="the scheduler's timesteps: sigma * 1000 (UniPC / FlowMatch with shift)",
        raw_range=(0.0, 1000.0),
        pipeline="the scheduler's timesteps; Wan 2.2 TI2V also per token: [B, tokens]",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> dim -> dim, SiLU; then SiLU + Linear to 6 x dim (time_proj)",
        injection="adaLN: the 6 x dim modulation plus a learned table per block",
        diffusers="WanTransformer3DModel",
        notes="the original builds the sinusoid in float64 (sinusoidal_embedding_1d); diffusers in float32",
    ),
    TimestepContract(
        name="hunyuan_video",
        family="HunyuanVideo",
        sources=(
            "Tencent/HunyuanVideo: hyvideo/modules/embed_layers.py",
            "huggingface/diffusers: models/transformers/transformer_hunyuan_video.py",
        ),
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, shift 7)",
        raw_range=(0.0, 1000.0),
        pipeline="the scheduler's timesteps",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero in double and single blocks)",
        extra=("guidance: the pipeline passes guidance_scale * 1000, through the same sinusoid and its own MLP",),
        diffusers="HunyuanVideoTransformer3DModel",
    ),
]
