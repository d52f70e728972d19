"""The timestep contracts of real model families, each citing the files it was read from.

``CONTRACTS[name]`` is a :class:`~timestep_embed.interop.contract.TimestepContract`;
:func:`contract_for` picks the one of a diffusers model from its class and config. For the families
diffusers implements, ``tests/interop/test_contracts.py`` feeds a tiny random-weight model of that
class the raw scheduler values through the contract and checks that the model's own time path
computes exactly what the contract says: the sinusoid's input and output, and the MLP's output.
"""

from __future__ import annotations

import torch

from ..conventions import convention_from_diffusers, get_convention
from .contract import TimestepContract

__all__ = ["CONTRACTS", "get_contract", "contract_for", "edm_vp_c_noise"]


def _over_1000(t: torch.Tensor) -> torch.Tensor:
    # Flux's pipelines: `timestep=timestep / 1000`, in float32
    return t.float() / 1000


def _in_dtype_times_1000(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # Flux: `timestep = timestep.to(hidden_states.dtype) * 1000` in the model's dtype (bf16: 0.99 -> 988)
    return t.to(dtype) * 1000


def edm_vp_c_noise(sigma: torch.Tensor, beta_d: float = 19.9, beta_min: float = 0.1, m: int = 1000) -> torch.Tensor:
    """EDM VPPrecond's c_noise = (M - 1) sigma^-1(sigma), the VP time of a noise level (Karras et al. 2022, Table 1)."""
    t = ((beta_min**2 + 2 * beta_d * (1 + sigma**2).log()).sqrt() - beta_min) / beta_d
    return (m - 1) * t


ADM = get_convention("adm")
_CONTRACTS = [
    TimestepContract(
        name="ddpm",
        family="DDPM (Ho et al. 2020), google/ddpm-cifar10-32 and its diffusers port",
        sources=("hojonathanho/diffusion: diffusion_tf/nn.py", "huggingface/diffusers: models/unets/unet_2d.py"),
        raw="integer step t in 0..999 (DDPMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        formed_in="float32 (t.float())",
        convention=get_convention("ddpm"),
        sinusoid_dim=None,
        mlp="C -> 4C -> 4C, SiLU (C = block_out_channels[0]: 128)",
        injection="additive: ResnetBlock2D adds time_emb_proj(SiLU(emb)) after the first conv",
        diffusers="UNet2DModel",
        notes="the diffusers config of google/ddpm-cifar10-32 sets flip_sin_to_cos=False, freq_shift=1",
    ),
    TimestepContract(
        name="guided_diffusion",
        family="improved-diffusion and guided-diffusion (ADM) UNets",
        sources=(
            "openai/guided-diffusion: guided_diffusion/nn.py",
            "openai/guided-diffusion: guided_diffusion/unet.py",
            "openai/improved-diffusion: improved_diffusion/respace.py",
        ),
        raw="integer step t in 0..T-1 (respaced samplers map back to the original index)",
        raw_range=(0, 999),
        pipeline="t, or t * 1000 / T with rescale_timesteps=True",
        convention=ADM,
        sinusoid_dim=None,
        mlp="C -> 4C -> 4C, SiLU (C = model_channels)",
        injection="scale-shift: use_scale_shift_norm, out_norm(h) * (1 + scale) + shift",
        extra=("class labels: label_emb added to emb (class-conditional models)",),
    ),
    TimestepContract(
        name="stable_diffusion",
        family="Stable Diffusion 1.x / 2.x (LDM UNet)",
        sources=(
            "CompVis/stable-diffusion: ldm/modules/diffusionmodules/util.py",
            "huggingface/diffusers: models/unets/unet_2d_condition.py",
        ),
        raw="integer step t in 1..999 (PNDM/DDIM, leading spacing with steps_offset 1)",
        raw_range=(1, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=320,
        mlp="320 -> 1280 -> 1280, SiLU",
        injection="additive (ResnetBlock2D time_emb_proj)",
        diffusers="UNet2DConditionModel",
    ),
    TimestepContract(
        name="sdxl",
        family="Stable Diffusion XL",
        sources=(
            "Stability-AI/generative-models: sgm/modules/diffusionmodules/openaimodel.py",
            "huggingface/diffusers: models/unets/unet_2d_condition.py",
        ),
        raw="integer step t in 0..999 (EulerDiscrete, leading spacing)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=320,
        mlp="320 -> 1280 -> 1280, SiLU",
        injection="additive; the size embedding is added to emb",
        extra=(
            "time ids (original h, w, crop top, left, target h, w): each through the same sinusoid "
            "(add_time_proj, 256 wide), concatenated with the pooled text and projected (add_embedding)",
        ),
        diffusers="UNet2DConditionModel (addition_embed_type='text_time')",
    ),
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
        pipeline="timesteps / 1000: sigma again, in float32",
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
        to_model=_over_1000,
        to_sinusoid=_in_dtype_times_1000,
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
        pipeline="timesteps / 1000",
        inside="timestep.to(model dtype) * 1000",
        formed_in="the model's dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle)",
        diffusers="FluxTransformer2DModel (guidance_embeds=False)",
        to_model=_over_1000,
        to_sinusoid=_in_dtype_times_1000,
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
    TimestepContract(
        name="edm",
        family="EDM (Karras et al. 2022) with EDMPrecond and the DhariwalUNet (ADM architecture)",
        sources=("NVlabs/edm: training/networks.py",),
        raw="sigma in [0.002, 80]",
        raw_range=(0.002, 80.0),
        pipeline="c_noise = ln(sigma) / 4",
        convention=get_convention("edm"),
        sinusoid_dim=None,
        mlp="C -> 4C, SiLU, 4C -> 4C, then SiLU (map_layer0, map_layer1, post SiLU)",
        injection="scale-shift (UNetBlock.affine with adaptive_scale=True)",
        extra=("class labels: map_label added before the last SiLU",),
        to_model=lambda sigma: sigma.log() / 4,
    ),
    TimestepContract(
        name="edm_vp",
        family="EDM VPPrecond with SongUNet (DDPM++)",
        sources=("NVlabs/edm: training/networks.py",),
        raw="sigma in [0.002, 80] (the VP sigma of t)",
        raw_range=(0.002, 80.0),
        pipeline="c_noise = (M - 1) sigma^-1(sigma), M = 1000: the VP time scaled to 0..999",
        convention=get_convention("edm_song"),
        sinusoid_dim=None,
        mlp="C -> 4C -> 4C, SiLU (map_layer0, map_layer1)",
        injection="additive (UNetBlock.affine, adaptive_scale=False)",
        to_model=edm_vp_c_noise,
    ),
    TimestepContract(
        name="edm_ve",
        family="EDM VEPrecond with SongUNet (NCSN++)",
        sources=("NVlabs/edm: training/networks.py",),
        raw="sigma in [0.02, 100]",
        raw_range=(0.02, 100.0),
        pipeline="c_noise = ln(sigma / 2)",
        convention=None,
        sinusoid_dim=None,
        mlp="C -> 4C -> 4C, SiLU",
        injection="additive (UNetBlock.affine)",
        notes="Fourier features (FourierEmbedding, scale 16), not a sinusoid: FourierEmbedding.edm here",
        to_model=lambda sigma: (sigma / 2).log(),
    ),
    TimestepContract(
        name="k_diffusion_compvis",
        family="k-diffusion wrappers of discrete VP models (CompVisDenoiser, DiscreteEpsDDPMDenoiser)",
        sources=("crowsonkb/k-diffusion: k_diffusion/external.py",),
        raw="sigma of the model's schedule (Karras / exponential sigma grids)",
        raw_range=(0.0292, 14.61),
        pipeline="t = sigma_to_t(sigma): log-sigma interpolation between the integer steps, fractional",
        inside="nothing (the wrapped model's own sinusoid)",
        convention=ADM,
        sinusoid_dim=320,
        mlp="the wrapped model's (Stable Diffusion: 320 -> 1280 -> 1280)",
        injection="the wrapped model's",
        notes="the model sees fractional t although it was trained on integers",
    ),
    TimestepContract(
        name="k_diffusion_v1",
        family="k-diffusion's own image_v1 UNet (ImageDenoiserModelV1), sigma in, c_noise inside",
        sources=(
            "crowsonkb/k-diffusion: k_diffusion/models/image_v1.py",
            "crowsonkb/k-diffusion: k_diffusion/layers.py",
        ),
        raw="sigma of a Karras grid (sample_heun / sample_dpmpp_2m)",
        raw_range=(0.01, 80.0),
        pipeline="sigma",
        inside="c_noise = ln(sigma) / 4, then FourierFeatures(1, width): [cos | sin] of 2 pi c_noise w",
        convention=None,
        sinusoid_dim=None,
        mlp="MappingNet: (Linear, GELU) x 2, width -> width",
        injection="the mapping output conditions every block (AdaGN)",
        notes="Fourier features, not a sinusoid: FourierEmbedding(first='cos') of ln(sigma) / 4",
        to_sinusoid=lambda sigma, dtype: sigma.log() / 4,
    ),
    TimestepContract(
        name="lucidrains_ddpm",
        family="lucidrains' denoising-diffusion-pytorch Unet",
        sources=("lucidrains/denoising-diffusion-pytorch: denoising_diffusion_pytorch/denoising_diffusion_pytorch.py",),
        raw="integer step t in 0..T-1 (T = 1000 by default)",
        raw_range=(0, 999),
        pipeline="t",
        convention=get_convention("ddpm"),
        sinusoid_dim=None,
        mlp="dim -> 4 dim, GELU, 4 dim -> 4 dim (time_mlp)",
        injection="scale-shift: ResnetBlock.mlp = SiLU, Linear(time_dim, 2 dim_out); x * (scale + 1) + shift",
        notes="SinusoidalPosEmb: ln(theta) / (half_dim - 1), [sin | cos] (theta 10000); an odd dim gives "
        "2 * (dim // 2) columns; RandomOrLearnedSinusoidalPosEmb: [t, sin, cos] of 2 pi t w",
    ),
]
CONTRACTS: dict[str, TimestepContract] = {c.name: c for c in _CONTRACTS}


def get_contract(name: str) -> TimestepContract:
    """The contract called ``name`` (see :data:`CONTRACTS`)."""
    if name not in CONTRACTS:
        raise ValueError(f"no timestep contract {name!r}; known: {', '.join(CONTRACTS)}")
    return CONTRACTS[name]


# diffusers class name -> contract name; a callable picks by the model's config.
_BY_CLASS = {
    # a UNet2DModel is DDPM's only with DDPM's sinusoid (google/ddpm-cifar10-32's config)
    "UNet2DModel": lambda config: (
        "ddpm"
        if config.get("time_embedding_type", "positional") == "positional"
        and not config.get("flip_sin_to_cos", True)
        and config.get("freq_shift", 0) == 1
        else None
    ),
    "UNet2DConditionModel": lambda config: (
        "sdxl" if config.get("addition_embed_type") == "text_time" else "stable_diffusion"
    ),
    "DiTTransformer2DModel": lambda config: "dit_diffusers",
    "PixArtTransformer2DModel": lambda config: "pixart",
    "SD3Transformer2DModel": lambda config: "sd3",
    "FluxTransformer2DModel": lambda config: "flux_dev" if config.get("guidance_embeds") else "flux_schnell",
    "WanTransformer3DModel": lambda config: "wan21",
    "HunyuanVideoTransformer3DModel": lambda config: "hunyuan_video",
}


def contract_for(model) -> TimestepContract | None:
    """The contract of a diffusers model, from its class name and config; None for other models."""
    pick = _BY_CLASS.get(type(model).__name__)
    config = getattr(model, "config", None)
    name = pick(config) if pick is not None and hasattr(config, "get") else None
    return CONTRACTS[name] if name is not None else None
