"""The timestep contracts of UNet families: DDPM, guided-diffusion, Stable Diffusion (and the UNets built
on it), SDXL, Stable Video Diffusion, Kandinsky 3, EDM's networks, k-diffusion, lucidrains."""

from __future__ import annotations

from ..conventions import get_convention
from .timestep_contract import TimestepContract

__all__ = ["UNET_CONTRACTS", "edm_vp_c_noise"]

ADM = get_convention("adm")


def edm_vp_c_noise(sigma, beta_d: float = 19.9, beta_min: float = 0.1, m: int = 1000):
    """EDM VPPrecond's c_noise = (M - 1) sigma^-1(sigma), the VP time of a noise level (Karras et al. 2022, Table 1)."""
    t = ((beta_min**2 + 2 * beta_d * (1 + sigma**2).log()).sqrt() - beta_min) / beta_d
    return (m - 1) * t


UNET_CONTRACTS = [
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
UNET_CONTRACTS += [
    TimestepContract(
        name="svd",
        family="Stable Video Diffusion (UNetSpatioTemporalConditionModel): EDM noise levels",
        sources=(
            "huggingface/diffusers: models/unets/unet_spatio_temporal_condition.py",
            "huggingface/diffusers: pipelines/stable_video_diffusion/pipeline_stable_video_diffusion.py",
            "Stability-AI/generative-models: sgm/modules/diffusionmodules/denoiser_scaling.py",
        ),
        raw="sigma of a Karras grid (EulerDiscreteScheduler, use_karras_sigmas, timestep_type='continuous')",
        raw_range=(0.002, 700.0),
        pipeline="the scheduler's timesteps: c_noise = ln(sigma) / 4",
        convention=ADM,
        sinusoid_dim=320,
        mlp="320 -> 1280 -> 1280, SiLU",
        injection="additive (ResnetBlock2D / SpatioTemporalResBlock time_emb_proj)",
        extra=(
            "added time ids (fps - 1, motion bucket, noise augmentation): each through the same sinusoid "
            "(add_time_proj), concatenated and projected (add_embedding), added",
            "frame indices: through a sinusoid per temporal transformer (time_proj / time_pos_embed)",
        ),
        diffusers="UNetSpatioTemporalConditionModel",
        to_model=lambda sigma: sigma.log() / 4,
    ),
    TimestepContract(
        name="kandinsky3",
        family="Kandinsky 3 (Kandinsky3UNet)",
        sources=(
            "huggingface/diffusers: models/unets/unet_kandinsky3.py",
            "huggingface/diffusers: pipelines/kandinsky3/pipeline_kandinsky3.py",
        ),
        raw="integer step t in 0..999 (DDPMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=get_convention("ddpm"),
        sinusoid_dim=None,
        mlp="C/2 -> time_embedding_dim -> time_embedding_dim, SiLU (C = block_out_channels[0])",
        injection="scale-shift (Kandinsky3ResNetBlock's AdaGN), plus attention pooling of the text into emb",
        diffusers="Kandinsky3UNet",
        notes="Timesteps(flip_sin_to_cos=False, downscale_freq_shift=1): DDPM's [sin | cos] with half - 1",
    ),
    TimestepContract(
        name="diffuser",
        family="Planning with Diffusion's temporal UNet (Janner et al. 2022) as diffusers ports it (UNet1DModel)",
        sources=(
            "jannerm/diffuser: diffuser/models/helpers.py",
            "huggingface/diffusers: models/unets/unet_1d.py",
        ),
        raw="integer step t in 0..T-1 (DDPMScheduler, T = 20 in the released value functions)",
        raw_range=(0, 999),
        pipeline="t",
        convention=get_convention("ddpm"),
        sinusoid_dim=None,
        mlp="C -> 4C -> C, Mish (time_mlp, act_fn='mish')",
        injection="additive per ResidualTemporalBlock1D (time_emb: Mish, Linear)",
        diffusers="UNet1DModel (time_embedding_type='positional', flip_sin_to_cos=False, freq_shift=1)",
    ),
]
