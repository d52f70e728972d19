"""DiT-style families (one stream of image tokens, the time embedding through adaLN): DiT (the original
and diffusers' port), PixArt, SANA and SANA-Video, Lumina 2 and Lumina-Next, Z-Image, OmniGen."""

from __future__ import annotations

import torch

from ..conventions import convention_from_diffusers
from .schema import SEQUENTIAL, Family, Layout, MLPKeys, TimestepContract, diffusers_contract, every, over_1000, table

__all__ = ["FAMILIES"]

_DIT = (MLPKeys("timestep", "t_embedder.mlp.", SEQUENTIAL),)  # DiT's TimestepEmbedder: Sequential(Linear, SiLU, Linear)
_PORT = convention_from_diffusers(flip_sin_to_cos=True, downscale_freq_shift=1)  # diffusers' Timesteps(256, True, 1)
_LUMINA = "256 -> min(hidden, 1024) -> same, SiLU ({})"
_UNIT = "the sinusoid is fed t in [0, 1] as it is (scale 1): its high frequencies barely turn"


def _norm(kind: str):
    return lambda config: config.get("norm_type") == kind  # the legacy Transformer2DModel: DiT's or PixArt's adaLN


def _z_time(t: torch.Tensor) -> torch.Tensor:
    # ZImagePipeline: `timestep = (1000 - timestep) / 1000`, the flow time counted from noise
    return (1000 - (t if t.is_floating_point() else t.float())) / 1000


# fmt: off
# (a table: each call keeps its facts a line apiece)
DIT = Family(
    TimestepContract(
        "dit", "DiT (Peebles & Xie 2023), the original code", ("facebookresearch/DiT: models.py",),
        "integer step t in 0..999", (0, 999), "t", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU (TimestepEmbedder.mlp)",
        injection="adaLN-Zero: c = t_emb + y_emb, SiLU, Linear to 6 x hidden per block",
        extra=("class labels: LabelEmbedding (with a null class for guidance) added to t_emb",),
        notes="TimestepEmbedder.timestep_embedding divides by half: shift 0, [cos | sin]"),
    layouts=(Layout("dit", (*_DIT, table("class labels", "y_embedder.embedding_table.weight")),
                    markers=("y_embedder.embedding_table.weight",)),))

DIT_DIFFUSERS = Family(
    TimestepContract(
        "dit_diffusers", "DiT as diffusers ports it",
        ("huggingface/diffusers: models/embeddings.py (CombinedTimestepLabelEmbeddings)",),
        "integer step t in 0..999", (0, 999), "t", convention=_PORT, sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU", injection="adaLN-Zero (AdaLayerNormZero)",
        extra=("class labels: LabelEmbedding added to the time embedding",), diffusers="DiTTransformer2DModel",
        notes="the port uses Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1): half - 1 in the exponent "
        "where the original divides by half; max difference 1.98 over t = 0..999, absorbed by the converted weights "
        "only approximately"),
    layouts=(Layout("dit_diffusers",
                    (MLPKeys("timestep", "transformer_blocks.{i}.norm1.emb.timestep_embedder."),
                     table("class labels", "transformer_blocks.{i}.norm1.emb.class_embedder.embedding_table.weight")),
                    "huggingface/diffusers: models/transformers/dit_transformer_2d.py, models/embeddings.py",
                    convention=_PORT),),
    classes={"DiTTransformer2DModel": None, "Transformer2DModel": _norm("ada_norm_zero")})

PIXART = Family(
    TimestepContract(
        "pixart", "PixArt-alpha / PixArt-sigma",
        ("PixArt-alpha/PixArt-alpha: diffusion/model/nets/PixArt_blocks.py",
         "huggingface/diffusers: models/normalization.py (AdaLayerNormSingle)"),
        "integer step t in 0..999 (DPM-Solver / IDDPM)", (0, 999), "t", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU",
        injection="adaLN-single: one SiLU + Linear to 6 x hidden for all blocks, plus a learned table per block",
        extra=("resolution and aspect ratio (PixArt-alpha 1024): the same sinusoid, own MLPs, added",),
        diffusers="PixArtTransformer2DModel"),
    layouts=(
        Layout("pixart_original", (*_DIT, MLPKeys("resolution", "csize_embedder.mlp.", SEQUENTIAL),
                                   MLPKeys("aspect ratio", "ar_embedder.mlp.", SEQUENTIAL)),
               "PixArt-alpha/PixArt-alpha: diffusion/model/nets/PixArt.py, PixArtMS.py",
               markers=("t_block.1.weight", "y_embedder.y_proj.")),
        Layout("pixart", (MLPKeys("timestep", "adaln_single.emb.timestep_embedder."),
                          MLPKeys("resolution", "adaln_single.emb.resolution_embedder."),
                          MLPKeys("aspect ratio", "adaln_single.emb.aspect_ratio_embedder.")),
               "huggingface/diffusers: models/transformers/pixart_transformer_2d.py, models/normalization.py",
               markers=("caption_projection.linear_1.", "pos_embed.proj.")),
    ),
    classes={"PixArtTransformer2DModel": None, "Transformer2DModel": _norm("ada_norm_single")})

SANA = Family(
    diffusers_contract(
        "sana", "SANA (linear DiT, flow matching)", "sana_transformer", "sana/pipeline_sana",
        raw="the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete / DPM-Solver++ flow)",
        pipeline="t * timestep_scale (1.0 in the released configs)",
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single", diffusers="SanaTransformer2DModel"),
    layouts=(Layout("sana", (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
                    markers=("caption_norm.weight", "time_embed.linear.")),),
    classes=every("SanaTransformer2DModel", "SanaControlNetModel",
                  when=lambda config: config.get("timestep_scale", 1.0) == 1.0))

SANA_VIDEO = Family(
    diffusers_contract(
        "sana_video", "SANA-Video", "transformer_sana_video", "sana_video/pipeline_sana_video",
        raw="the scheduler's timesteps (DPMSolverMultistepScheduler with flow sigmas)",
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)",
        injection="adaLN-single", diffusers="SanaVideoTransformer3DModel"),
    layouts=(Layout("sana_video", (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
                    markers=("caption_norm.weight", "time_embed.linear.", "patch_embedding."), parent="sana"),),
    classes=every("SanaVideoTransformer3DModel"))

LUMINA2 = Family(
    diffusers_contract(
        "lumina2", "Lumina-Image 2.0 (Lumina2Transformer2DModel)", "transformer_lumina2", "lumina2/pipeline_lumina2",
        pipeline="1 - t / 1000: the flow time in [0, 1], counting from noise",
        mlp=_LUMINA.format("Lumina2CombinedTimestepCaptionEmbedding"), injection="adaLN (LuminaRMSNormZero per block)",
        diffusers="Lumina2Transformer2DModel", notes=_UNIT, to_model=lambda t: 1 - t.float() / 1000),
    layouts=(Layout("lumina2", (MLPKeys("timestep", "time_caption_embed.timestep_embedder."),),
                    markers=("time_caption_embed.caption_embedder.",)),),
    classes=every("Lumina2Transformer2DModel"))

LUMINA_NEXT = Family(
    diffusers_contract(
        "lumina_next", "Lumina-Next (LuminaNextDiT2DModel)", "lumina_nextdit2d", "lumina/pipeline_lumina",
        pipeline="1 - t / 1000: the flow time in [0, 1], counting from noise",
        mlp=_LUMINA.format("LuminaCombinedTimestepCaptionEmbedding"), injection="adaLN (LuminaRMSNormZero per block)",
        notes=_UNIT, diffusers="LuminaNextDiT2DModel", to_model=lambda t: 1 - over_1000(t)),
    layouts=(Layout("lumina_next", (MLPKeys("timestep", "time_caption_embed.timestep_embedder."),),
                    markers=("time_caption_embed.caption_embedder.", "pad_token"), parent="lumina2"),),
    classes=every("LuminaNextDiT2DModel"))

Z_IMAGE = Family(
    diffusers_contract(
        "z_image", "Z-Image (single-stream DiT)", "transformer_z_image", "z_image/pipeline_z_image",
        pipeline="(1000 - t) / 1000: the flow time in [0, 1], counting from noise",
        inside="t * t_scale (1000.0), in float32",
        mlp="256 -> 1024 -> min(dim, 256), SiLU (DiT's TimestepEmbedder: t_embedder.mlp.0 / mlp.2)",
        injection="adaLN per block (adaLN_modulation)", diffusers="ZImageTransformer2DModel",
        notes="the sinusoid is DiT's timestep_embedding ([cos | sin], / half), so the sinusoid sees 1000 - t "
        "rounded through the float32 division and product",
        to_model=_z_time, to_sinusoid=lambda t, dtype: t * 1000.0),
    layouts=(Layout("z_image", _DIT,
                    "huggingface/diffusers: models/transformers/transformer_z_image.py (DiT's TimestepEmbedder fed "
                    "t * t_scale, 1000)", markers=("cap_embedder.", "all_x_embedder."), scale=1000.0,
                    scale_first=True),),
    classes=every("ZImageTransformer2DModel", "ZImageControlNetModel",
                  when=lambda config: config.get("t_scale", 1000.0) == 1000.0))

OMNIGEN = Family(
    TimestepContract(
        "omnigen", "OmniGen",
        ("huggingface/diffusers: models/transformers/transformer_omnigen.py",
         "huggingface/diffusers: tests/pipelines/omnigen/test_pipeline_omnigen.py "
         "(FlowMatchEulerDiscreteScheduler(invert_sigmas=True, num_train_timesteps=1))"),
        "FlowMatchEulerDiscreteScheduler(invert_sigmas=True, num_train_timesteps=1) timesteps: 1 - sigma in [0, 1]",
        (0.0, 1.0), "t",
        mlp="time_step_dim -> hidden -> hidden, SiLU, twice: t_embedder (the adaLN input) and time_token (a token)",
        injection="adaLN of the output layer, and the time token prepended to the sequence",
        extra=("time token: the same sinusoid through its own MLP (time_token), prepended as a token",),
        diffusers="OmniGenTransformer2DModel", notes="the sinusoid is fed t in [0, 1] as it is (scale 1)"),
    layouts=(Layout("omnigen", (MLPKeys("timestep", "t_embedder."), MLPKeys("time token", "time_token.")),
                    markers=("time_token.linear_1.", "patch_embedding.input_image_proj.")),),
    classes=every("OmniGenTransformer2DModel", when=lambda config: bool(config.get("flip_sin_to_cos", True))
                  and config.get("downscale_freq_shift", 0) == 0))
# fmt: on

FAMILIES = (DIT, DIT_DIFFUSERS, PIXART, SANA, SANA_VIDEO, LUMINA2, LUMINA_NEXT, Z_IMAGE, OMNIGEN)
