"""The timestep contracts of real model families, each citing the files it was read from.

``CONTRACTS[name]`` is a [`TimestepContract`][timestep_embed.interop.TimestepContract];
[`contract_for`][timestep_embed.interop.contract_for] picks the one of a diffusers model from its class and config. For
the families diffusers implements, ``tests/interop/test_contracts.py`` feeds a tiny random-weight model of that
class the raw scheduler values through the contract and checks that the model's own time path
computes exactly what the contract says: the sinusoid's input and output, and the MLP's output.
"""

from __future__ import annotations

from .custom_contracts import CUSTOM_CONTRACTS
from .derived_contracts import DERIVED_CONTRACTS
from .flux_like_contracts import FLUX_LIKE_CONTRACTS
from .image_contracts import IMAGE_CONTRACTS
from .timestep_contract import TimestepContract
from .transformer_contracts import TRANSFORMER_CONTRACTS
from .unet_contracts import UNET_CONTRACTS, edm_vp_c_noise
from .video_contracts import VIDEO_CONTRACTS

__all__ = ["CONTRACTS", "get_contract", "contract_for", "edm_vp_c_noise"]


_CONTRACTS = [
    *UNET_CONTRACTS,
    *TRANSFORMER_CONTRACTS,
    *IMAGE_CONTRACTS,
    *FLUX_LIKE_CONTRACTS,
    *VIDEO_CONTRACTS,
    *DERIVED_CONTRACTS,
    *CUSTOM_CONTRACTS,
]
CONTRACTS: dict[str, TimestepContract] = {c.name: c for c in _CONTRACTS}


def get_contract(name: str) -> TimestepContract:
    """The contract called ``name`` (see `CONTRACTS`)."""
    if name not in CONTRACTS:
        raise ValueError(f"no timestep contract {name!r}; known: {', '.join(CONTRACTS)}")
    return CONTRACTS[name]


def _adm_flags(config) -> bool:
    """Whether a config's sinusoid is ADM's ([cos | sin], shift 0): diffusers' UNet defaults."""
    return bool(config.get("flip_sin_to_cos", True)) and config.get("freq_shift", 0) == 0


def _adm_flags_omnigen(config) -> bool:
    return bool(config.get("flip_sin_to_cos", True)) and config.get("downscale_freq_shift", 0) == 0


def _sd_unet(config) -> str | None:
    """A UNet built on Stable Diffusion's (ControlNet, AnimateDiff, ControlNet-XS, ModelScope ...): SD's
    time path when its sinusoid is the default one, SDXL's with the size ids."""
    if not _adm_flags(config) or config.get("time_embedding_type", "positional") != "positional":
        return None
    return "sdxl" if config.get("addition_embed_type") == "text_time" else "stable_diffusion"


def _flux(config) -> str:
    return "flux_dev" if config.get("guidance_embeds") else "flux_schnell"


# diffusers class name -> contract name; a callable picks by the model's config.
_BY_CLASS = {
    # a UNet2DModel is DDPM's only with DDPM's sinusoid (google/ddpm-cifar10-32's config)
    "UNet2DModel": lambda config: (
        "ddpm"
        if config.get("time_embedding_type", "positional") == "positional"
        and not config.get("flip_sin_to_cos", True)
        and config.get("freq_shift", 0) == 1
        else None
    ),
    "UNet1DModel": lambda config: (
        "diffuser"
        if config.get("time_embedding_type") == "positional"
        and not config.get("flip_sin_to_cos", True)
        and config.get("freq_shift", 0) == 1
        else None
    ),
    "UNet2DConditionModel": _sd_unet,
    "ControlNetModel": _sd_unet,
    "UNet3DConditionModel": _sd_unet,
    "UNetMotionModel": _sd_unet,
    "UNetControlNetXSModel": _sd_unet,
    "SparseControlNetModel": _sd_unet,
    "UNetSpatioTemporalConditionModel": lambda config: "svd",
    "Kandinsky3UNet": lambda config: "kandinsky3",
    "DiTTransformer2DModel": lambda config: "dit_diffusers",
    "PixArtTransformer2DModel": lambda config: "pixart",
    "SD3Transformer2DModel": lambda config: "sd3",
    "SD3ControlNetModel": lambda config: "sd3",
    "FluxTransformer2DModel": _flux,
    "FluxControlNetModel": _flux,
    "Flux2Transformer2DModel": lambda config: "flux2",
    "ChromaTransformer2DModel": lambda config: "chroma",
    "LongCatImageTransformer2DModel": lambda config: "longcat_image",
    "OvisImageTransformer2DModel": lambda config: "ovis_image",
    "HiDreamImageTransformer2DModel": lambda config: "hidream",
    "CogView3PlusTransformer2DModel": lambda config: "cogview3plus",
    "HunyuanDiT2DModel": lambda config: "hunyuan_dit",
    "HunyuanDiT2DControlNetModel": lambda config: "hunyuan_dit",
    "WanTransformer3DModel": lambda config: "wan21",
    "WanVACETransformer3DModel": lambda config: "wan21",
    "ChronoEditTransformer3DModel": lambda config: "wan21",
    "WanAnimateTransformer3DModel": lambda config: "wan21",
    "HeliosTransformer3DModel": lambda config: "helios",
    "JoyImageEditTransformer3DModel": lambda config: "joyimage",
    "JoyImageEditPlusTransformer3DModel": lambda config: "joyimage",
    "AnyFlowTransformer3DModel": lambda config: "anyflow",
    "AnyFlowFARTransformer3DModel": lambda config: "anyflow",
    "ConsisIDTransformer3DModel": lambda config: "cogvideox" if _adm_flags(config) else None,
    "HunyuanVideoFramepackTransformer3DModel": lambda config: "hunyuan_video",
    "HunyuanVideo15Transformer3DModel": lambda config: "hunyuan_video15",
    "LTX2VideoTransformer3DModel": lambda config: "ltx2",
    "SanaVideoTransformer3DModel": lambda config: "sana_video",
    "LuminaNextDiT2DModel": lambda config: "lumina_next",
    "MotifVideoTransformer3DModel": lambda config: "motif_video",
    "NucleusMoEImageTransformer2DModel": lambda config: "nucleus_moe",
    "ErnieImageTransformer2DModel": lambda config: "ernie_image",
    "GlmImageTransformer2DModel": lambda config: "glm_image",
    "Cosmos3OmniTransformer": lambda config: "cosmos3",
    "EasyAnimateTransformer3DModel": lambda config: "easyanimate",
    "MiniMaxH3Transformer3DModel": lambda config: "minimax_h3",
    "HunyuanImageTransformer2DModel": lambda config: "hunyuan_image",
    "ControlNetUnionModel": _sd_unet,
    "PriorTransformer": lambda config: "unclip_prior",
    "I2VGenXLUNet": lambda config: "i2vgen_xl",
    # the legacy Transformer2DModel: DiT's adaLN-Zero (CombinedTimestepLabelEmbeddings) or PixArt's adaLN-single
    "Transformer2DModel": lambda config: {"ada_norm_zero": "dit_diffusers", "ada_norm_single": "pixart"}.get(
        config.get("norm_type")
    ),
    "QwenImageControlNetModel": lambda config: "qwen_image",
    "SanaControlNetModel": lambda config: "sana" if config.get("timestep_scale", 1.0) == 1.0 else None,
    "ZImageTransformer2DModel": lambda config: "z_image" if config.get("t_scale", 1000.0) == 1000.0 else None,
    "ZImageControlNetModel": lambda config: "z_image" if config.get("t_scale", 1000.0) == 1000.0 else None,
    "BriaTransformer2DModel": lambda config: "bria" if config.get("time_theta", 10000) == 10000 else None,
    "BriaFiboTransformer2DModel": lambda config: "bria_fibo" if config.get("time_theta", 10000) == 10000 else None,
    "OmniGenTransformer2DModel": lambda config: "omnigen" if _adm_flags_omnigen(config) else None,
    "HunyuanVideoTransformer3DModel": lambda config: "hunyuan_video",
    "QwenImageTransformer2DModel": lambda config: "qwen_image",
    "Lumina2Transformer2DModel": lambda config: "lumina2",
    "SanaTransformer2DModel": lambda config: "sana" if config.get("timestep_scale", 1.0) == 1.0 else None,
    "CogView4Transformer2DModel": lambda config: "cogview4",
    "AuraFlowTransformer2DModel": lambda config: "auraflow",
    "AllegroTransformer3DModel": lambda config: "allegro",
    "CogVideoXTransformer3DModel": lambda config: "cogvideox" if _adm_flags(config) else None,
    "MochiTransformer3DModel": lambda config: "mochi",
    "LTXVideoTransformer3DModel": lambda config: "ltx_video",
    "LatteTransformer3DModel": lambda config: "latte",
    "SkyReelsV2Transformer3DModel": lambda config: "skyreels_v2" if config.get("flip_sin_to_cos", True) else None,
}


def contract_for(model) -> TimestepContract | None:
    """The contract of a diffusers model, from its class name and config; None for other models."""
    pick = _BY_CLASS.get(type(model).__name__)
    config = getattr(model, "config", None)
    name = pick(config) if pick is not None and hasattr(config, "get") else None
    return CONTRACTS[name] if name is not None else None
