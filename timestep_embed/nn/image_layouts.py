"""The key layouts of the image transformers diffusers ports after Flux: FLUX.2 (and its original
release), FLUX.3, LongCat-Image, Ovis-Image, HiDream-I1, CogView 3 Plus, Hunyuan-DiT (and its original),
Z-Image, BRIA 3.2, BRIA-FIBO, OmniGen."""

from __future__ import annotations

from .layouts import MLP_EMBEDDER, SEQUENTIAL, Layout, MLPKeys, text_mlp

__all__ = ["IMAGE_LAYOUTS"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"

IMAGE_LAYOUTS = [
    Layout(
        "flux2",
        "flux2",
        _DIFFUSERS + "transformer_flux2.py (timestep.to(dtype) * 1000; no biases in the released config)",
        (
            MLPKeys("timestep", "time_guidance_embed.timestep_embedder."),
            MLPKeys("guidance", "time_guidance_embed.guidance_embedder."),
        ),
        markers=("double_stream_modulation_img.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "flux2_original",
        "flux2",
        "black-forest-labs/flux2 (the keys diffusers' convert_flux2_transformer_checkpoint_to_diffusers reads)",
        (MLPKeys("timestep", "time_in.", MLP_EMBEDDER), MLPKeys("guidance", "guidance_in.", MLP_EMBEDDER)),
        markers=("single_stream_modulation.lin.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "flux3",
        None,  # no pipeline in diffusers yet to read a contract from
        _DIFFUSERS + "transformer_flux3.py (timestep.to(dtype) * 1000; the text and reference tokens at 0)",
        (
            MLPKeys("timestep", "timestep_embedder."),
            MLPKeys("target timestep", "target_timestep_embedder."),  # flow-map (step-distilled) configs only
        ),
        markers=("early_stream_modulations.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    # LongCat-Image and BRIA 3.2 have the same keys (the model gets sigma in one, sigma * 1000 in the other):
    # a state dict alone is ambiguous, a folder's config.json names the class
    Layout(
        "longcat_image",
        "longcat_image",
        _DIFFUSERS + "transformer_longcat_image.py (timestep.to(dtype) * 1000)",
        (MLPKeys("timestep", "time_embed.timestep_embedder."),),
        markers=("single_transformer_blocks.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "ovis_image",
        "ovis_image",
        _DIFFUSERS + "transformer_ovis_image.py (timestep.to(dtype) * 1000)",
        (MLPKeys("timestep", "timestep_embedder."),),
        markers=("context_embedder_norm.weight", "single_transformer_blocks."),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "hidream",
        "hidream",
        _DIFFUSERS + "transformer_hidream_image.py",
        (MLPKeys("timestep", "t_embedder.timestep_embedder."), text_mlp("p_embedder.pooled_embedder.")),
    ),
    # CogView 3 Plus keeps CogView 4's keys (integer steps where CogView 4 gets sigma * 1000): by family only
    Layout(
        "cogview3plus",
        "cogview3plus",
        _DIFFUSERS + "transformer_cogview3plus.py",
        (
            MLPKeys("timestep", "time_condition_embed.timestep_embedder."),
            MLPKeys(
                "size", "time_condition_embed.condition_embedder.", fed="sizes and crop coordinates through a sinusoid"
            ),
        ),
        auto=False,
    ),
    Layout(
        "hunyuan_dit",
        "hunyuan_dit",
        _DIFFUSERS + "hunyuan_transformer_2d.py",
        (
            MLPKeys("timestep", "time_extra_emb.timestep_embedder."),
            MLPKeys("size", "time_extra_emb.extra_embedder.", fed="the pooled text, image sizes and style"),
            text_mlp("text_embedder."),
        ),
    ),
    Layout(
        "hunyuan_dit_original",
        "hunyuan_dit",
        "Tencent/HunyuanDiT: hydit/modules/models.py (diffusers' scripts/convert_hunyuandit_to_diffusers.py)",
        (
            MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),
            MLPKeys("size", "extra_embedder.", SEQUENTIAL, fed="the pooled text, image sizes and style"),
            text_mlp("mlp_t5.", SEQUENTIAL),
        ),
        markers=("mlp_t5.0.weight",),
    ),
    Layout(
        "bria",
        "bria",
        _DIFFUSERS + "transformer_bria.py (timestep.to(dtype); BriaTimesteps, max_period = time_theta)",
        (MLPKeys("timestep", "time_embed.timestep_embedder."),),
        markers=("single_transformer_blocks.",),
        in_model_dtype=True,
    ),
    Layout(
        "bria_fibo",
        "bria_fibo",
        _DIFFUSERS + "transformer_bria_fibo.py (timestep.to(dtype); BriaFiboTimesteps)",
        (MLPKeys("timestep", "time_embed.timestep_embedder."),),
        markers=("single_transformer_blocks.", "caption_projection.0.linear."),
        in_model_dtype=True,
    ),
    Layout(
        "z_image",
        "z_image",
        _DIFFUSERS + "transformer_z_image.py (DiT's TimestepEmbedder fed t * t_scale, 1000)",
        (MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),),
        markers=("cap_embedder.", "all_x_embedder."),
        scale=1000.0,
        scale_first=True,
    ),
    Layout(
        "omnigen",
        "omnigen",
        _DIFFUSERS + "transformer_omnigen.py",
        (MLPKeys("timestep", "t_embedder."), MLPKeys("time token", "time_token.")),
        markers=("time_token.linear_1.", "patch_embedding.input_image_proj."),
    ),
]
