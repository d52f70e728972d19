"""Each preset against an independent transcription of the formula in the source it cites,
diffusers' flags both ways, and the layout permutation applied to a trained first layer."""

import math

import numpy as np
import pytest
import torch

from timestep_embed import (
    PRESETS,
    Convention,
    convention_from_diffusers,
    convention_to_diffusers,
    get_convention,
    layout_permutation,
    sinusoidal_embedding_np,
)

T = np.array([0.0, 1.0, 7.0, 99.5, 500.0, 999.0])


# ---- transcriptions of each source's formula, written from the papers/files, in float64 ------
def vaswani_paper(pos, d):
    """Vaswani et al. 2017 sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pe = np.zeros((len(pos), d))
    for i in range(d // 2):
        angle = pos / 10000 ** (2 * i / d)
        pe[:, 2 * i], pe[:, 2 * i + 1] = np.sin(angle), np.cos(angle)
    return pe


def ddpm_tf(t, d):
    """diffusion_tf/nn.py get_timestep_embedding: log(10000)/(half_dim - 1), concat [sin, cos]."""
    half = d // 2
    step = math.log(10000) / (half - 1)
    args = t[:, None] * np.exp(np.arange(half) * -step)[None]
    return np.concatenate([np.sin(args), np.cos(args)], axis=1)


def improved_diffusion(t, d, max_period=10000):
    """improved-diffusion nn.py timestep_embedding: exp(-ln(max_period) * arange(half) / half),
    concat [cos, sin], a zero column for odd d."""
    half = d // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half) / half)
    args = t[:, None] * freqs[None]
    emb = np.concatenate([np.cos(args), np.sin(args)], axis=-1)
    return np.concatenate([emb, np.zeros_like(emb[:, :1])], axis=-1) if d % 2 else emb


def edm_positional(x, num_channels, endpoint=False, max_positions=10000):
    """EDM training/networks.py PositionalEmbedding: freqs = (1/max_positions) ** (arange(C/2) /
    (C/2 - endpoint)); outer product; concat [cos, sin]."""
    freqs = np.arange(num_channels // 2) / (num_channels // 2 - (1 if endpoint else 0))
    freqs = (1 / max_positions) ** freqs
    x = np.outer(x, freqs)
    return np.concatenate([np.cos(x), np.sin(x)], axis=1)


def mae_1d(pos, d):
    """MAE util/pos_embed.py get_1d_sincos_pos_embed_from_grid: omega = 1 / 10000 ** (arange(D/2) / (D/2)),
    outer product, concat [sin, cos]."""
    omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
    out = np.einsum("m,d->md", pos, omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def edm_song_positional(x, c):
    """SongUNet (embedding_type="positional"): PositionalEmbedding(endpoint=True), then the two
    halves swapped (reshape(B, 2, -1).flip(1))."""
    emb = edm_positional(x, c, endpoint=True)
    return emb.reshape(len(x), 2, -1)[:, ::-1].reshape(len(x), c)


@pytest.mark.parametrize("dim", [8, 64, 128])
def test_vaswani_preset_is_the_paper(dim):
    assert np.abs(sinusoidal_embedding_np(T, dim, "vaswani") - vaswani_paper(T, dim)).max() < 1e-9


@pytest.mark.parametrize("dim", [8, 64, 128])
def test_ddpm_preset_is_diffusion_tf(dim):
    assert np.abs(sinusoidal_embedding_np(T, dim, "ddpm") - ddpm_tf(T, dim)).max() < 1e-9


@pytest.mark.parametrize("dim", [8, 63, 64, 320])
@pytest.mark.parametrize("name", ["adm", "ldm", "dit"])
def test_adm_preset_is_improved_diffusion(dim, name):
    assert np.abs(sinusoidal_embedding_np(T, dim, name) - improved_diffusion(T, dim)).max() < 1e-9


@pytest.mark.parametrize("dim", [8, 64, 256])
def test_edm_presets_are_edm_networks(dim):
    x = 0.25 * np.log(np.array([0.002, 0.5, 1.0, 80.0]))  # EDM feeds c_noise = ln(sigma) / 4
    assert np.abs(sinusoidal_embedding_np(x, dim, "edm") - edm_positional(x, dim)).max() < 1e-12
    assert np.abs(sinusoidal_embedding_np(x, dim, "edm_song") - edm_song_positional(x, dim)).max() < 1e-12


@pytest.mark.parametrize("dim", [8, 64, 1152])
def test_mae_preset_is_mae_pos_embed(dim):
    pos = np.array([0.0, 1.0, 5.0, 15.0, 31.0])
    assert np.abs(sinusoidal_embedding_np(pos, dim, "mae") - mae_1d(pos, dim)).max() < 1e-12


def test_gain_multiplies_the_output_and_diffusers_has_none():
    ours = sinusoidal_embedding_np(T, 16, "mae", gain=0.25)
    assert np.abs(ours - 0.25 * mae_1d(T, 16)).max() < 1e-12
    with pytest.raises(ValueError, match="no output gain"):
        convention_to_diffusers(Convention("concat", "sin", 0.0, gain=0.5))
    with pytest.raises(TypeError, match="gain must be a real number"):
        Convention(gain="1")


def test_diffusers_flags_round_trip():
    for flip in (False, True):
        for shift in (0, 1):
            conv = convention_from_diffusers(flip, shift, scale=2, max_period=500)
            assert conv == Convention("concat", "cos" if flip else "sin", shift, 500, 2)
            assert convention_to_diffusers(conv) == {
                "flip_sin_to_cos": flip,
                "downscale_freq_shift": shift,
                "scale": 2,
                "max_period": 500,
            }
    assert convention_from_diffusers() == PRESETS["ddpm"]  # the function's defaults
    assert convention_from_diffusers(True, 0) == PRESETS["adm"]  # UNet2DModel's defaults
    with pytest.raises(ValueError, match="only has the concatenated layout"):
        convention_to_diffusers("vaswani")


def test_get_convention_unknown_name():
    with pytest.raises(ValueError, match="convention must be one of"):
        get_convention("improved")


@pytest.mark.parametrize(
    "src, dst", [("adm", "ddpm_grid0_sin"), ("adm", "vaswani"), ("vaswani", "adm"), ("ddpm", "ddpm_interleaved_cos")]
)
@pytest.mark.parametrize("dim", [10, 11])
def test_permuting_the_first_linear_keeps_a_trained_model_identical(src, dst, dim):
    named = {
        "ddpm_grid0_sin": Convention("concat", "sin", 0),
        "ddpm_interleaved_cos": Convention("interleaved", "cos", 1),
    }
    src_c, dst_c = named.get(src, src), named.get(dst, dst)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(dim, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8)).double()
    t = np.array([0, 3, 250.5, 999])
    before = model(torch.from_numpy(sinusoidal_embedding_np(t, dim, src_c)))
    perm = layout_permutation(src_c, dst_c, dim)
    with torch.no_grad():
        model[0].weight.copy_(model[0].weight[:, torch.from_numpy(perm)])
    after = model(torch.from_numpy(sinusoidal_embedding_np(t, dim, dst_c)))
    assert torch.allclose(before, after, atol=1e-12)
    assert (
        not torch.allclose(before, model(torch.from_numpy(sinusoidal_embedding_np(t, dim, src_c))), atol=1e-6)
        or src_c == dst_c
    )


def test_no_permutation_between_different_grids():
    with pytest.raises(ValueError, match=r"no column permutation.*freq_shift: 1.0 vs 0.0"):
        layout_permutation("ddpm", "adm", 64)
    with pytest.raises(ValueError, match="max_period: 10000.0 vs 100"):
        layout_permutation("adm", Convention("concat", "cos", 0, 100), 64)
