"""The key layouts of transformer checkpoints: DiT, PixArt, SD3, Flux, Wan, HunyuanVideo, in
diffusers' names and in the original releases'."""

from __future__ import annotations

from ..conventions import convention_from_diffusers
from .layouts import MLP_EMBEDDER, SEQUENTIAL, Layout, MLPKeys, table, text_mlp

__all__ = ["TRANSFORMER_LAYOUTS"]

_FLUX = "huggingface/diffusers: models/transformers/transformer_flux.py"
_DIFFUSERS = "huggingface/diffusers: models/transformers/"
_FLUX_ORIGINAL = "black-forest-labs/flux: src/flux/model.py, src/flux/modules/layers.py"

TRANSFORMER_LAYOUTS = [
    # ---------------------------------------------------------------- DiT and PixArt
    Layout(
        "dit",
        "dit",
        "facebookresearch/DiT: models.py",
        (
            MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),
            table("class labels", "y_embedder.embedding_table.weight"),
        ),
        markers=("y_embedder.embedding_table.weight",),
    ),
    Layout(
        "dit_diffusers",
        "dit_diffusers",
        "huggingface/diffusers: models/transformers/dit_transformer_2d.py, models/embeddings.py",
        (
            MLPKeys("timestep", "transformer_blocks.{i}.norm1.emb.timestep_embedder."),
            table("class labels", "transformer_blocks.{i}.norm1.emb.class_embedder.embedding_table.weight"),
        ),
        convention=convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=1),
    ),
    Layout(
        "pixart_original",
        "pixart",
        "PixArt-alpha/PixArt-alpha: diffusion/model/nets/PixArt.py, PixArtMS.py",
        (
            MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),
            MLPKeys("resolution", "csize_embedder.mlp.", SEQUENTIAL),
            MLPKeys("aspect ratio", "ar_embedder.mlp.", SEQUENTIAL),
        ),
        markers=("t_block.1.weight", "y_embedder.y_proj."),
    ),
    Layout(
        "pixart",
        "pixart",
        "huggingface/diffusers: models/transformers/pixart_transformer_2d.py, models/normalization.py",
        (
            MLPKeys("timestep", "adaln_single.emb.timestep_embedder."),
            MLPKeys("resolution", "adaln_single.emb.resolution_embedder."),
            MLPKeys("aspect ratio", "adaln_single.emb.aspect_ratio_embedder."),
        ),
        markers=("caption_projection.linear_1.", "pos_embed.proj."),
    ),
    # ------------------------------------------------------------------ SD3 and Flux
    Layout(
        "sd3_original",
        "sd3",
        "Stability-AI/sd3.5: mmditx.py (the keys diffusers' convert_sd3_transformer_checkpoint_to_diffusers reads)",
        (MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL), text_mlp("y_embedder.mlp.", SEQUENTIAL)),
        markers=("joint_blocks.",),
    ),
    Layout(
        "sd3",
        "sd3",
        "huggingface/diffusers: models/transformers/transformer_sd3.py",
        (MLPKeys("timestep", "time_text_embed.timestep_embedder."), text_mlp("time_text_embed.text_embedder.")),
        markers=("pos_embed.proj.weight", "time_text_embed.text_embedder."),
        absent=("time_text_embed.guidance_embedder.",),
    ),
    Layout(
        "flux_dev",
        "flux_dev",
        _FLUX,
        (
            MLPKeys("timestep", "time_text_embed.timestep_embedder."),
            MLPKeys("guidance", "time_text_embed.guidance_embedder."),
            text_mlp("time_text_embed.text_embedder."),
        ),
        markers=("x_embedder.weight", "single_transformer_blocks.", "time_text_embed.guidance_embedder."),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "flux_schnell",
        "flux_schnell",
        _FLUX,
        (MLPKeys("timestep", "time_text_embed.timestep_embedder."), text_mlp("time_text_embed.text_embedder.")),
        markers=("x_embedder.weight", "single_transformer_blocks."),
        absent=("time_text_embed.guidance_embedder.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "flux_dev_original",
        "flux_dev",
        _FLUX_ORIGINAL,
        (
            MLPKeys("timestep", "time_in.", MLP_EMBEDDER),
            MLPKeys("guidance", "guidance_in.", MLP_EMBEDDER),
            text_mlp("vector_in.", MLP_EMBEDDER),
        ),
        markers=("double_blocks.", "guidance_in.in_layer.", "vector_in.in_layer."),
        scale=1000.0,
        in_model_dtype=True,
    ),
    Layout(
        "flux_schnell_original",
        "flux_schnell",
        _FLUX_ORIGINAL,
        (MLPKeys("timestep", "time_in.", MLP_EMBEDDER), text_mlp("vector_in.", MLP_EMBEDDER)),
        markers=("double_blocks.", "vector_in.in_layer."),
        absent=("guidance_in.",),
        scale=1000.0,
        in_model_dtype=True,
    ),
    # ------------------------------------------------------------------------ video
    Layout(
        "wan21",
        "wan21",
        "huggingface/diffusers: models/transformers/transformer_wan.py",
        (MLPKeys("timestep", "condition_embedder.time_embedder."), text_mlp("condition_embedder.text_embedder.")),
        markers=("condition_embedder.time_proj.",),
    ),
    Layout(
        "wan21_original",
        "wan21",
        "Wan-Video/Wan2.1: wan/modules/model.py (sinusoidal_embedding_1d in float64)",
        (MLPKeys("timestep", "time_embedding.", SEQUENTIAL), text_mlp("text_embedding.", SEQUENTIAL)),
        markers=("time_projection.1.", "head.modulation"),
        precise=True,
    ),
    Layout(
        "hunyuan_video",
        "hunyuan_video",
        "huggingface/diffusers: models/transformers/transformer_hunyuan_video.py",
        (
            MLPKeys("timestep", "time_text_embed.timestep_embedder."),
            MLPKeys("guidance", "time_text_embed.guidance_embedder."),
            MLPKeys("refiner", "context_embedder.time_text_embed.timestep_embedder."),
            text_mlp("time_text_embed.text_embedder."),
        ),
        markers=("context_embedder.token_refiner.",),
    ),
    Layout(
        "hunyuan_video_original",
        "hunyuan_video",
        "Tencent/HunyuanVideo: hyvideo/modules/models.py (diffusers' convert_hunyuan_video_to_diffusers.py)",
        (
            MLPKeys("timestep", "time_in.mlp.", SEQUENTIAL),
            MLPKeys("guidance", "guidance_in.mlp.", SEQUENTIAL),
            MLPKeys("refiner", "txt_in.t_embedder.mlp.", SEQUENTIAL),
            text_mlp("vector_in.", MLP_EMBEDDER),
        ),
        markers=("txt_in.individual_token_refiner.",),
    ),
    # ---------------------------------------------------- more diffusers image and video transformers
    Layout(
        "qwen_image",
        "qwen_image",
        _DIFFUSERS + "transformer_qwenimage.py (timestep.to(dtype), then Timesteps(256, scale=1000))",
        (MLPKeys("timestep", "time_text_embed.timestep_embedder."),),
        markers=("img_in.weight", "txt_norm.weight"),
        scale=1000.0,
        in_model_dtype=True,
        scale_first=False,
    ),
    Layout(
        "lumina2",
        "lumina2",
        _DIFFUSERS + "transformer_lumina2.py",
        (MLPKeys("timestep", "time_caption_embed.timestep_embedder."),),
        markers=("time_caption_embed.caption_embedder.",),
    ),
    Layout(
        "sana",
        "sana",
        _DIFFUSERS + "sana_transformer.py",
        (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
        markers=("caption_norm.weight", "time_embed.linear."),
    ),
    Layout(
        "ltx_video",
        "ltx_video",
        _DIFFUSERS + "transformer_ltx.py",
        (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
        markers=("proj_in.weight", "time_embed.linear.", "caption_projection.linear_1."),
        absent=("audio_time_embed.",),
    ),
    Layout(
        "cogview4",
        "cogview4",
        _DIFFUSERS + "transformer_cogview4.py",
        (
            MLPKeys("timestep", "time_condition_embed.timestep_embedder."),
            MLPKeys(
                "size", "time_condition_embed.condition_embedder.", fed="sizes and crop coordinates through a sinusoid"
            ),
        ),
    ),
    Layout(
        "auraflow",
        "auraflow",
        _DIFFUSERS + "auraflow_transformer_2d.py (Timesteps(256, scale=1000) fed t / 1000)",
        (MLPKeys("timestep", "time_step_proj."),),
        markers=("register_tokens",),
        scale=1000.0,
    ),
    Layout(
        "mochi",
        "mochi",
        _DIFFUSERS + "transformer_mochi.py",
        (MLPKeys("timestep", "time_embed.timestep_embedder."),),
        markers=("time_embed.pooler.",),
    ),
    # SkyReels-V2's keys are Wan's; its SkyReelsV2Timesteps forms the sinusoid in float64 (picked by class only)
    Layout(
        "skyreels_v2",
        "skyreels_v2",
        _DIFFUSERS + "transformer_skyreels_v2.py (get_1d_sincos_pos_embed_from_grid in float64)",
        (MLPKeys("timestep", "condition_embedder.time_embedder."), text_mlp("condition_embedder.text_embedder.")),
        precise=True,
        auto=False,
    ),
]
