"""Tiny random-weight diffusers models of the classes the interop is tested on (nothing is downloaded).

``build(name)`` builds one (seeded, eval mode) and returns ``(model, inputs, timesteps)``: the keyword
arguments of its forward other than the timestep, and what its pipeline feeds as ``timestep``
(integer steps, flow-matching sigma * 1000, or Flux's sigma in [0, 1]). ``run(model, inputs, t)``
returns the output tensor. diffusers is imported lazily; the sizes are the smallest each config allows.
"""

from __future__ import annotations

import torch

from .patch import require_diffusers

__all__ = ["TINY", "build", "run"]
B = 2


def _d():
    return require_diffusers()


def _unet2d(**extra):
    return _d().UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        block_out_channels=(8, 16),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D",) * 2,
        up_block_types=("UpBlock2D",) * 2,
        **extra,
    )


def _unet2d_condition(**extra):
    return _d().UNet2DConditionModel(
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
        **extra,
    )


def _build(name: str):
    torch.manual_seed(0)
    steps = torch.tensor([3, 917])
    flow = torch.tensor([127.5, 981.25])  # sigma * 1000 from FlowMatchEulerDiscreteScheduler
    if name == "ddpm":  # google/ddpm-cifar10-32 style: [sin | cos], shift 1
        return _unet2d(flip_sin_to_cos=False, freq_shift=1), {"sample": torch.randn(B, 1, 8, 8)}, steps
    if name == "unet2d_fourier":
        return _unet2d(time_embedding_type="fourier"), {"sample": torch.randn(B, 1, 8, 8)}, torch.tensor([0.01, 40.0])
    if name == "unet2d_learned":
        return (
            _unet2d(time_embedding_type="learned", num_train_timesteps=1000),
            {"sample": torch.randn(B, 1, 8, 8)},
            steps,
        )
    if name == "stable_diffusion":
        return (
            _unet2d_condition(),
            {"sample": torch.randn(B, 4, 8, 8), "encoder_hidden_states": torch.randn(B, 3, 8)},
            steps,
        )
    if name == "sdxl":
        model = _unet2d_condition(
            addition_embed_type="text_time", addition_time_embed_dim=8, projection_class_embeddings_input_dim=6 * 8 + 8
        )
        cond = {"text_embeds": torch.randn(B, 8), "time_ids": torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024]] * B)}
        inputs = {
            "sample": torch.randn(B, 4, 8, 8),
            "encoder_hidden_states": torch.randn(B, 3, 8),
            "added_cond_kwargs": cond,
        }
        return model, inputs, steps
    if name == "unet1d":  # the value-function UNet of Janner et al.'s diffuser: positional, shift 1
        model = _d().UNet1DModel(
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
        )
        return model, {"sample": torch.randn(B, 14, 16)}, steps
    if name == "unet1d_fourier":  # Dance Diffusion: Fourier features of the noise level, no MLP
        model = _d().UNet1DModel(
            sample_size=16,
            in_channels=2,
            out_channels=2,
            block_out_channels=(32, 32, 64),
            time_embedding_dim=16,
            extra_in_channels=16,
        )
        return model, {"sample": torch.randn(B, 2, 64)}, torch.tensor([0.05, 0.9])
    if name == "dit":
        model = _d().DiTTransformer2DModel(
            num_attention_heads=2,
            attention_head_dim=8,
            in_channels=4,
            num_layers=1,
            sample_size=8,
            patch_size=2,
            norm_num_groups=4,
        )
        return model, {"hidden_states": torch.randn(B, 4, 8, 8), "class_labels": torch.tensor([1, 2])}, steps
    if name == "pixart":
        model = _d().PixArtTransformer2DModel(
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
        )
        inputs = {
            "hidden_states": torch.randn(B, 4, 8, 8),
            "encoder_hidden_states": torch.randn(B, 3, 16),
            "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
        }
        return model, inputs, steps
    if name == "sd3":
        model = _d().SD3Transformer2DModel(
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
        )
        inputs = {
            "hidden_states": torch.randn(B, 4, 8, 8),
            "encoder_hidden_states": torch.randn(B, 3, 16),
            "pooled_projections": torch.randn(B, 8),
        }
        return model, inputs, flow
    if name in ("flux_dev", "flux_schnell"):
        model = _d().FluxTransformer2DModel(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=16,
            pooled_projection_dim=8,
            guidance_embeds=name == "flux_dev",
            axes_dims_rope=(4, 6, 6),
        )
        inputs = {
            "hidden_states": torch.randn(B, 16, 4),
            "encoder_hidden_states": torch.randn(B, 3, 16),
            "pooled_projections": torch.randn(B, 8),
            "img_ids": torch.zeros(16, 3),
            "txt_ids": torch.zeros(3, 3),
        }
        if name == "flux_dev":
            inputs["guidance"] = torch.full((B,), 3.5)  # the pipeline's guidance_scale; the model multiplies by 1000
        return model, inputs, flow / 1000  # Flux's pipeline passes timestep / 1000
    if name == "wan":
        model = _d().WanTransformer3DModel(
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
        )
        return (
            model,
            {"hidden_states": torch.randn(B, 4, 2, 8, 8), "encoder_hidden_states": torch.randn(B, 3, 16)},
            flow,
        )
    if name == "hunyuan_video":
        model = _d().HunyuanVideoTransformer3DModel(
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
        )
        inputs = {
            "hidden_states": torch.randn(B, 4, 1, 8, 8),
            "encoder_hidden_states": torch.randn(B, 3, 16),
            "encoder_attention_mask": torch.ones(B, 3),
            "pooled_projections": torch.randn(B, 8),
            "guidance": torch.full((B,), 6000.0),
        }
        return model, inputs, flow
    raise KeyError(name)


def build(name: str):
    """``(model in eval mode, inputs without the timestep, the timesteps its pipeline feeds)``."""
    if name not in TINY:
        raise ValueError(f"no tiny model {name!r}; known: {', '.join(TINY)}")
    model, inputs, timesteps = _build(name)
    return model.eval(), inputs, timesteps


def run(model, inputs, timestep) -> torch.Tensor:
    """The model's output tensor for ``timestep`` (no gradients)."""
    with torch.no_grad():
        out = model(**inputs, timestep=timestep)
    return out[0] if isinstance(out, tuple) else out.sample


TINY = ("ddpm", "unet2d_fourier", "unet2d_learned", "stable_diffusion", "sdxl", "unet1d", "unet1d_fourier", "dit",
        "pixart", "sd3", "flux_dev", "flux_schnell", "wan", "hunyuan_video")  # fmt: skip
