"""Tiny diffusers image and video transformers for the tests and the coverage report."""

from __future__ import annotations

import torch

from .tiny_spec import FLOW, B, Tiny, randn

__all__ = ["DITS", "SD3_CONFIG"]


def _flux_inputs(guidance: bool):
    def make():
        inputs = {
            "hidden_states": randn(B, 16, 4),
            "encoder_hidden_states": randn(B, 3, 16),
            "pooled_projections": randn(B, 8),
            "img_ids": torch.zeros(16, 3),
            "txt_ids": torch.zeros(3, 3),
        }
        if guidance:
            inputs["guidance"] = torch.full((B,), 3.5)  # the pipeline's guidance_scale; the model multiplies by 1000
        return inputs

    return make


def _flux(guidance: bool) -> Tiny:
    config = dict(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=16,
        pooled_projection_dim=8,
        guidance_embeds=guidance,
        axes_dims_rope=(4, 6, 6),
    )
    return Tiny("FluxTransformer2DModel", config, _flux_inputs(guidance), tuple(t / 1000 for t in FLOW))


# SD3's and its ControlNet's (tiny_flux_like)
SD3_CONFIG = dict(
    sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=2,
    joint_attention_dim=16, caption_projection_dim=16, pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16,
)  # fmt: skip

DITS = {
    "dit": Tiny(
        "DiTTransformer2DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            num_layers=1,
            sample_size=8,
            patch_size=2,
            norm_num_groups=4,
        ),
        lambda: {"hidden_states": randn(B, 4, 8, 8), "class_labels": torch.tensor([1, 2])},
    ),
    "pixart": Tiny(
        "PixArtTransformer2DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=8,
            num_layers=1,
            sample_size=8,
            patch_size=2,
            cross_attention_dim=16,
            caption_channels=16,
            norm_num_groups=4,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 8, 8),
            "encoder_hidden_states": randn(B, 3, 16),
            "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
        },
    ),
    "sd3": Tiny(
        "SD3Transformer2DModel",
        SD3_CONFIG,
        lambda: {
            "hidden_states": randn(B, 4, 8, 8),
            "encoder_hidden_states": randn(B, 3, 16),
            "pooled_projections": randn(B, 8),
        },
        FLOW,
    ),
    "flux_dev": _flux(True),  # Flux's pipeline passes timestep / 1000
    "flux_schnell": _flux(False),
    "wan": Tiny(
        "WanTransformer3DModel",
        dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            text_dim=16,
            freq_dim=32,
            ffn_dim=32,
            num_layers=1,
            rope_max_seq_len=32,
        ),
        lambda: {"hidden_states": randn(B, 4, 2, 8, 8), "encoder_hidden_states": randn(B, 3, 16)},
        FLOW,
    ),
    "hunyuan_video": Tiny(
        "HunyuanVideoTransformer3DModel",
        dict(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=1,
            num_single_layers=1,
            num_refiner_layers=1,
            patch_size=2,
            patch_size_t=1,
            guidance_embeds=True,
            text_embed_dim=16,
            pooled_projection_dim=8,
            rope_axes_dim=(2, 2, 4),
        ),
        lambda: {
            "hidden_states": randn(B, 4, 1, 8, 8),
            "encoder_hidden_states": randn(B, 3, 16),
            "encoder_attention_mask": torch.ones(B, 3),
            "pooled_projections": randn(B, 8),
            "guidance": torch.full((B,), 6000.0),
        },
        FLOW,
    ),
}
