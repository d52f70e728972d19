"""The key layouts of UNet checkpoints (diffusers' and the original releases': DDPM's torch port,
guided-diffusion, Stable Diffusion / LDM, SDXL), EDM's networks, lucidrains' and k-diffusion's."""

from __future__ import annotations

from .layouts import SEQUENTIAL, Layout, MLPKeys, table

__all__ = ["UNET_LAYOUTS"]

_UNET = (
    MLPKeys("timestep", "time_embedding."),
    MLPKeys("time ids", "add_embedding.", fed="size and crop ids through a sinusoid, with pooled text"),
)
_UNET_SOURCE = "huggingface/diffusers: models/unets/unet_2d.py, models/unets/unet_2d_condition.py"
_EDM = "NVlabs/edm: training/networks.py"
_LUCIDRAINS = "lucidrains/denoising-diffusion-pytorch: denoising_diffusion_pytorch/denoising_diffusion_pytorch.py"
_EDM_MLP = (MLPKeys("timestep", "", ("map_layer0", "map_layer1")),)

UNET_LAYOUTS = [
    # ------------------------------------------------------------------ diffusers UNets
    Layout("diffusers", None, _UNET_SOURCE, _UNET, convention=None),
    Layout("ddpm", "ddpm", _UNET_SOURCE, _UNET, convention="ddpm", auto=False),
    Layout("stable_diffusion", "stable_diffusion", _UNET_SOURCE, _UNET, markers=(".attn2.",), auto=False),
    Layout("sdxl", "sdxl", _UNET_SOURCE, _UNET, markers=(".attn2.", "add_embedding.linear_1."), auto=False),
    Layout(
        "unet1d",
        None,
        "huggingface/diffusers: models/unets/unet_1d.py",
        (MLPKeys("timestep", "time_mlp."),),
        convention=None,
    ),
    # ----------------------------------------------------------------- original UNets
    # guided-diffusion / improved-diffusion / LDM: time_embed = Sequential(linear, SiLU, linear)
    Layout(
        "adm",
        "guided_diffusion",
        "openai/guided-diffusion: guided_diffusion/unet.py",
        (MLPKeys("timestep", "time_embed.", SEQUENTIAL), table("class labels", "label_emb.weight")),
    ),
    Layout(
        "stable_diffusion_original",
        "stable_diffusion",
        "CompVis/stable-diffusion: ldm/modules/diffusionmodules/openaimodel.py",
        (MLPKeys("timestep", "time_embed.", SEQUENTIAL),),
        markers=(".transformer_blocks.0.attn2.",),
    ),
    Layout(
        "sdxl_original",
        "sdxl",
        "Stability-AI/generative-models: sgm/modules/diffusionmodules/openaimodel.py",
        (
            MLPKeys("timestep", "time_embed.", SEQUENTIAL),
            MLPKeys(
                "size and text",
                "label_emb.0.",
                SEQUENTIAL,
                fed="size and crop ids through a sinusoid, with pooled text",
            ),
        ),
        markers=(".transformer_blocks.0.attn2.", "label_emb.0.0.weight"),
    ),
    # ermongroup/ddim and pesser/pytorch_diffusion (the torch ports of DDPM): temb.dense = [Linear, Linear], swish
    Layout(
        "ddpm_original",
        "ddpm",
        "ermongroup/ddim: models/diffusion.py",
        (MLPKeys("timestep", "temb.dense.", ("0", "1")),),
        convention="ddpm",
    ),
    # -------------------------------------------------------------------------- EDM
    # DhariwalUNet: silu(map_layer0(emb)) -> map_layer1 (+ map_label) -> silu; its own out_norm/out_conv
    Layout(
        "edm",
        "edm",
        _EDM + " (DhariwalUNet)",
        _EDM_MLP,
        markers=("out_conv.weight",),
        convention="edm",
        post_act="silu",
    ),
    # SongUNet DDPM++: PositionalEmbedding(endpoint=True) with the halves flipped, silu after both layers
    Layout(
        "edm_vp",
        "edm_vp",
        _EDM + " (SongUNet, DDPM++)",
        _EDM_MLP,
        markers=("_aux_conv.weight",),
        absent=("map_noise.freqs",),
        convention="edm_song",
        post_act="silu",
    ),
    # SongUNet NCSN++: FourierEmbedding, x.ger(2 pi freqs), [cos | sin] flipped to [sin | cos]
    Layout(
        "edm_ve",
        "edm_ve",
        _EDM + " (SongUNet, NCSN++)",
        _EDM_MLP,
        markers=("map_noise.freqs",),
        convention=None,
        fourier=("map_noise.freqs", {"first": "sin", "fold_2pi": True}),
        post_act="silu",
    ),
    # ------------------------------------------------------------- lucidrains, k-diffusion
    # time_mlp = Sequential(SinusoidalPosEmb, Linear, GELU, Linear)
    Layout(
        "lucidrains",
        "lucidrains_ddpm",
        _LUCIDRAINS,
        (MLPKeys("timestep", "time_mlp.", ("1", "3")),),
        absent=("time_mlp.0.weights",),
        convention="ddpm",
        act="gelu",
    ),
    # RandomOrLearnedSinusoidalPosEmb: [t | sin | cos] of (t * w) * 2 pi, one more column than 2 x weights
    Layout(
        "lucidrains_learned",
        "lucidrains_ddpm",
        _LUCIDRAINS,
        (MLPKeys("timestep", "time_mlp.", ("1", "3")),),
        markers=("time_mlp.0.weights",),
        convention=None,
        fourier=("time_mlp.0.weights", {"first": "sin", "include_input": True}),
        act="gelu",
    ),
    # image_v1: FourierFeatures(1, width) of c_noise = ln(sigma) / 4, then MappingNet (Linear, GELU) x 2
    Layout(
        "k_diffusion",
        "k_diffusion_v1",
        "crowsonkb/k-diffusion: k_diffusion/models/image_v1.py, k_diffusion/layers.py",
        (MLPKeys("timestep", "mapping.", SEQUENTIAL),),
        markers=("timestep_embed.weight",),
        convention=None,
        fourier=("timestep_embed.weight", {"first": "cos", "fold_2pi": True}),
        act="gelu",
        post_act="gelu",
        time_input="quarter_log",
    ),
    Layout(
        "kandinsky3",
        "kandinsky3",
        "huggingface/diffusers: models/unets/unet_kandinsky3.py (Timesteps(flip_sin_to_cos=False, shift=1))",
        (MLPKeys("timestep", "time_embedding."),),
        markers=("add_time_condition.",),
        convention="ddpm",
    ),
    Layout(
        "controlnet_xs",
        None,
        "huggingface/diffusers: models/controlnets/controlnet_xs.py (UNetControlNetXSModel)",
        (MLPKeys("timestep", "base_time_embedding."),),
        convention=None,
    ),
    Layout(
        "i2vgen_xl",
        "i2vgen_xl",
        "huggingface/diffusers: models/unets/unet_i2vgen_xl.py (Timesteps(block_out_channels[0], True, 0))",
        (MLPKeys("timestep", "time_embedding."), MLPKeys("fps", "fps_embedding.", ("0", "2"))),
        markers=("fps_embedding.",),
    ),
    Layout(
        "unclip_prior",
        "unclip_prior",
        "huggingface/diffusers: models/transformers/prior_transformer.py (Timesteps(inner_dim, True, 0))",
        (MLPKeys("timestep", "time_embedding."),),
        markers=("proj_to_clip_embeddings.", "embedding_proj."),
    ),
]
