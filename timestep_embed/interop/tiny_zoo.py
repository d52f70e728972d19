"""Tiny models of more diffusers classes, for the coverage report (`timestep_embed.interop.coverage`):
UNets built on Stable Diffusion's and the image and video transformers of the installed diffusers.
The sizes follow the smallest configurations diffusers' own model tests use."""

from __future__ import annotations

import torch

from .tiny_spec import FLOW, SIGMA, STEPS, B, Tiny, randn

__all__ = ["ZOO_UNETS", "ZOO_TRANSFORMERS"]

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

ZOO_TRANSFORMERS = {
    "QwenImageTransformer2DModel": Tiny(
        "QwenImageTransformer2DModel",
        dict(
            patch_size=2,
            in_channels=16,
            out_channels=4,
            num_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=16,
            axes_dims_rope=(8, 4, 4),
        ),
        lambda: {
            "hidden_states": randn(B, 16, 16),
            "encoder_hidden_states": randn(B, 8, 16),
            "encoder_hidden_states_mask": torch.ones(B, 8, dtype=torch.long),
            "img_shapes": [(1, 4, 4)] * B,
        },
        SIGMA,  # QwenImagePipeline passes timestep / 1000; the model's Timesteps has scale=1000
    ),
    "Lumina2Transformer2DModel": Tiny(
        "Lumina2Transformer2DModel",
        dict(
            sample_size=16,
            patch_size=2,
            in_channels=4,
            hidden_size=24,
            num_layers=1,
            num_refiner_layers=1,
            num_attention_heads=3,
            num_kv_heads=1,
            multiple_of=2,
            axes_dim_rope=(4, 2, 2),
            axes_lens=(128, 128, 128),
            cap_feat_dim=32,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 16, 16),
            "encoder_hidden_states": randn(B, 16, 32),
            "encoder_attention_mask": torch.ones(B, 16, dtype=torch.bool),
        },
        tuple(1 - t for t in SIGMA),  # Lumina2Pipeline passes 1 - t / 1000
    ),
    "SanaTransformer2DModel": Tiny(
        "SanaTransformer2DModel",
        dict(
            patch_size=1,
            in_channels=4,
            out_channels=4,
            num_layers=1,
            attention_head_dim=4,
            num_attention_heads=2,
            num_cross_attention_heads=2,
            cross_attention_head_dim=4,
            cross_attention_dim=8,
            caption_channels=8,
            sample_size=8,
        ),
        lambda: {"hidden_states": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 8, 8)},
        FLOW,  # SanaPipeline passes t * timestep_scale (1.0)
    ),
    "CogView4Transformer2DModel": Tiny(
        "CogView4Transformer2DModel",
        dict(
            patch_size=2,
            in_channels=4,
            num_layers=1,
            attention_head_dim=4,
            num_attention_heads=4,
            out_channels=4,
            text_embed_dim=8,
            time_embed_dim=8,
            condition_dim=4,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 8, 8),
            "encoder_hidden_states": randn(B, 8, 8),
            "original_size": torch.tensor([[64, 64]] * B),
            "target_size": torch.tensor([[64, 64]] * B),
            "crop_coords": torch.tensor([[0, 0]] * B),
        },
        FLOW,
    ),
    "AuraFlowTransformer2DModel": Tiny(
        "AuraFlowTransformer2DModel",
        dict(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_mmdit_layers=1,
            num_single_dit_layers=1,
            attention_head_dim=8,
            num_attention_heads=4,
            caption_projection_dim=32,
            joint_attention_dim=32,
            out_channels=4,
            pos_embed_max_size=64,
        ),
        lambda: {"hidden_states": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 8, 32)},
        SIGMA,  # AuraFlowPipeline passes t / 1000; its Timesteps has scale=1000
    ),
    "AllegroTransformer3DModel": Tiny(
        "AllegroTransformer3DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            num_layers=1,
            cross_attention_dim=16,
            sample_width=8,
            sample_height=8,
            sample_frames=8,
            caption_channels=8,
        ),
        lambda: {"hidden_states": randn(B, 4, 2, 8, 8), "encoder_hidden_states": randn(B, 16, 8)},
        STEPS,
    ),
    "CogVideoXTransformer3DModel": Tiny(
        "CogVideoXTransformer3DModel",
        dict(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            time_embed_dim=2,
            text_embed_dim=8,
            num_layers=1,
            sample_width=8,
            sample_height=8,
            sample_frames=8,
            patch_size=2,
            temporal_compression_ratio=4,
            max_text_seq_length=8,
        ),
        lambda: {"hidden_states": randn(B, 1, 4, 8, 8), "encoder_hidden_states": randn(B, 8, 8)},
        STEPS,
    ),
    "MochiTransformer3DModel": Tiny(
        "MochiTransformer3DModel",
        dict(
            patch_size=2,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=1,
            pooled_projection_dim=16,
            in_channels=4,
            text_embed_dim=16,
            time_embed_dim=4,
            max_sequence_length=16,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 2, 8, 8),
            "encoder_hidden_states": randn(B, 16, 16),
            "encoder_attention_mask": torch.ones(B, 16, dtype=torch.bool),
        },
        tuple(1000 - t for t in FLOW),  # MochiPipeline passes 1000 - t (its model counts from noise)
    ),
    "LTXVideoTransformer3DModel": Tiny(
        "LTXVideoTransformer3DModel",
        dict(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=8,
            cross_attention_dim=16,
            num_layers=1,
            caption_channels=16,
        ),
        lambda: {
            "hidden_states": randn(B, 2 * 8 * 8, 4),
            "encoder_hidden_states": randn(B, 16, 16),
            "encoder_attention_mask": torch.ones(B, 16).bool(),
            "num_frames": 2,
            "height": 8,
            "width": 8,
        },
        FLOW,
    ),
    "LatteTransformer3DModel": Tiny(
        "LatteTransformer3DModel",
        dict(
            sample_size=8,
            num_layers=1,
            patch_size=2,
            attention_head_dim=4,
            num_attention_heads=2,
            caption_channels=8,
            in_channels=4,
            cross_attention_dim=8,
            out_channels=8,
            attention_bias=True,
            activation_fn="gelu-approximate",
            num_embeds_ada_norm=1000,
            norm_type="ada_norm_single",
            norm_elementwise_affine=False,
            norm_eps=1e-6,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 1, 8, 8),
            "encoder_hidden_states": randn(B, 8, 8),
            "enable_temporal_attentions": True,
        },
        STEPS,
    ),
    "SkyReelsV2Transformer3DModel": Tiny(
        "SkyReelsV2Transformer3DModel",
        dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=4,
            out_channels=4,
            text_dim=16,
            freq_dim=32,
            ffn_dim=32,
            num_layers=1,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        ),
        lambda: {"hidden_states": randn(B, 4, 2, 8, 8), "encoder_hidden_states": randn(B, 12, 16)},
        FLOW,
    ),
    "WanVACETransformer3DModel": Tiny(
        "WanVACETransformer3DModel",
        dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            out_channels=4,
            text_dim=16,
            freq_dim=32,
            ffn_dim=32,
            num_layers=2,
            rope_max_seq_len=32,
            vace_layers=[0],
            vace_in_channels=12,
        ),
        lambda: {
            "hidden_states": randn(B, 4, 2, 8, 8),
            "encoder_hidden_states": randn(B, 3, 16),
            "control_hidden_states": randn(B, 12, 2, 8, 8),
        },
        FLOW,
    ),
}


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

ZOO_TRANSFORMERS.update(
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
            dict(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=16,
                caption_projection_dim=16,
                pooled_projection_dim=8,
                out_channels=4,
                pos_embed_max_size=16,
            ),
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
