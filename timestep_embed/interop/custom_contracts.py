"""The timestep contracts of the diffusers transformers whose time path has modules of their own:
Z-Image (DiT's ``TimestepEmbedder``, copied), BRIA 3.2 and BRIA-FIBO (``BriaTimesteps``: diffusers'
sinusoid with a configurable period), OmniGen (two MLPs on one sinusoid); and two UNet-era models,
Kandinsky's / unCLIP's prior and I2VGen-XL (whose frame rate goes through the timestep's sinusoid).
Each is read from the diffusers model and pipeline files it cites."""

from __future__ import annotations

import torch

from ..conventions import get_convention
from .timestep_contract import TimestepContract, diffusers_sources, in_model_dtype

__all__ = ["CUSTOM_CONTRACTS"]

ADM = get_convention("adm")
FLOW = "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscreteScheduler)"


def _z_time(t: torch.Tensor) -> torch.Tensor:
    # ZImagePipeline: `timestep = (1000 - timestep) / 1000`, the flow time counted from noise
    return (1000 - (t if t.is_floating_point() else t.float())) / 1000


CUSTOM_CONTRACTS = [
    TimestepContract(
        name="z_image",
        family="Z-Image (single-stream DiT)",
        sources=diffusers_sources("transformer_z_image", "z_image/pipeline_z_image"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="(1000 - t) / 1000: the flow time in [0, 1], counting from noise",
        inside="t * t_scale (1000.0), in float32",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> 1024 -> min(dim, 256), SiLU (DiT's TimestepEmbedder: t_embedder.mlp.0 / mlp.2)",
        injection="adaLN per block (adaLN_modulation)",
        diffusers="ZImageTransformer2DModel",
        notes="the sinusoid is DiT's timestep_embedding ([cos | sin], / half), so the sinusoid sees 1000 - t "
        "rounded through the float32 division and product",
        to_model=_z_time,
        to_sinusoid=lambda t, dtype: t * 1000.0,
    ),
    TimestepContract(
        name="bria",
        family="BRIA 3.2 (Flux-like MMDiT without guidance or pooled text)",
        sources=diffusers_sources("transformer_bria", "bria/pipeline_bria"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t",
        inside="timestep.to(model dtype); BriaTimesteps: diffusers' sinusoid with max_period = time_theta",
        formed_in="the model's dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (BriaTimestepProjEmbeddings)",
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle, Flux's blocks)",
        diffusers="BriaTransformer2DModel",
        notes="the keys are LongCat-Image's, whose pipeline passes sigma instead: the class (config.json) tells them "
        "apart; time_theta (10000 in the released config) lives in config.json",
        to_sinusoid=in_model_dtype,
    ),
    TimestepContract(
        name="bria_fibo",
        family="BRIA-FIBO",
        sources=diffusers_sources("transformer_bria_fibo", "bria_fibo/pipeline_bria_fibo"),
        raw=FLOW,
        raw_range=(0.0, 1000.0),
        pipeline="t.expand(batch).to(latents dtype)",
        inside="timestep.to(model dtype); BriaFiboTimesteps: max_period = time_theta",
        formed_in="the model's dtype",
        convention=ADM,
        sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (BriaFiboTimestepProjEmbeddings)",
        injection="adaLN (Flux's blocks)",
        diffusers="BriaFiboTransformer2DModel",
        to_sinusoid=in_model_dtype,
        pipeline_cast="before",
    ),
    TimestepContract(
        name="omnigen",
        family="OmniGen",
        sources=(
            "huggingface/diffusers: models/transformers/transformer_omnigen.py",
            "huggingface/diffusers: tests/pipelines/omnigen/test_pipeline_omnigen.py "
            "(FlowMatchEulerDiscreteScheduler(invert_sigmas=True, num_train_timesteps=1))",
        ),
        raw="FlowMatchEulerDiscreteScheduler(invert_sigmas=True, num_train_timesteps=1) timesteps: 1 - sigma in [0, 1]",
        raw_range=(0.0, 1.0),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="time_step_dim -> hidden -> hidden, SiLU, twice: t_embedder (the adaLN input) and time_token (a token)",
        injection="adaLN of the output layer, and the time token prepended to the sequence",
        extra=("time token: the same sinusoid through its own MLP (time_token), prepended as a token",),
        diffusers="OmniGenTransformer2DModel",
        notes="the sinusoid is fed t in [0, 1] as it is (scale 1)",
    ),
    TimestepContract(
        name="unclip_prior",
        family="the unCLIP / Kandinsky 2.x prior (PriorTransformer)",
        sources=(
            "huggingface/diffusers: models/transformers/prior_transformer.py",
            "huggingface/diffusers: pipelines/kandinsky/pipeline_kandinsky_prior.py",
        ),
        raw="integer step t in 0..999 (UnCLIPScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="inner_dim -> time_embed_dim -> inner_dim, SiLU (time_embedding)",
        injection="a token: the time embedding joins the sequence the transformer reads",
        diffusers="PriorTransformer",
    ),
    TimestepContract(
        name="i2vgen_xl",
        family="I2VGen-XL (image-to-video UNet)",
        sources=(
            "huggingface/diffusers: models/unets/unet_i2vgen_xl.py",
            "huggingface/diffusers: pipelines/deprecated/i2vgen_xl/pipeline_i2vgen_xl.py",
        ),
        raw="integer step t in 0..999 (DDIMScheduler)",
        raw_range=(0, 999),
        pipeline="t",
        convention=ADM,
        sinusoid_dim=None,
        mlp="block_out_channels[0] -> 4 x that -> same, SiLU (time_embedding)",
        injection="scale-shift in every ResNet block, as Stable Diffusion's UNet",
        extra=("the frame rate: fps through the same sinusoid (time_proj) and its own MLP (fps_embedding), added",),
        diffusers="I2VGenXLUNet",
    ),
]
