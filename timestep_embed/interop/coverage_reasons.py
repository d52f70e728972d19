"""Why a diffusers class with a time argument is not covered on one of the four checks of
`timestep_embed.interop.coverage`, in a porter's words: each read from the class's source in the
installed diffusers. `NOT_BUILT` names the classes without a tiny model, `LIMITS` the
checks that cannot pass on a built one (the failing check's own message is replaced by the reason)."""

from __future__ import annotations

__all__ = ["NOT_BUILT", "LIMITS"]

_WRAPPER = (
    "a container that runs several ControlNets ({0}) with the same timestep, its weights under nets.N.: "
    "each net is checked as {0} itself; the wrapper has no time path of its own"
)
_NO_CONFIG = "no tiny configuration here: diffusers ships no test config for it{0}, and none was written for it yet"
_TORCHVISION = (
    "diffusers' Cosmos model calls torchvision.transforms inside forward and torchvision is not installed "
    "(diffusers does not require it), so no instance runs here"
)

NOT_BUILT: dict[str, str] = {
    "MultiControlNetModel": _WRAPPER.format("ControlNetModel"),
    "FluxMultiControlNetModel": _WRAPPER.format("FluxControlNetModel"),
    "SD3MultiControlNetModel": _WRAPPER.format("SD3ControlNetModel"),
    "QwenImageMultiControlNetModel": _WRAPPER.format("QwenImageControlNetModel"),
    "HunyuanDiT2DMultiControlNetModel": _WRAPPER.format("HunyuanDiT2DControlNetModel"),
    "CosmosControlNetModel": _TORCHVISION,
    "ZImageControlNetModel": (
        "it holds no time MLP of its own: ZImageControlNetModel.from_transformer shares the t_embedder of a "
        "ZImageTransformer2DModel (covered), and its forward refuses to run before that"
    ),
    "BriaFibo2Transformer2DModel": _NO_CONFIG.format(""),
    "DreamLiteTransformer2DModel": _NO_CONFIG.format(""),
    "DreamLiteUNetModel": _NO_CONFIG.format(" but its pipeline test (tests/pipelines/dreamlite)"),
    "Kandinsky5Transformer3DModel": _NO_CONFIG.format(" but its pipeline test (tests/pipelines/kandinsky5)"),
    "Kandinsky6Transformer3DModel": _NO_CONFIG.format(""),
    "Kandinsky6SRTransformer3DModel": _NO_CONFIG.format(""),
    "QwenImage21Transformer2DModel": _NO_CONFIG.format(""),
    "SanaWMTransformer3DModel": _NO_CONFIG.format(""),
    "SanaWMLTX2RefinerTransformer3DModel": _NO_CONFIG.format(""),
    "StableAudio3DiTModel": _NO_CONFIG.format(" but its model test, which imports accelerate (not installed)"),
    "StableCascadeUNet": _NO_CONFIG.format(" but its pipeline tests (tests/pipelines/stable_cascade)"),
}

_ALL = ("contract", "patch", "trace", "from_state_dict")
_CUSTOM_NOTE = "its time modules are its own, not diffusers' Timesteps / TimestepEmbedding nor ours"


def _all(reason: str) -> dict[str, str]:
    return dict.fromkeys(_ALL, reason)


LIMITS: dict[str, dict[str, str]] = {
    "CosmosTransformer3DModel": _all(_TORCHVISION),
    "ChromaTransformer2DModel": {
        "trace": "no time MLP to record: the sinusoids of t and of a zero guidance are joined with a fixed table of "
        "modulation indices and fed to ChromaApproximator, a residual MLP that outputs every block's modulation",
        "from_state_dict": "no two-layer time MLP to load: Chroma's distilled_guidance_layer (ChromaApproximator: "
        "in_proj, residual layers, out_proj) replaces Flux's TimestepEmbedding",
    },
    "Flux3Transformer2DModel": {
        "contract": "no pipeline in the installed diffusers passes it a timestep yet, so there is no pipeline "
        "contract to read; the model's side (sigma in [0, 1], .to(dtype) * 1000, Timesteps(flip_sin_to_cos=True, "
        "downscale_freq_shift=0)) is the flux3 key layout's",
    },
    "TransformerTemporalModel": _all(
        "no time path: timestep is handed to its BasicTransformerBlocks, which embed it only with an ada_norm "
        "norm type, and TransformerTemporalModel builds them with layer_norm (the UNets it sits in embed the step)"
    ),
    "WanAnimate2Transformer3DModel": _all(
        "the only pass that runs from inputs alone (kv_cache_mode='extract', the reference pass) embeds a fixed "
        "timestep (1.0), not the one passed; the denoising pass needs the KV cache it fills"
    ),
    "T5FilmDecoder": _all(
        "get_timestep_embedding(decoder_noise_time * 2000, d_model, max_period=2000) is called inline in forward "
        f"and its MLP is an nn.Sequential (conditioning_emb): {_CUSTOM_NOTE}"
    ),
    "StableAudioDiTModel": _all(
        "StableAudioGaussianFourierProjection forms 2 pi x before the product with its weight (diffusers' "
        "GaussianFourierProjection after it) and feeds an nn.Sequential (timestep_proj): " + _CUSTOM_NOTE
    ),
    "Ideogram4Transformer2DModel": _all(
        "Ideogram4EmbedScalar computes its sinusoid inline, of 1e4 (t - min) / (max - min), and its MLP "
        f"(mlp_in, mlp_out) in one forward: {_CUSTOM_NOTE}"
    ),
    "Krea2Transformer2DModel": _all(
        "Krea2TimestepEmbedding computes DiT's sinusoid inline and a tanh-GELU MLP (linear_1, linear_2) in one "
        f"forward: {_CUSTOM_NOTE}"
    ),
    "LongCatAudioDiTTransformer": _all(
        "AudioDiTSinusPositionEmbedding ([sin | cos], h - 1 in the exponent, 1000 t inside) feeds an nn.Sequential "
        f"(time_mlp): {_CUSTOM_NOTE}"
    ),
    "MiniMaxMusic3Transformer1DModel": {
        "contract": "not written: its Fourier features are its own (see trace), so the trace cannot check one",
        "trace": f"MiniMaxMusic3FourierEmbedding ([cos | sin] of t W, no 2 pi): {_CUSTOM_NOTE}",
        "from_state_dict": "its Fourier weight (time_proj.weight, [n, 1]) is MiniMax's, whose phase this package's "
        "FourierEmbedding does not form (no 2 pi): no layout for it",
    },
    "PRXTransformer2DModel": _all(
        "the sinusoid is a free function (timestep_embedding) called in forward, its MLP Flux's MLPEmbedder "
        f"(time_in.in_layer / out_layer): {_CUSTOM_NOTE}"
    ),
    "AceStepTransformer1DModel": {
        "contract": "not written: AceStepTimestepEmbedding's MLP is its own (see trace)",
        "trace": "AceStepTimestepEmbedding feeds diffusers' Timesteps (1000 t) into its own MLP (linear_1, SiLU, "
        "linear_2, SiLU, time_proj to 6 x width) and returns a tuple: the trace records the sinusoid, not the MLP",
        "from_state_dict": "its MLP (time_embed.linear_1 / linear_2 with a SiLU after, then time_proj) is no layout "
        "here",
    },
}
