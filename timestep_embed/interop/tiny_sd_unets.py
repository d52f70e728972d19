"""Tiny models of the diffusers UNets built on Stable Diffusion's (ControlNet, the 3-D and motion UNets,
SVD, ControlNet-XS) and of Kandinsky 3, for the coverage report; the sizes follow diffusers' own
model tests."""

from __future__ import annotations

import torch

from .tiny_spec import B, Tiny, randn

__all__ = ["ZOO_UNETS"]

_SD = dict(
    block_out_channels=(8, 16),
    norm_num_groups=4,
    cross_attention_dim=8,
    attention_head_dim=2,
    in_channels=4,
    layers_per_block=1,
    sample_size=8,
)


def _sd_inputs():
    return {"sample": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 3, 8)}


def _video_inputs(frames: int = 2, text: int = 8):
    return lambda: {"sample": randn(B, 4, frames, 8, 8), "encoder_hidden_states": randn(B, 3, text)}


ZOO_UNETS = {
    "ControlNetModel": Tiny(
        "ControlNetModel",
        dict(
            {k: v for k, v in _SD.items() if k != "sample_size"},
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            conditioning_embedding_out_channels=(4, 8),
        ),
        lambda: {**_sd_inputs(), "controlnet_cond": randn(B, 3, 16, 16)},
    ),
    "UNet3DConditionModel": Tiny(
        "UNet3DConditionModel",
        dict(
            _SD,
            down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
            up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
            out_channels=4,
            block_out_channels=(4, 8),
        ),
        _video_inputs(),
    ),
    "UNetMotionModel": Tiny(
        "UNetMotionModel",
        dict(
            block_out_channels=(16, 32),
            norm_num_groups=16,
            down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion"),
            up_block_types=("UpBlockMotion", "CrossAttnUpBlockMotion"),
            cross_attention_dim=16,
            num_attention_heads=2,
            out_channels=4,
            in_channels=4,
            layers_per_block=1,
            sample_size=8,
        ),
        lambda: {"sample": randn(B, 4, 2, 8, 8), "encoder_hidden_states": randn(B * 2, 3, 16)},
    ),
    "UNetSpatioTemporalConditionModel": Tiny(
        "UNetSpatioTemporalConditionModel",
        dict(
            block_out_channels=(32, 64),
            down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
            up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
            cross_attention_dim=32,
            num_attention_heads=8,
            out_channels=4,
            in_channels=4,
            layers_per_block=1,
            sample_size=8,
            projection_class_embeddings_input_dim=3 * 32,
            addition_time_embed_dim=32,
        ),
        lambda: {
            "sample": randn(B, 2, 4, 8, 8),
            "encoder_hidden_states": randn(B, 1, 32),
            "added_time_ids": torch.tensor([[6.0, 127.0, 0.02]] * B),
        },
        (-0.4, 0.8),  # EDM's c_noise = ln(sigma) / 4 (EulerDiscreteScheduler, timestep_type="continuous")
    ),
    "UNetControlNetXSModel": Tiny(
        "UNetControlNetXSModel",
        dict(
            sample_size=8,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            block_out_channels=(4, 8),
            cross_attention_dim=8,
            transformer_layers_per_block=1,
            num_attention_heads=2,
            norm_num_groups=4,
            upcast_attention=False,
            ctrl_block_out_channels=[2, 4],
            ctrl_num_attention_heads=4,
            ctrl_max_norm_num_groups=2,
            ctrl_conditioning_embedding_out_channels=(2, 2),
        ),
        lambda: {**_sd_inputs(), "controlnet_cond": randn(B, 3, 16, 16), "conditioning_scale": 1},
    ),
    "Kandinsky3UNet": Tiny(
        "Kandinsky3UNet",
        dict(
            in_channels=4,
            time_embedding_dim=4,
            groups=2,
            attention_head_dim=4,
            layers_per_block=3,
            block_out_channels=(32, 64),
            cross_attention_dim=4,
            encoder_hid_dim=32,
        ),
        lambda: {
            "sample": randn(B, 4, 8, 8),
            "encoder_hidden_states": randn(B, 3, 32),
            "encoder_attention_mask": torch.ones(B, 3),
        },
    ),
}
