"""Flux and the families built on its time path (the pipeline divides the scheduler's sigma * 1000 by
1000, the model multiplies by 1000 again in its own dtype): FLUX.1 [dev] and [schnell], FLUX.2,
Chroma, LongCat-Image, Ovis-Image; and FLUX.3's layout, which no pipeline of diffusers 0.42.1 feeds."""

from __future__ import annotations

from typing import Any

from .schema import (
    FLOW_SHIFTED,
    MLP_EMBEDDER,
    Family,
    Layout,
    MLPKeys,
    TimestepContract,
    diffusers_contract,
    every,
    in_dtype_times_1000,
    over_1000,
    text_mlp,
)

__all__ = ["FAMILIES", "GENERIC"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"
_FLUX = _DIFFUSERS + "transformer_flux.py"
_FLUX_ORIGINAL = "black-forest-labs/flux: src/flux/model.py, src/flux/modules/layers.py"
# what the model does: timestep.to(hidden_states.dtype) * 1000, after the pipeline's / 1000
_TIMES_1000: dict[str, Any] = dict(inside="timestep.to(model dtype) * 1000", to_model=over_1000,
                                   to_sinusoid=in_dtype_times_1000, pipeline_cast="before")  # fmt: skip
_X1000: dict[str, Any] = dict(scale=1000.0, in_model_dtype=True)  # the layouts of that arithmetic
_TEXT = text_mlp("time_text_embed.text_embedder.")
_VECTOR = text_mlp("vector_in.", MLP_EMBEDDER)  # the original's pooled-text MLPEmbedder
_BLOCKS = "adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle, Flux's blocks)"


def _flux_like(name: str, family: str, model_file: str, pipeline_file: str, mlp: str, **fields) -> TimestepContract:
    return diffusers_contract(
        name, family, model_file, pipeline_file, raw=FLOW_SHIFTED, mlp=mlp, **_TIMES_1000,
        pipeline="t.expand(batch).to(latents dtype) / 1000: sigma again, in the latents' dtype",
        formed_in="the model's dtype (bfloat16: sigma 0.99 reaches the sinusoid as 988)", **fields)  # fmt: skip


def _guidance(config) -> bool:
    return bool(config.get("guidance_embeds"))


# FLUX.3: no pipeline in diffusers 0.42.1 to read a contract from
GENERIC = (
    Layout("flux3", (MLPKeys("timestep", "timestep_embedder."),
                     MLPKeys("target timestep", "target_timestep_embedder.")),  # flow-map (step-distilled) configs only
           _DIFFUSERS + "transformer_flux3.py (timestep.to(dtype) * 1000; the text and reference tokens at 0)",
           markers=("early_stream_modulations.",), **_X1000),
)  # fmt: skip

# fmt: off
# (a table: each call keeps its facts a line apiece)
FLUX_DEV = Family(
    TimestepContract(
        "flux_dev", "FLUX.1 [dev] (guidance-distilled)",
        ("black-forest-labs/flux: src/flux/model.py", "black-forest-labs/flux: src/flux/modules/layers.py",
         "huggingface/diffusers: models/transformers/transformer_flux.py"),
        "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, resolution-dependent shift)", (0.0, 1000.0),
        "t.expand(batch).to(latents dtype) / 1000: sigma again, in the latents' dtype", **_TIMES_1000,
        formed_in="the model's dtype (bfloat16: sigma 0.99 reaches the sinusoid as 988, 0.75 as 752)", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero in double blocks, AdaLayerNormZeroSingle in single blocks)",
        extra=("guidance: the guidance scale (e.g. 3.5) .to(model dtype) * 1000, through the same sinusoid and "
               "its own MLP (guidance_embedder), added",),
        diffusers="FluxTransformer2DModel (guidance_embeds=True)",
        notes="the original's timestep_embedding(t, 256, time_factor=1000) forms 1000 * t in t's dtype and returns "
        "that dtype: sinusoidal_embedding(sigma, 256, 'adm', scale=1000, scale_in_input_dtype=True, dtype=t.dtype)"),
    layouts=(
        Layout("flux_dev", (MLPKeys("timestep", "time_text_embed.timestep_embedder."),
                            MLPKeys("guidance", "time_text_embed.guidance_embedder."), _TEXT), _FLUX,
               markers=("x_embedder.weight", "single_transformer_blocks.", "time_text_embed.guidance_embedder."),
               **_X1000),
        Layout("flux_dev_original", (MLPKeys("timestep", "time_in.", MLP_EMBEDDER),
                                     MLPKeys("guidance", "guidance_in.", MLP_EMBEDDER), _VECTOR),
               _FLUX_ORIGINAL, markers=("double_blocks.", "guidance_in.in_layer.", "vector_in.in_layer."), **_X1000),
    ),
    classes=every("FluxTransformer2DModel", "FluxControlNetModel", when=_guidance))

FLUX_SCHNELL = Family(
    TimestepContract(
        "flux_schnell", "FLUX.1 [schnell] (timestep-distilled, no guidance input)",
        ("black-forest-labs/flux: src/flux/model.py", "huggingface/diffusers: models/transformers/transformer_flux.py"),
        "the scheduler's timesteps: sigma * 1000 (FlowMatchEulerDiscrete, no shift)", (0.0, 1000.0),
        "t.expand(batch).to(latents dtype) / 1000", **_TIMES_1000, formed_in="the model's dtype", sinusoid_dim=256,
        mlp="256 -> hidden -> hidden, SiLU; plus the pooled text projection",
        injection="adaLN (AdaLayerNormZero / AdaLayerNormZeroSingle)",
        diffusers="FluxTransformer2DModel (guidance_embeds=False)"),
    layouts=(
        Layout("flux_schnell", (MLPKeys("timestep", "time_text_embed.timestep_embedder."), _TEXT), _FLUX,
               markers=("x_embedder.weight", "single_transformer_blocks."),
               absent=("time_text_embed.guidance_embedder.",), **_X1000),
        Layout("flux_schnell_original", (MLPKeys("timestep", "time_in.", MLP_EMBEDDER), _VECTOR),
               _FLUX_ORIGINAL, markers=("double_blocks.", "vector_in.in_layer."), absent=("guidance_in.",), **_X1000),
    ),
    classes=every("FluxTransformer2DModel", "FluxControlNetModel", when=lambda config: not _guidance(config)))

FLUX2 = Family(
    _flux_like(
        "flux2", "FLUX.2 [dev] / [klein]", "transformer_flux2", "flux2/pipeline_flux2",
        "256 -> hidden -> hidden, SiLU, no biases in the released config (Flux2TimestepGuidanceEmbeddings)",
        sinusoid_dim=256, injection="adaLN: one modulation per stream shared by all blocks (Flux2Modulation)",
        extra=("guidance: the guidance scale in float32 .to(model dtype) * 1000, through the same sinusoid and its "
               "own MLP (guidance_embedder), added; absent in the [klein] configs (guidance_embeds=False)",),
        diffusers="Flux2Transformer2DModel"),
    layouts=(
        Layout("flux2", (MLPKeys("timestep", "time_guidance_embed.timestep_embedder."),
                         MLPKeys("guidance", "time_guidance_embed.guidance_embedder.")),
               _DIFFUSERS + "transformer_flux2.py (timestep.to(dtype) * 1000; no biases in the released config)",
               markers=("double_stream_modulation_img.",), **_X1000),
        Layout("flux2_original", (MLPKeys("timestep", "time_in.", MLP_EMBEDDER),
                                  MLPKeys("guidance", "guidance_in.", MLP_EMBEDDER)),
               "black-forest-labs/flux2 (the keys diffusers' convert_flux2_transformer_checkpoint_to_diffusers reads)",
               markers=("single_stream_modulation.lin.",), **_X1000),
    ),
    classes=every("Flux2Transformer2DModel"))

CHROMA = Family(
    _flux_like(
        "chroma", "Chroma (Flux schnell with the modulation MLPs distilled into one approximator)",
        "transformer_chroma", "chroma/pipeline_chroma",
        "no time MLP: [sinusoid(t), sinusoid(0)] (approximator_num_channels / 4 wide each) joined with a fixed table "
        "of modulation indices, then ChromaApproximator (in_proj, residual MLP layers, out_proj) gives every "
        "block's modulation", sinusoid_dim=None,
        injection="adaLN: each block reads its own slice of the approximator's output",
        extra=("guidance: always 0 (the guidance sinusoid is fed torch.tensor([0] * batch))",),
        diffusers="ChromaTransformer2DModel",
        notes="no TimestepEmbedding: the embedder's two-layer MLP cannot stand for the approximator"),
    classes=every("ChromaTransformer2DModel"))

# LongCat-Image and BRIA 3.2 have the same keys (the model gets sigma in one, sigma * 1000 in the other):
# a state dict alone is ambiguous, a folder's config.json names the class
LONGCAT_IMAGE = Family(
    _flux_like(
        "longcat_image", "LongCat-Image", "transformer_longcat_image", "longcat_image/pipeline_longcat_image",
        "256 -> hidden -> hidden, SiLU (LongCatImageTimestepEmbeddings)", sinusoid_dim=256, injection=_BLOCKS,
        diffusers="LongCatImageTransformer2DModel"),
    layouts=(Layout("longcat_image", (MLPKeys("timestep", "time_embed.timestep_embedder."),),
                    _DIFFUSERS + "transformer_longcat_image.py (timestep.to(dtype) * 1000)",
                    markers=("single_transformer_blocks.",), twins=("bria",),
                    classes=("LongCatImageTransformer2DModel",),
                    **_X1000),),
    classes=every("LongCatImageTransformer2DModel"))

OVIS_IMAGE = Family(
    _flux_like(
        "ovis_image", "Ovis-Image", "transformer_ovis_image", "ovis_image/pipeline_ovis_image",
        "256 -> hidden -> hidden, SiLU (timestep_embedder)", sinusoid_dim=256, injection=_BLOCKS,
        diffusers="OvisImageTransformer2DModel"),
    layouts=(Layout("ovis_image", (MLPKeys("timestep", "timestep_embedder."),),
                    _DIFFUSERS + "transformer_ovis_image.py (timestep.to(dtype) * 1000)",
                    markers=("context_embedder_norm.weight", "single_transformer_blocks."), **_X1000),),
    classes=every("OvisImageTransformer2DModel"))
# fmt: on

FAMILIES = (FLUX_DEV, FLUX_SCHNELL, FLUX2, CHROMA, LONGCAT_IMAGE, OVIS_IMAGE)
