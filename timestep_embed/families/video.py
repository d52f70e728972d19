"""Video families beyond Wan's and Hunyuan's: LTX-Video, LTX-2, Mochi, Allegro, Latte, EasyAnimate,
Motif-Video, MiniMax-H3, Cosmos 3 Omni; and two UNets, Stable Video Diffusion and I2VGen-XL."""

from __future__ import annotations

from .schema import Family, Layout, MLPKeys, TimestepContract, diffusers_contract, every

__all__ = ["FAMILIES"]

_DIFFUSERS = "huggingface/diffusers: models/transformers/"
_SINGLE = "256 -> hidden -> hidden, SiLU; then SiLU + Linear to 6 x hidden (AdaLayerNormSingle)"
_STEPS = dict(raw_range=(0, 999), mlp=_SINGLE)  # integer steps into an adaLN-single DiT

# fmt: off
# (a table: each call keeps its facts a line apiece)
LTX_VIDEO = Family(
    diffusers_contract("ltx_video", "LTX-Video", "transformer_ltx", "ltx/pipeline_ltx", mlp=_SINGLE,
                       injection="adaLN-single", diffusers="LTXVideoTransformer3DModel"),
    layouts=(Layout("ltx_video", (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),),
                    markers=("proj_in.weight", "time_embed.linear.", "caption_projection.linear_1."),
                    absent=("audio_time_embed.",)),),
    classes=every("LTXVideoTransformer3DModel"))

LTX2 = Family(
    diffusers_contract(
        "ltx2", "LTX-2 (audio-video)", "transformer_ltx2", "ltx2/pipeline_ltx2",
        pipeline="t.expand(batch) (text to video); per token t.expand(batch).unsqueeze(-1) * (1 - conditioning_mask) "
                 "in pipeline_ltx2_image2video and pipeline_ltx2_condition",
        mlp="256 -> hidden -> hidden, SiLU; then SiLU + Linear (AdaLayerNormSingle)",
        injection="adaLN-single for video, audio and the audio-video cross attention",
        extra=("audio, and the cross-attention scale/shift and gates: the same sinusoid, own MLPs",),
        diffusers="LTX2VideoTransformer3DModel"),
    layouts=(Layout("ltx2", (MLPKeys("timestep", "time_embed.emb.timestep_embedder."),
                             MLPKeys("audio", "audio_time_embed.emb.timestep_embedder."),
                             MLPKeys("video cross attention", "av_cross_attn_video_scale_shift.emb.timestep_embedder."),
                             MLPKeys("audio cross attention",
                                     "av_cross_attn_audio_scale_shift.emb.timestep_embedder.")),
                    markers=("audio_time_embed.",)),),
    classes=every("LTX2VideoTransformer3DModel"))

MOCHI = Family(
    diffusers_contract(
        "mochi", "Mochi 1 (asymmetric DiT, flow matching counted from noise)", "transformer_mochi",
        "mochi/pipeline_mochi",
        raw="FlowMatchEulerDiscreteScheduler(invert_sigmas=True) timesteps: (1 - sigma) * 1000, t = 0 is noise",
        pipeline="t.expand(batch).to(latents dtype)", formed_in="float32, from the latents' dtype (bfloat16 rounds "
        "(1 - sigma) * 1000 first)",
        mlp="256 -> hidden -> hidden, SiLU; plus the attention-pooled caption (MochiCombinedTimestepCaptionEmbedding)",
        injection="adaLN (MochiRMSNormZero per block)", diffusers="MochiTransformer3DModel", pipeline_cast="before",
        notes="the model counts time the other way round: pass 1000 - sigma * 1000 (the pipeline's invert_sigmas)"),
    layouts=(Layout("mochi", (MLPKeys("timestep", "time_embed.timestep_embedder."),),
                    markers=("time_embed.pooler.",)),),
    classes=every("MochiTransformer3DModel"))

ALLEGRO = Family(
    diffusers_contract("allegro", "Allegro (3-D DiT)", "transformer_allegro", "allegro/pipeline_allegro",
                       raw="integer step t in 0..999 (EulerAncestralDiscreteScheduler)", **_STEPS,
                       injection="adaLN-single", diffusers="AllegroTransformer3DModel"),
    classes=every("AllegroTransformer3DModel"))

LATTE = Family(
    diffusers_contract("latte", "Latte (latent video DiT)", "latte_transformer_3d", "latte/pipeline_latte",
                       raw="integer step t in 0..999 (DDIMScheduler)", **_STEPS,
                       injection="adaLN-single in the spatial and the temporal blocks",
                       diffusers="LatteTransformer3DModel"),
    classes=every("LatteTransformer3DModel"))

EASYANIMATE = Family(
    diffusers_contract(
        "easyanimate", "EasyAnimate", "transformer_easyanimate", "easyanimate/pipeline_easyanimate",
        raw="the scheduler's timesteps (FlowMatchEulerDiscreteScheduler or DDIMScheduler)",
        pipeline="torch.tensor([t] * batch).to(latents dtype)", formed_in="the latents' dtype", sinusoid_dim=None,
        mlp="inner dim -> time_embed_dim -> time_embed_dim, SiLU (time_embedding; the sinusoid is inner dim wide)",
        injection="adaLN (EasyAnimateLayerNormZero per block)", diffusers="EasyAnimateTransformer3DModel",
        pipeline_cast="before"),
    classes=every("EasyAnimateTransformer3DModel"))

MOTIF_VIDEO = Family(
    diffusers_contract(
        "motif_video", "Motif-Video", "transformer_motif_video", "motif_video/pipeline_motif_video",
        raw="the scheduler's timesteps (DPMSolverMultistepScheduler)",
        mlp="256 -> hidden -> hidden, SiLU (MotifVideoConditionEmbedding)",
        injection="adaLN (AdaLayerNormZero per block)",
        diffusers="MotifVideoTransformer3DModel"),
    layouts=(Layout("motif_video", (MLPKeys("timestep", "time_text_embed.timestep_embedder."),),
                    markers=("image_embedder.norm_in.", "x_embedder.proj.")),),
    classes=every("MotifVideoTransformer3DModel"))

MINIMAX_H3 = Family(
    TimestepContract(
        "minimax_h3", "MiniMax-H3 (audio-video; no diffusers pipeline)",
        ("huggingface/diffusers: models/transformers/transformer_minimax_h3.py",),
        "the distinct timesteps of the packed sequence, in [0, 1] and unscaled", (0.0, 1.0),
        "t (with timestep_indices naming each row's timestep)",
        mlp="freq_dim -> time_embed_hidden_dim -> time_embed_dim, SiLU (time_embedder)",
        injection="adaLN per modality and timestep (adaln_indices)",
        notes="the sinusoid is fed t in [0, 1] as it is (scale 1)", diffusers="MiniMaxH3Transformer3DModel"),
    layouts=(Layout("minimax_h3", (MLPKeys("timestep", "time_embedder."),), markers=("audio_proj_in.",
                                                                                     "context_embedder.")),),
    classes=every("MiniMaxH3Transformer3DModel"))

COSMOS3 = Family(
    diffusers_contract(
        "cosmos3", "Cosmos 3 Omni (vision, sound and action tokens)", "transformer_cosmos3",
        "cosmos/pipeline_cosmos3_omni",
        raw="UniPCMultistepScheduler timesteps (flow sigmas * 1000)",
        pipeline="torch.full((tokens,), t.item()): one timestep per noisy token",
        inside="timesteps * timestep_scale (0.001): sigma in [0, 1]",
        mlp="256 -> hidden -> hidden, SiLU (time_embedder), shared by the three modalities",
        injection="adaLN per token",
        notes="the sinusoid is fed sigma in [0, 1] (scale 1): its high frequencies barely turn",
        diffusers="Cosmos3OmniTransformer", to_sinusoid=lambda t, dtype: t * 0.001),
    layouts=(Layout("cosmos3", (MLPKeys("timestep", "time_embedder."),),
                    _DIFFUSERS + "transformer_cosmos3.py (timesteps * timestep_scale, 0.001, before the sinusoid)",
                    markers=("embed_tokens.", "norm_moe_gen."), scale=0.001, scale_first=True),),
    classes=every("Cosmos3OmniTransformer"))

SVD = Family(
    TimestepContract(
        "svd", "Stable Video Diffusion (UNetSpatioTemporalConditionModel): EDM noise levels",
        ("huggingface/diffusers: models/unets/unet_spatio_temporal_condition.py",
         "huggingface/diffusers: pipelines/stable_video_diffusion/pipeline_stable_video_diffusion.py",
         "Stability-AI/generative-models: sgm/modules/diffusionmodules/denoiser_scaling.py"),
        "sigma of a Karras grid (EulerDiscreteScheduler, use_karras_sigmas, timestep_type='continuous')", (0.002,
                                                                                                           700.0),
        "the scheduler's timesteps: c_noise = ln(sigma) / 4", sinusoid_dim=320, mlp="320 -> 1280 -> 1280, SiLU",
        injection="additive (ResnetBlock2D / SpatioTemporalResBlock time_emb_proj)",
        extra=("added time ids (fps - 1, motion bucket, noise augmentation): each through the same sinusoid "
               "(add_time_proj), concatenated and projected (add_embedding), added",
               "frame indices: through a sinusoid per temporal transformer (time_proj / time_pos_embed)"),
        diffusers="UNetSpatioTemporalConditionModel", to_model=lambda sigma: sigma.log() / 4),
    classes=every("UNetSpatioTemporalConditionModel"))

I2VGEN_XL = Family(
    TimestepContract(
        "i2vgen_xl", "I2VGen-XL (image-to-video UNet)",
        ("huggingface/diffusers: models/unets/unet_i2vgen_xl.py",
         "huggingface/diffusers: pipelines/deprecated/i2vgen_xl/pipeline_i2vgen_xl.py"),
        "integer step t in 0..999 (DDIMScheduler)", (0, 999), "t",
        mlp="block_out_channels[0] -> 4 x that -> same, SiLU (time_embedding)",
        injection="additive (ResnetBlock2D time_emb_proj), as Stable Diffusion's UNet",
        extra=("the frame rate: fps through the same sinusoid (time_proj) and its own MLP (fps_embedding), added",),
        diffusers="I2VGenXLUNet"),
    layouts=(Layout("i2vgen_xl", (MLPKeys("timestep", "time_embedding."), MLPKeys("fps", "fps_embedding.", ("0", "2"))),
                    "huggingface/diffusers: models/unets/unet_i2vgen_xl.py (Timesteps(block_out_channels[0], True, 0))",
                    markers=("fps_embedding.",), parent="diffusers"),),
    classes=every("I2VGenXLUNet"))
# fmt: on

FAMILIES = (LTX_VIDEO, LTX2, MOCHI, ALLEGRO, LATTE, EASYANIMATE, MOTIF_VIDEO, MINIMAX_H3, COSMOS3, SVD, I2VGEN_XL)
