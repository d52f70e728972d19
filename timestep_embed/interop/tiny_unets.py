"""Tiny diffusers UNets (1-D, 2-D, conditioned) for the tests and the coverage report."""

from __future__ import annotations

import torch

from .tiny_spec import B, Tiny, randn

__all__ = ["UNETS"]

_UNET2D = dict(
    sample_size=8,
    in_channels=1,
    out_channels=1,
    block_out_channels=(8, 16),
    layers_per_block=1,
    norm_num_groups=4,
    down_block_types=("DownBlock2D",) * 2,
    up_block_types=("UpBlock2D",) * 2,
)
_UNET2D_CONDITION = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(8, 16),
    layers_per_block=1,
    norm_num_groups=4,
    cross_attention_dim=8,
    attention_head_dim=2,
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
)


def _image(channels: int = 1):
    return lambda: {"sample": randn(B, channels, 8, 8)}


def _sd():
    return {"sample": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 3, 8)}


def _sdxl():
    cond = {"text_embeds": randn(B, 8), "time_ids": torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024]] * B)}
    return {**_sd(), "added_cond_kwargs": cond}


UNETS = {
    # google/ddpm-cifar10-32 style: [sin | cos], shift 1
    "ddpm": Tiny("UNet2DModel", {**_UNET2D, "flip_sin_to_cos": False, "freq_shift": 1}, _image()),
    "unet2d_fourier": Tiny("UNet2DModel", {**_UNET2D, "time_embedding_type": "fourier"}, _image(), (0.01, 40.0)),
    "unet2d_learned": Tiny(
        "UNet2DModel", {**_UNET2D, "time_embedding_type": "learned", "num_train_timesteps": 1000}, _image()
    ),
    "stable_diffusion": Tiny("UNet2DConditionModel", _UNET2D_CONDITION, _sd),
    "sdxl": Tiny(
        "UNet2DConditionModel",
        {
            **_UNET2D_CONDITION,
            "addition_embed_type": "text_time",
            "addition_time_embed_dim": 8,
            "projection_class_embeddings_input_dim": 6 * 8 + 8,
        },
        _sdxl,
    ),
    # the value-function UNet of Janner et al.'s diffuser: positional, shift 1
    "unet1d": Tiny(
        "UNet1DModel",
        dict(
            sample_size=16,
            in_channels=14,
            out_channels=14,
            time_embedding_type="positional",
            flip_sin_to_cos=False,
            freq_shift=1.0,
            use_timestep_embedding=True,
            extra_in_channels=0,
            block_out_channels=(32, 64, 128),
            down_block_types=("DownResnetBlock1D",) * 3,
            up_block_types=("UpResnetBlock1D",) * 2,
            mid_block_type="MidResTemporalBlock1D",
            out_block_type="OutConv1DBlock",
            act_fn="mish",
            layers_per_block=1,
            downsample_each_block=False,
        ),
        lambda: {"sample": randn(B, 14, 16)},
    ),
    # Dance Diffusion: Fourier features of the noise level, no MLP
    "unet1d_fourier": Tiny(
        "UNet1DModel",
        dict(
            sample_size=16,
            in_channels=2,
            out_channels=2,
            block_out_channels=(32, 32, 64),
            time_embedding_dim=16,
            extra_in_channels=16,
        ),
        lambda: {"sample": randn(B, 2, 64)},
        (0.05, 0.9),
    ),
}
