"""UNet families: DDPM, guided-diffusion (ADM), Stable Diffusion (and the UNets built on it), SDXL,
Kandinsky 3, Planning with Diffusion's 1-D UNet, the unCLIP prior, lucidrains' Unet; and the generic
layouts of diffusers' UNets, whose sinusoid lives in ``config.json``."""

from __future__ import annotations

from ..conventions import get_convention
from .schema import SEQUENTIAL, Family, Layout, MLPKeys, TimestepContract, every, table

__all__ = ["FAMILIES", "GENERIC"]

DDPM = get_convention("ddpm")
_UNET = (
    MLPKeys("timestep", "time_embedding."),
    MLPKeys("time ids", "add_embedding.", fed="size and crop ids through a sinusoid, with pooled text"),
)
_UNET_SOURCE = "huggingface/diffusers: models/unets/unet_2d.py, models/unets/unet_2d_condition.py"
_LDM = (MLPKeys("timestep", "time_embed.", SEQUENTIAL),)  # time_embed = Sequential(linear, SiLU, linear)
_LUCIDRAINS = "lucidrains/denoising-diffusion-pytorch: denoising_diffusion_pytorch/denoising_diffusion_pytorch.py"
_SD_UNETS = ("UNet2DConditionModel", "ControlNetModel", "UNet3DConditionModel", "UNetMotionModel",
             "UNetControlNetXSModel", "SparseControlNetModel", "ControlNetUnionModel")  # fmt: skip


def _ddpm_flags(config, type_default: str | None = "positional") -> bool:
    """DDPM's sinusoid in a diffusers UNet's config ([sin | cos], shift 1: google/ddpm-cifar10-32's)."""
    positional = config.get("time_embedding_type", type_default) == "positional"
    return positional and not config.get("flip_sin_to_cos", True) and config.get("freq_shift", 0) == 1


def _sd_unet(sdxl: bool):
    """A UNet built on Stable Diffusion's (ControlNet, AnimateDiff, ControlNet-XS, ModelScope ...) with the
    default sinusoid: SDXL's time path with the size ids, SD's without."""

    def test(config) -> bool:
        adm = bool(config.get("flip_sin_to_cos", True)) and config.get("freq_shift", 0) == 0
        positional = config.get("time_embedding_type", "positional") == "positional"
        return adm and positional and (config.get("addition_embed_type") == "text_time") == sdxl

    return test


# fmt: off
# (a table: each call keeps its facts a line apiece)
# a diffusers UNet's keys say nothing of its sinusoid: the generic layouts take it from config.json
GENERIC = (
    Layout("diffusers", _UNET, _UNET_SOURCE, convention=None),
    Layout("unet1d", (MLPKeys("timestep", "time_mlp."),), "huggingface/diffusers: models/unets/unet_1d.py",
           convention=None),
    Layout("controlnet_xs", (MLPKeys("timestep", "base_time_embedding."),),
           "huggingface/diffusers: models/controlnets/controlnet_xs.py (UNetControlNetXSModel)", convention=None),
)

DDPM_FAMILY = Family(
    TimestepContract(
        "ddpm", "DDPM (Ho et al. 2020), google/ddpm-cifar10-32 and its diffusers port",
        ("hojonathanho/diffusion: diffusion_tf/nn.py", "huggingface/diffusers: models/unets/unet_2d.py"),
        "integer step t in 0..999 (DDPMScheduler)", (0, 999), "t", formed_in="float32 (t.float())",
        convention=DDPM, mlp="C -> 4C -> 4C, SiLU (C = block_out_channels[0]: 128)",
        injection="additive: ResnetBlock2D adds time_emb_proj(SiLU(emb)) after the first conv", diffusers="UNet2DModel",
        notes="the diffusers config of google/ddpm-cifar10-32 sets flip_sin_to_cos=False, freq_shift=1"),
    layouts=(
        Layout("ddpm", _UNET, _UNET_SOURCE, convention="ddpm", auto=False),
        # ermongroup/ddim and pesser/pytorch_diffusion (the torch ports of DDPM): temb.dense = [Linear, Linear], swish
        Layout("ddpm_original", (MLPKeys("timestep", "temb.dense.", ("0", "1")),),
               "ermongroup/ddim: models/diffusion.py",
               convention="ddpm"),
    ),
    classes=every("UNet2DModel", when=_ddpm_flags))

GUIDED_DIFFUSION = Family(
    TimestepContract(
        "guided_diffusion", "improved-diffusion and guided-diffusion (ADM) UNets",
        ("openai/guided-diffusion: guided_diffusion/nn.py", "openai/guided-diffusion: guided_diffusion/unet.py",
         "openai/improved-diffusion: improved_diffusion/respace.py"),
        "integer step t in 0..T-1 (respaced samplers map back to the original index)", (0, 999),
        "t, or t * 1000 / T with rescale_timesteps=True", mlp="C -> 4C -> 4C, SiLU (C = model_channels)",
        injection="scale-shift: use_scale_shift_norm, out_norm(h) * (1 + scale) + shift",
        extra=("class labels: label_emb added to emb (class-conditional models)",)),
    layouts=(Layout("adm", (*_LDM, table("class labels", "label_emb.weight")),
                    "openai/guided-diffusion: guided_diffusion/unet.py"),))

STABLE_DIFFUSION = Family(
    TimestepContract(
        "stable_diffusion", "Stable Diffusion 1.x / 2.x (LDM UNet)",
        ("CompVis/stable-diffusion: ldm/modules/diffusionmodules/util.py",
         "huggingface/diffusers: models/unets/unet_2d_condition.py"),
        "integer step t in 1..999 (PNDM/DDIM, leading spacing with steps_offset 1)", (1, 999), "t",
        sinusoid_dim=320, mlp="320 -> 1280 -> 1280, SiLU", injection="additive (ResnetBlock2D time_emb_proj)",
        diffusers="UNet2DConditionModel"),
    layouts=(
        Layout("stable_diffusion", _UNET, _UNET_SOURCE, markers=(".attn2.",), auto=False),
        Layout("stable_diffusion_original", _LDM,
               "CompVis/stable-diffusion: ldm/modules/diffusionmodules/openaimodel.py",
               markers=(".transformer_blocks.0.attn2.",), parent="adm"),
    ),
    classes=every(*_SD_UNETS, when=_sd_unet(sdxl=False)))

SDXL = Family(
    TimestepContract(
        "sdxl", "Stable Diffusion XL",
        ("Stability-AI/generative-models: sgm/modules/diffusionmodules/openaimodel.py",
         "huggingface/diffusers: models/unets/unet_2d_condition.py"),
        "integer step t in 0..999 (EulerDiscrete, leading spacing)", (0, 999), "t",
        sinusoid_dim=320, mlp="320 -> 1280 -> 1280, SiLU", injection="additive; the size embedding is added to emb",
        extra=("time ids (original h, w, crop top, left, target h, w): each through the same sinusoid "
               "(add_time_proj, 256 wide), concatenated with the pooled text and projected (add_embedding)",),
        diffusers="UNet2DConditionModel (addition_embed_type='text_time')"),
    layouts=(
        Layout("sdxl", _UNET, _UNET_SOURCE, markers=(".attn2.", "add_embedding.linear_1."), auto=False),
        Layout("sdxl_original",
               (*_LDM, MLPKeys("size and text", "label_emb.0.", SEQUENTIAL,
                               fed="size and crop ids through a sinusoid, with pooled text")),
               markers=(".transformer_blocks.0.attn2.", "label_emb.0.0.weight"), parent="stable_diffusion_original"),
    ),
    classes=every(*_SD_UNETS, when=_sd_unet(sdxl=True)))

KANDINSKY3 = Family(
    TimestepContract(
        "kandinsky3", "Kandinsky 3 (Kandinsky3UNet)",
        ("huggingface/diffusers: models/unets/unet_kandinsky3.py",
         "huggingface/diffusers: pipelines/kandinsky3/pipeline_kandinsky3.py"),
        "integer step t in 0..999 (DDPMScheduler)", (0, 999), "t", convention=DDPM,
        mlp="C/2 -> time_embedding_dim -> time_embedding_dim, SiLU (C = block_out_channels[0])",
        injection="scale-shift (Kandinsky3ResNetBlock's AdaGN), plus attention pooling of the text into emb",
        diffusers="Kandinsky3UNet",
        notes="Timesteps(flip_sin_to_cos=False, downscale_freq_shift=1): DDPM's [sin | cos] with half - 1"),
    layouts=(Layout("kandinsky3", (MLPKeys("timestep", "time_embedding."),),
                    "huggingface/diffusers: models/unets/unet_kandinsky3.py "
                    "(Timesteps(flip_sin_to_cos=False, shift=1))",
                    markers=("add_time_condition.",), convention="ddpm", parent="diffusers",
                    classes=("Kandinsky3UNet",)),),
    classes=every("Kandinsky3UNet"))

DIFFUSER = Family(
    TimestepContract(
        "diffuser", "Planning with Diffusion's temporal UNet (Janner et al. 2022) as diffusers ports it (UNet1DModel)",
        ("jannerm/diffuser: diffuser/models/helpers.py", "huggingface/diffusers: models/unets/unet_1d.py"),
        "integer step t in 0..T-1 (DDPMScheduler, T = 20 in the released value functions)", (0, 999), "t",
        convention=DDPM, mlp="C -> 4C -> C, Mish (time_mlp, act_fn='mish')",
        injection="additive per ResidualTemporalBlock1D (time_emb: Mish, Linear)",
        diffusers="UNet1DModel (time_embedding_type='positional', flip_sin_to_cos=False, freq_shift=1)"),
    classes=every("UNet1DModel", when=lambda config: _ddpm_flags(config, type_default=None)))

UNCLIP_PRIOR = Family(
    TimestepContract(
        "unclip_prior", "the unCLIP / Kandinsky 2.x prior (PriorTransformer)",
        ("huggingface/diffusers: models/transformers/prior_transformer.py",
         "huggingface/diffusers: pipelines/kandinsky/pipeline_kandinsky_prior.py"),
        "integer step t in 0..999 (UnCLIPScheduler)", (0, 999), "t",
        mlp="inner_dim -> time_embed_dim -> inner_dim, SiLU (time_embedding)",
        injection="a token: the time embedding joins the sequence the transformer reads", diffusers="PriorTransformer"),
    layouts=(Layout("unclip_prior", (MLPKeys("timestep", "time_embedding."),),
                    "huggingface/diffusers: models/transformers/prior_transformer.py (Timesteps(inner_dim, True, 0))",
                    markers=("proj_to_clip_embeddings.", "embedding_proj."), parent="diffusers"),),
    classes=every("PriorTransformer"))

LUCIDRAINS = Family(
    TimestepContract(
        "lucidrains_ddpm", "lucidrains' denoising-diffusion-pytorch Unet", (_LUCIDRAINS,),
        "integer step t in 0..T-1 (T = 1000 by default)", (0, 999), "t", convention=DDPM,
        mlp="dim -> 4 dim, GELU, 4 dim -> 4 dim (time_mlp)",
        injection="scale-shift: ResnetBlock.mlp = SiLU, Linear(time_dim, 2 dim_out); x * (scale + 1) + shift",
        notes="SinusoidalPosEmb: ln(theta) / (half_dim - 1), [sin | cos] (theta 10000); an odd dim gives "
        "2 * (dim // 2) columns; RandomOrLearnedSinusoidalPosEmb: [t, sin, cos] of 2 pi t w"),
    layouts=(
        # time_mlp = Sequential(SinusoidalPosEmb, Linear, GELU, Linear)
        Layout("lucidrains", (MLPKeys("timestep", "time_mlp.", ("1", "3")),), absent=("time_mlp.0.weights",),
               convention="ddpm", act="gelu"),
        # RandomOrLearnedSinusoidalPosEmb: [t | sin | cos] of (t * w) * 2 pi, one more column than 2 x weights
        Layout("lucidrains_learned", (MLPKeys("timestep", "time_mlp.", ("1", "3")),), markers=("time_mlp.0.weights",),
               convention=None, fourier=("time_mlp.0.weights", {"first": "sin", "include_input": True}), act="gelu"),
    ))
# fmt: on

FAMILIES = (DDPM_FAMILY, GUIDED_DIFFUSION, STABLE_DIFFUSION, SDXL, KANDINSKY3, DIFFUSER, UNCLIP_PRIOR, LUCIDRAINS)
