"""Tiny models of the diffusers transformers whose time path has modules of their own (Z-Image's
DiT-style ``TimestepEmbedder``, BRIA's ``BriaTimesteps``, Krea 2's, Ideogram 4's, ACE-Step's, the audio
models'), for the coverage report. Configs and inputs from diffusers' model tests, the batch made 2
where the model allows; PRX's is shrunk (its test uses hidden size 1792)."""

from __future__ import annotations

import torch

from .tiny_spec import FLOW, SIGMA, STEPS, Tiny, randn

__all__ = ["CUSTOM"]

# Z-Image's pipeline: timestep = (1000 - t) / 1000, the flow time from noise; the model multiplies by t_scale
Z_TIME = tuple((1000 - t) / 1000 for t in FLOW)

CUSTOM = {
    "ZImageTransformer2DModel": Tiny(
        "ZImageTransformer2DModel",
        dict(
            all_patch_size=[2],
            all_f_patch_size=[1],
            in_channels=16,
            dim=16,
            n_layers=1,
            n_refiner_layers=1,
            n_heads=1,
            n_kv_heads=2,
            qk_norm=True,
            cap_feat_dim=16,
            rope_theta=256.0,
            t_scale=1000.0,
            axes_dims=[8, 4, 4],
            axes_lens=[256, 32, 32],
        ),
        lambda: {"x": [randn(16, 1, 16, 16), randn(16, 1, 16, 16)], "cap_feats": [randn(16, 16), randn(16, 16)]},
        Z_TIME,
        "t",
    ),
    "BriaTransformer2DModel": Tiny(
        "BriaTransformer2DModel",
        dict(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=8,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=None,
            axes_dims_rope=[0, 4, 4],
        ),
        lambda: {
            "hidden_states": randn(2, 16, 4),
            "encoder_hidden_states": randn(2, 48, 32),
            "img_ids": randn(16, 3),
            "txt_ids": randn(48, 3),
        },
        FLOW,
    ),
    "BriaFiboTransformer2DModel": Tiny(
        "BriaFiboTransformer2DModel",
        dict(
            patch_size=1,
            in_channels=48,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=8,
            num_attention_heads=2,
            joint_attention_dim=64,
            text_encoder_dim=32,
            pooled_projection_dim=None,
            axes_dims_rope=[0, 4, 4],
        ),
        lambda: {
            "hidden_states": randn(2, 256, 48),
            "encoder_hidden_states": randn(2, 32, 64),
            "img_ids": randn(256, 3),
            "txt_ids": randn(32, 3),
            "text_encoder_layers": [randn(2, 32, 32), randn(2, 32, 32)],
        },
        FLOW,
    ),
    "PRXTransformer2DModel": Tiny(
        "PRXTransformer2DModel",
        dict(
            in_channels=16,
            patch_size=2,
            context_in_dim=32,
            hidden_size=64,
            mlp_ratio=2.0,
            num_heads=2,
            depth=1,
            axes_dim=[16, 16],
            theta=10000,
        ),
        lambda: {"hidden_states": randn(2, 16, 16, 16), "encoder_hidden_states": randn(2, 16, 32)},
        FLOW,
    ),
    "Ideogram4Transformer2DModel": Tiny(
        "Ideogram4Transformer2DModel",
        dict(
            in_channels=16,
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=4,
            intermediate_size=32,
            adaln_dim=16,
            llm_features_dim=24,
            rope_theta=10000,
            mrope_section=[2, 1, 1],
            norm_eps=1e-05,
        ),
        lambda: {
            "hidden_states": randn(1, 8, 16),
            "encoder_hidden_states": randn(1, 8, 24),
            "position_ids": torch.tensor(
                [
                    [
                        [0, 0, 0],
                        [1, 1, 1],
                        [2, 2, 2],
                        [3, 3, 3],
                        [65536, 65536, 65536],
                        [65536, 65536, 65537],
                        [65536, 65537, 65536],
                        [65536, 65537, 65537],
                    ]
                ]
            ),
            "segment_ids": torch.full((1, 8), 1, dtype=torch.long),
            "indicator": torch.tensor([[3, 3, 3, 3, 2, 2, 2, 2]]),
        },
        (SIGMA[1],),
    ),
    "Krea2Transformer2DModel": Tiny(
        "Krea2Transformer2DModel",
        dict(
            in_channels=16,
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=32,
            timestep_embed_dim=8,
            text_hidden_dim=16,
            num_text_layers=3,
            text_num_attention_heads=2,
            text_num_key_value_heads=1,
            text_intermediate_size=16,
            num_layerwise_text_blocks=1,
            num_refiner_text_blocks=1,
            axes_dims_rope=[4, 2, 2],
            rope_theta=1000.0,
            norm_eps=1e-05,
        ),
        lambda: {
            "hidden_states": randn(1, 4, 16),
            "encoder_hidden_states": randn(1, 4, 3, 16),
            "position_ids": randn(8, 3),
            "encoder_attention_mask": torch.tensor([[True, True, True, False]]),
        },
        (SIGMA[1],),
    ),
    "LongCatAudioDiTTransformer": Tiny(
        "LongCatAudioDiTTransformer",
        dict(dit_dim=64, dit_depth=2, dit_heads=4, dit_text_dim=32, latent_dim=8, text_conv=False),
        lambda: {
            "hidden_states": randn(2, 16, 8),
            "encoder_hidden_states": randn(2, 10, 32),
            "encoder_attention_mask": torch.ones(2, 10, dtype=torch.bool),
            "attention_mask": torch.ones(2, 16, dtype=torch.bool),
        },
        SIGMA,
    ),
    "AceStepTransformer1DModel": Tiny(
        "AceStepTransformer1DModel",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            in_channels=24,
            audio_acoustic_hidden_dim=8,
            patch_size=2,
            rope_theta=10000.0,
            rms_norm_eps=1e-06,
            sliding_window=16,
        ),
        lambda: {
            "hidden_states": randn(2, 8, 8),
            "timestep_r": torch.tensor(SIGMA),
            "encoder_hidden_states": randn(2, 10, 32),
            "context_latents": randn(2, 8, 16),
        },
        SIGMA,
    ),
    "MiniMaxMusic3Transformer1DModel": Tiny(
        "MiniMaxMusic3Transformer1DModel",
        dict(
            in_channels=8,
            condition_dim=16,
            num_layers=2,
            num_attention_heads=2,
            attention_head_dim=8,
            ff_inner_dim=32,
            rotary_dim=4,
            fourier_embedding_dim=8,
        ),
        lambda: {"hidden_states": randn(2, 8, 24), "encoder_hidden_states": randn(2, 24, 16)},
        SIGMA,
    ),
    "OmniGenTransformer2DModel": Tiny(
        "OmniGenTransformer2DModel",
        dict(
            hidden_size=16,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=32,
            num_layers=2,
            pad_token_id=0,
            vocab_size=1000,
            in_channels=4,
            time_step_dim=4,
            rope_scaling={"long_factor": [1, 2], "short_factor": [1, 2]},
        ),
        lambda: {
            "hidden_states": randn(2, 4, 8, 8),
            "input_ids": torch.randint(0, 10, (2, 24)),
            "input_img_latents": [randn(1, 4, 8, 8)],
            "input_image_sizes": {0: [[0, 16]]},
            "attention_mask": torch.ones(2, 41, 41),
            "position_ids": torch.randint(0, 41, (2, 41)),
        },
        SIGMA,
    ),
    "TransformerTemporalModel": Tiny(
        "TransformerTemporalModel",
        dict(num_attention_heads=8, attention_head_dim=4, in_channels=4, num_layers=1, norm_num_groups=1),
        lambda: {"hidden_states": randn(2, 4, 32, 32)},
        STEPS,
    ),
}
