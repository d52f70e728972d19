"""The key layouts of the diffusers transformers built on Wan's, HunyuanVideo's and LTX's time paths
and of the newer ones with their own names: AnyFlow, Helios, JoyImage, HunyuanVideo 1.5, LTX-2,
Motif-Video, ERNIE-Image, Cosmos 3 Omni, MiniMax-H3, HunyuanImage 2.1. Where a model keeps a parent's keys and its
time path (ChronoEdit, Wan-Animate: Wan's; Framepack: HunyuanVideo's), the
parent's layout loads it; Lumina-Next, SANA-Video, GLM-Image and NucleusMoE-Image, whose keys are
Lumina 2's, SANA's, CogView 4's and Qwen-Image's, are told apart by their other modules."""

from __future__ import annotations

from ..conventions import convention_from_diffusers
from .layouts import Layout, MLPKeys, text_mlp

__all__ = ["DERIVED_LAYOUTS"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"
_WAN_TEXT = text_mlp("condition_embedder.text_embedder.")

DERIVED_LAYOUTS = [
    Layout(
        "anyflow",
        "anyflow",
        _DIFFUSERS + "transformer_anyflow.py",
        (
            MLPKeys("timestep", "condition_embedder.time_embedder."),
            MLPKeys("delta", "condition_embedder.delta_embedder."),
            _WAN_TEXT,
        ),
        markers=("condition_embedder.time_proj.", "condition_embedder.delta_embedder."),
    ),
    Layout(
        "helios",
        "helios",
        _DIFFUSERS + "transformer_helios.py",
        (MLPKeys("timestep", "condition_embedder.time_embedder."), _WAN_TEXT),
        markers=("condition_embedder.time_proj.", "patch_long."),
    ),
    Layout(
        "joyimage",
        "joyimage",
        _DIFFUSERS + "transformer_joyimage.py, transformer_joyimage_edit_plus.py",
        (MLPKeys("timestep", "condition_embedder.time_embedder."), _WAN_TEXT),
        markers=("condition_embedder.time_proj.", "img_in."),
    ),
    Layout(
        "hunyuan_video15",
        "hunyuan_video15",
        _DIFFUSERS + "transformer_hunyuan_video15.py",
        (
            MLPKeys("timestep", "time_embed.timestep_embedder."),
            MLPKeys("refiner", "context_embedder.time_text_embed.timestep_embedder."),
            text_mlp("context_embedder.time_text_embed.text_embedder."),
        ),
        markers=("context_embedder_2.",),
    ),
    Layout(
        "ltx2",
        "ltx2",
        _DIFFUSERS + "transformer_ltx2.py",
        (
            MLPKeys("timestep", "time_embed.emb.timestep_embedder."),
            MLPKeys("audio", "audio_time_embed.emb.timestep_embedder."),
            MLPKeys("video cross attention", "av_cross_attn_video_scale_shift.emb.timestep_embedder."),
            MLPKeys("audio cross attention", "av_cross_attn_audio_scale_shift.emb.timestep_embedder."),
        ),
        markers=("audio_time_embed.",),
    ),
    Layout(
        "motif_video",
        "motif_video",
        _DIFFUSERS + "transformer_motif_video.py",
        (MLPKeys("timestep", "time_text_embed.timestep_embedder."),),
        markers=("image_embedder.norm_in.", "x_embedder.proj."),
    ),
    Layout(
        "ernie_image",
        "ernie_image",
        _DIFFUSERS + "transformer_ernie_image.py (Timesteps(flip_sin_to_cos=False): [sin | cos])",
        (MLPKeys("timestep", "time_embedding."),),
        markers=("adaLN_modulation.1.", "final_linear."),
        convention=convention_from_diffusers(flip_sin_to_cos=False, downscale_freq_shift=0),
    ),
    Layout(
        "cosmos3",
        "cosmos3",
        _DIFFUSERS + "transformer_cosmos3.py (timesteps * timestep_scale, 0.001, before the sinusoid)",
        (MLPKeys("timestep", "time_embedder."),),
        markers=("embed_tokens.", "norm_moe_gen."),
        scale=0.001,
        scale_first=True,
    ),
    Layout(
        "minimax_h3",
        "minimax_h3",
        _DIFFUSERS + "transformer_minimax_h3.py",
        (MLPKeys("timestep", "time_embedder."),),
        markers=("audio_proj_in.", "context_embedder."),
    ),
    Layout(
        "lumina_next",
        "lumina_next",
        _DIFFUSERS + "lumina_nextdit2d.py",
        (MLPKeys("timestep", "time_caption_embed.timestep_embedder."),),
        markers=("time_caption_embed.caption_embedder.", "pad_token"),
    ),
    Layout(
        "sana_video",
        "sana_video",
        _DIFFUSERS + "transformer_sana_video.py",
        (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
        markers=("caption_norm.weight", "time_embed.linear.", "patch_embedding."),
    ),
    Layout(
        "glm_image",
        "glm_image",
        _DIFFUSERS + "transformer_glm_image.py",
        (
            MLPKeys("timestep", "time_condition_embed.timestep_embedder."),
            MLPKeys(
                "size", "time_condition_embed.condition_embedder.", fed="sizes and crop coordinates through a sinusoid"
            ),
        ),
        markers=("glyph_projector.",),
    ),
    Layout(
        "nucleus_moe",
        "nucleus_moe",
        _DIFFUSERS + "transformer_nucleusmoe_image.py (timestep.to(dtype), then Timesteps(scale=1000))",
        (MLPKeys("timestep", "time_text_embed.timestep_embedder."),),
        markers=("img_in.weight", "txt_norm.weight", "time_text_embed.norm."),
        scale=1000.0,
        in_model_dtype=True,
        scale_first=False,
    ),
    Layout(
        "hunyuan_image",
        "hunyuan_image",
        _DIFFUSERS + "transformer_hunyuanimage.py",
        (
            MLPKeys("timestep", "time_guidance_embed.timestep_embedder."),
            MLPKeys("guidance", "time_guidance_embed.guidance_embedder."),
            MLPKeys("meanflow", "time_guidance_embed.timestep_embedder_r."),
            MLPKeys("refiner", "context_embedder.time_text_embed.timestep_embedder."),
        ),
        markers=("context_embedder.time_text_embed.",),
    ),
]
