"""EDM-style families, fed a noise level: EDM's networks (Karras et al. 2022: DhariwalUNet, SongUNet
DDPM++ and NCSN++) and k-diffusion (its wrappers of discrete models, its own image_v1 UNet)."""

from __future__ import annotations

from ..conventions import get_convention
from .schema import SEQUENTIAL, Family, Layout, MLPKeys, TimestepContract

__all__ = ["FAMILIES", "edm_vp_c_noise"]

_EDM = "NVlabs/edm: training/networks.py"
_MAP = (MLPKeys("timestep", "", ("map_layer0", "map_layer1")),)


def edm_vp_c_noise(sigma, beta_d: float = 19.9, beta_min: float = 0.1, m: int = 1000):
    """EDM VPPrecond's c_noise = (M - 1) sigma^-1(sigma), the VP time of a noise level (Karras et al. 2022, Table 1)."""
    t = ((beta_min**2 + 2 * beta_d * (1 + sigma**2).log()).sqrt() - beta_min) / beta_d
    return (m - 1) * t


# fmt: off
# (a table: each call keeps its facts a line apiece)
EDM = Family(
    TimestepContract(
        "edm", "EDM (Karras et al. 2022) with EDMPrecond and the DhariwalUNet (ADM architecture)", (_EDM,),
        "sigma in [0.002, 80]", (0.002, 80.0), "c_noise = ln(sigma) / 4", convention=get_convention("edm"),
        mlp="C -> 4C, SiLU, 4C -> 4C, then SiLU (map_layer0, map_layer1, post SiLU)",
        injection="scale-shift (UNetBlock.affine with adaptive_scale=True)",
        extra=("class labels: map_label added before the last SiLU",), to_model=lambda sigma: sigma.log() / 4),
    # DhariwalUNet: silu(map_layer0(emb)) -> map_layer1 (+ map_label) -> silu; its own out_norm/out_conv
    layouts=(Layout("edm", _MAP, _EDM + " (DhariwalUNet)", markers=("out_conv.weight",), convention="edm",
                    post_act="silu"),))

EDM_VP = Family(
    TimestepContract(
        "edm_vp", "EDM VPPrecond with SongUNet (DDPM++)", (_EDM,), "sigma in [0.002, 80] (the VP sigma of t)",
        (0.002, 80.0), "c_noise = (M - 1) sigma^-1(sigma), M = 1000: the VP time scaled to 0..999",
        convention=get_convention("edm_song"), mlp="C -> 4C -> 4C, SiLU (map_layer0, map_layer1)",
        injection="additive (UNetBlock.affine, adaptive_scale=False)", to_model=edm_vp_c_noise),
    # SongUNet DDPM++: PositionalEmbedding(endpoint=True) with the halves flipped, silu after both layers
    layouts=(Layout("edm_vp", _MAP, _EDM + " (SongUNet, DDPM++)", markers=("_aux_conv.weight",),
                    absent=("map_noise.freqs",), convention="edm_song", post_act="silu"),))

EDM_VE = Family(
    TimestepContract(
        "edm_ve", "EDM VEPrecond with SongUNet (NCSN++)", (_EDM,), "sigma in [0.02, 100]", (0.02, 100.0),
        "c_noise = ln(sigma / 2)", convention=None, mlp="C -> 4C -> 4C, SiLU", injection="additive (UNetBlock.affine)",
        notes="Fourier features (FourierEmbedding, scale 16), not a sinusoid: FourierEmbedding.edm here",
        to_model=lambda sigma: (sigma / 2).log()),
    # SongUNet NCSN++: FourierEmbedding, x.ger(2 pi freqs), [cos | sin] flipped to [sin | cos]
    layouts=(Layout("edm_ve", _MAP, _EDM + " (SongUNet, NCSN++)", markers=("map_noise.freqs",), convention=None,
                    fourier=("map_noise.freqs", {"first": "sin", "fold_2pi": True}), post_act="silu"),))

K_DIFFUSION_COMPVIS = Family(
    TimestepContract(
        "k_diffusion_compvis", "k-diffusion wrappers of discrete VP models (CompVisDenoiser, DiscreteEpsDDPMDenoiser)",
        ("crowsonkb/k-diffusion: k_diffusion/external.py",),
        "sigma of the model's schedule (Karras / exponential sigma grids)", (0.0292, 14.61),
        "t = sigma_to_t(sigma): log-sigma interpolation between the integer steps, fractional",
        inside="nothing (the wrapped model's own sinusoid)", sinusoid_dim=320,
        mlp="the wrapped model's (Stable Diffusion: 320 -> 1280 -> 1280)", injection="the wrapped model's",
        notes="the model sees fractional t although it was trained on integers"))

K_DIFFUSION_V1 = Family(
    TimestepContract(
        "k_diffusion_v1", "k-diffusion's own image_v1 UNet (ImageDenoiserModelV1), sigma in, c_noise inside",
        ("crowsonkb/k-diffusion: k_diffusion/models/image_v1.py", "crowsonkb/k-diffusion: k_diffusion/layers.py"),
        "sigma of a Karras grid (sample_heun / sample_dpmpp_2m)", (0.01, 80.0), "sigma",
        inside="c_noise = ln(sigma) / 4, then FourierFeatures(1, width): [cos | sin] of (2 pi c_noise) @ W.T",
        convention=None, mlp="MappingNet: (Linear, GELU) x 2, width -> width",
        injection="the mapping output conditions every block (AdaGN)",
        notes="Fourier features, not a sinusoid: FourierEmbedding(first='cos', in_features=1) of ln(sigma) / 4",
        to_sinusoid=lambda sigma, dtype: sigma.log() / 4),
    # image_v1: FourierFeatures(1, width) of c_noise = ln(sigma) / 4, then MappingNet (Linear, GELU) x 2;
    # its W [n, 1] kept as it is: in_features=1 forms the phase (2 pi x) @ W.T in k-diffusion's float order
    layouts=(Layout("k_diffusion", (MLPKeys("timestep", "mapping.", SEQUENTIAL),),
                    "crowsonkb/k-diffusion: k_diffusion/models/image_v1.py, k_diffusion/layers.py",
                    markers=("timestep_embed.weight",), convention=None,
                    fourier=("timestep_embed.weight", {"first": "cos", "in_features": 1}), fourier_column=True,
                    act="gelu", post_act="gelu", time_input="quarter_log"),))
# fmt: on

FAMILIES = (EDM, EDM_VP, EDM_VE, K_DIFFUSION_COMPVIS, K_DIFFUSION_V1)
