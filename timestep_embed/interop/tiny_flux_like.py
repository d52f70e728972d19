"""Tiny models of the transformers built on Flux's (Chroma, FLUX.2, FLUX.3, LongCat-Image, Ovis-Image, the Flux
and SD3 ControlNets) and of CogView 3 Plus, Hunyuan-DiT, Cosmos and HiDream-I1, for the coverage
report; the sizes follow diffusers' own model tests."""

from __future__ import annotations

import torch

from .tiny_dits import SD3_CONFIG
from .tiny_spec import FLOW, SIGMA, B, Tiny, randn

__all__ = ["FLUX_LIKE"]


def _flux_like(extra: dict | None = None, pooled: int | None = None, ids: int = 3):
    def make():
        inputs = {
            "hidden_states": randn(B, 16, 4),
            "encoder_hidden_states": randn(B, 8, 32),
            "img_ids": torch.zeros(16, ids),
            "txt_ids": torch.zeros(8, ids),
        }
        if pooled:
            inputs["pooled_projections"] = randn(B, pooled)
        return {**inputs, **(extra or {})}

    return make


_FLUX_CONFIG = dict(
    patch_size=1,
    in_channels=4,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=32,
    axes_dims_rope=(4, 4, 8),
)

FLUX_LIKE = dict(
    {
        "ChromaTransformer2DModel": Tiny(
            "ChromaTransformer2DModel",
            dict(_FLUX_CONFIG, approximator_num_channels=8, approximator_hidden_dim=16, approximator_layers=1),
            _flux_like(),
            SIGMA,  # ChromaPipeline passes timestep / 1000; the model multiplies by 1000
        ),
        "Flux2Transformer2DModel": Tiny(
            "Flux2Transformer2DModel",
            dict(_FLUX_CONFIG, axes_dims_rope=(4, 4, 4, 4), timestep_guidance_channels=256),
            _flux_like({"guidance": torch.full((B,), 4.0)}, ids=4),
            SIGMA,  # Flux2Pipeline passes timestep / 1000; the model multiplies by 1000
        ),
        "Flux3Transformer2DModel": Tiny(  # no test config in diffusers: the smallest its __init__ takes
            "Flux3Transformer2DModel",
            dict(
                in_channels=4,
                cond_in_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=16,
                num_attention_heads=2,
                joint_attention_dim=32,
                timestep_channels=32,
                axes_dims_rope=(4, 4, 4, 4),
            ),
            _flux_like(ids=4),
            SIGMA,  # its forward documents a flow timestep in [0, 1] and multiplies by 1000
        ),
        "LongCatImageTransformer2DModel": Tiny(
            "LongCatImageTransformer2DModel",
            dict(_FLUX_CONFIG, pooled_projection_dim=32),
            _flux_like(),
            SIGMA,
        ),
        "OvisImageTransformer2DModel": Tiny(
            "OvisImageTransformer2DModel", dict(_FLUX_CONFIG, out_channels=4), _flux_like(), SIGMA
        ),
        "FluxControlNetModel": Tiny(
            "FluxControlNetModel",
            dict(_FLUX_CONFIG, pooled_projection_dim=8),
            _flux_like({"controlnet_cond": randn(B, 16, 4)}, pooled=8),
            SIGMA,
        ),
        "CogView3PlusTransformer2DModel": Tiny(
            "CogView3PlusTransformer2DModel",
            dict(
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=4,
                num_attention_heads=2,
                out_channels=4,
                text_embed_dim=8,
                time_embed_dim=8,
                condition_dim=2,
                pos_embed_max_size=8,
                sample_size=8,
            ),
            lambda: {
                "hidden_states": randn(B, 4, 8, 8),
                "encoder_hidden_states": randn(B, 8, 8),
                "original_size": torch.tensor([[64, 64]] * B),
                "target_size": torch.tensor([[64, 64]] * B),
                "crop_coords": torch.tensor([[0, 0]] * B),
            },
        ),
        "SD3ControlNetModel": Tiny(
            "SD3ControlNetModel",
            SD3_CONFIG,
            lambda: {
                "hidden_states": randn(B, 4, 8, 8),
                "controlnet_cond": randn(B, 4, 8, 8),
                "encoder_hidden_states": randn(B, 3, 16),
                "pooled_projections": randn(B, 8),
            },
            FLOW,
        ),
        "HunyuanDiT2DModel": Tiny(
            "HunyuanDiT2DModel",
            dict(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                cross_attention_dim=8,
                cross_attention_dim_t5=8,
                pooled_projection_dim=4,
                hidden_size=16,
                text_len=4,
                text_len_t5=4,
                activation_fn="gelu-approximate",
            ),
            lambda: {
                "hidden_states": randn(B, 4, 8, 8),
                "encoder_hidden_states": randn(B, 4, 8),
                "text_embedding_mask": torch.ones(B, 4),
                "encoder_hidden_states_t5": randn(B, 4, 8),
                "text_embedding_mask_t5": torch.ones(B, 4),
                "image_meta_size": torch.tensor([[1024.0, 1024, 16, 16, 0, 0]] * B),
                "style": torch.zeros(B, dtype=torch.long),
                "image_rotary_emb": [torch.ones(16, 8), torch.zeros(16, 8)],
            },
            (3.0, 917.0),  # HunyuanDiTPipeline passes t_expand in the latents' dtype
        ),
        "CosmosTransformer3DModel": Tiny(
            "CosmosTransformer3DModel",
            dict(
                in_channels=4,
                out_channels=4,
                num_attention_heads=2,
                attention_head_dim=12,
                num_layers=1,
                mlp_ratio=2,
                text_embed_dim=16,
                adaln_lora_dim=4,
                max_size=(4, 32, 32),
                patch_size=(1, 2, 2),
                rope_scale=(2.0, 1.0, 1.0),
                concat_padding_mask=True,
                extra_pos_embed_type="learnable",
            ),
            lambda: {
                "hidden_states": randn(B, 4, 1, 8, 8),
                "encoder_hidden_states": randn(B, 12, 16),
                "attention_mask": torch.ones(B, 12),
                "fps": 30,
                "padding_mask": torch.zeros(B, 1, 8, 8),
            },
            (0.3, 1.2),  # Cosmos' EDM-style c_noise (its pipelines pass a noise level, not a step)
        ),
        "HiDreamImageTransformer2DModel": Tiny(
            "HiDreamImageTransformer2DModel",
            dict(
                patch_size=2,
                in_channels=4,
                out_channels=4,
                num_layers=1,
                num_single_layers=1,
                attention_head_dim=8,
                num_attention_heads=4,
                caption_channels=[8, 4],
                text_emb_dim=8,
                num_routed_experts=2,
                num_activated_experts=2,
                axes_dims_rope=(4, 2, 2),
                max_resolution=(32, 32),
                llama_layers=(0, 1),
                force_inference_output=True,
            ),
            lambda: {
                "hidden_states": randn(B, 4, 8, 8),
                "encoder_hidden_states_t5": randn(B, 8, 8),
                "encoder_hidden_states_llama3": randn(2, B, 8, 4),
                "pooled_embeds": randn(B, 8),
            },
            FLOW,
            "timesteps",
        ),
    }
)
