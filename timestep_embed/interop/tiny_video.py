"""Tiny models of the diffusers video transformers built on HunyuanVideo's, LTX's, SANA's and Wan's time
paths (Framepack, HunyuanVideo 1.5, LTX-2, SANA-Video, AnyFlow-FAR, Wan-Animate 2), for the coverage
report. The configs and inputs are those of diffusers' own model tests, the batch made 2 where the
model allows; the timesteps are what each pipeline passes."""

from __future__ import annotations

import torch

from .tiny_derived import ANYFLOW_CONFIG
from .tiny_spec import FLOW, Tiny, randn

__all__ = ["VIDEO"]

VIDEO = {
    "HunyuanVideoFramepackTransformer3DModel": Tiny(
        "HunyuanVideoFramepackTransformer3DModel",
        dict(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=10,
            num_layers=1,
            num_single_layers=1,
            num_refiner_layers=1,
            patch_size=2,
            patch_size_t=1,
            guidance_embeds=True,
            text_embed_dim=16,
            pooled_projection_dim=8,
            rope_axes_dim=[2, 4, 4],
            image_condition_type=None,
            has_image_proj=True,
            image_proj_dim=16,
            has_clean_x_embedder=True,
        ),
        lambda: {
            "hidden_states": randn(2, 4, 3, 4, 4),
            "encoder_hidden_states": randn(2, 12, 16),
            "pooled_projections": randn(2, 8),
            "encoder_attention_mask": torch.ones(2, 12),
            "guidance": torch.tensor([44]),
            "image_embeds": randn(2, 12, 16),
            "indices_latents": torch.tensor([1.0, 1.0, 1.0]),
            "latents_clean": randn(2, 4, 2, 4, 4),
            "indices_latents_clean": torch.tensor([1.0, 1.0]),
            "latents_history_2x": randn(2, 4, 2, 4, 4),
            "indices_latents_history_2x": torch.tensor([1.0, 1.0]),
            "latents_history_4x": randn(2, 4, 8, 4, 4),
            "indices_latents_history_4x": torch.ones(8),
        },
        FLOW,
    ),
    "HunyuanVideo15Transformer3DModel": Tiny(
        "HunyuanVideo15Transformer3DModel",
        dict(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=2,
            num_refiner_layers=1,
            mlp_ratio=2.0,
            patch_size=1,
            patch_size_t=1,
            text_embed_dim=16,
            text_embed_2_dim=8,
            image_embed_dim=12,
            rope_axes_dim=[2, 2, 4],
            target_size=16,
            task_type="t2v",
        ),
        lambda: {
            "hidden_states": randn(2, 4, 1, 8, 8),
            "encoder_hidden_states": randn(2, 6, 16),
            "encoder_hidden_states_2": randn(2, 4, 8),
            "encoder_attention_mask": torch.ones(2, 6),
            "encoder_attention_mask_2": torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]),
            "image_embeds": torch.zeros(2, 3, 12),
        },
        FLOW,
    ),
    "LTX2VideoTransformer3DModel": Tiny(
        "LTX2VideoTransformer3DModel",
        dict(
            in_channels=4,
            out_channels=4,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=2,
            attention_head_dim=8,
            cross_attention_dim=16,
            audio_in_channels=4,
            audio_out_channels=4,
            audio_num_attention_heads=2,
            audio_attention_head_dim=4,
            audio_cross_attention_dim=8,
            num_layers=2,
            qk_norm="rms_norm_across_heads",
            caption_channels=16,
            rope_double_precision=False,
        ),
        lambda: {
            "hidden_states": randn(2, 512, 4),
            "audio_hidden_states": randn(2, 9, 4),
            "encoder_hidden_states": randn(2, 16, 16),
            "audio_encoder_hidden_states": randn(2, 16, 16),
            "encoder_attention_mask": torch.ones(2, 16, dtype=torch.bool),
            "num_frames": 2,
            "height": 16,
            "width": 16,
            "audio_num_frames": 9,
            "fps": 25.0,
        },
        FLOW,
    ),
    "SanaVideoTransformer3DModel": Tiny(
        "SanaVideoTransformer3DModel",
        dict(
            in_channels=16,
            out_channels=16,
            num_attention_heads=2,
            attention_head_dim=12,
            num_layers=2,
            num_cross_attention_heads=2,
            cross_attention_head_dim=12,
            cross_attention_dim=24,
            caption_channels=16,
            mlp_ratio=2.5,
            dropout=0.0,
            attention_bias=False,
            sample_size=8,
            patch_size=[1, 2, 2],
            norm_elementwise_affine=False,
            norm_eps=1e-06,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        ),
        lambda: {"hidden_states": randn(2, 16, 2, 16, 16), "encoder_hidden_states": randn(2, 12, 16)},
        FLOW,
    ),
    # per frame: the chunks' timesteps (the pipeline repeats t over each chunk's frames)
    "AnyFlowFARTransformer3DModel": Tiny(
        "AnyFlowFARTransformer3DModel",
        dict(ANYFLOW_CONFIG, compressed_patch_size=[1, 4, 4], full_chunk_limit=3),
        lambda: {
            "hidden_states": randn(1, 4, 4, 16, 16),
            "r_timestep": torch.tensor([[250.0, 250.0, 250.0, 250.0]]),
            "encoder_hidden_states": randn(1, 12, 16),
            "chunk_partition": [2, 2],
        },
        ((981.25, 981.25, 127.5, 127.5),),
    ),
    # the reference pass (kv_cache_mode="extract"), the one that runs from inputs alone
    "WanAnimate2Transformer3DModel": Tiny(
        "WanAnimate2Transformer3DModel",
        dict(
            patch_size=[1, 2, 2],
            text_len=16,
            in_dim=36,
            dim=128,
            ffn_dim=256,
            freq_dim=64,
            text_dim=32,
            out_dim=16,
            num_heads=4,
            num_layers=2,
            cross_attn_norm=True,
            use_img_emb=True,
        ),
        lambda: {
            "hidden_states": [randn(16, 2, 4, 4)],
            "encoder_hidden_states": [randn(8, 32)],
            "condition_latents": [randn(20, 2, 4, 4)],
            "encoder_hidden_states_image": randn(1, 4, 1280),
            "kv_cache": _kv_cache(2),
            "kv_cache_mode": "extract",
            "seq_len": 8,
            "offset_grid_sizes": torch.tensor([[2, 2, 2]]),
        },
        (FLOW[1],),
    ),
}


def _kv_cache(layers: int):
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    return WanAnimate2KVCache(layers)
