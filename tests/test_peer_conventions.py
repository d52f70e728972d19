"""Conventions of codebases beyond diffusers, against their code: the installed package where it can be
imported here (x-transformers), else a transcription that cites its file."""

from __future__ import annotations

import math

import pytest
import torch

from timestep_embed import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, sinusoidal_embedding

T = torch.tensor([0.0, 1.0, 7.0, 99.5, 500.0, 999.0])


def lucidrains_sinusoidal_pos_emb(x, dim, theta=10000):
    """lucidrains/denoising-diffusion-pytorch denoising_diffusion_pytorch.py ``SinusoidalPosEmb``."""
    half_dim = dim // 2
    emb = math.log(theta) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim) * -emb)
    emb = x[:, None] * emb[None, :]
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


def lucidrains_random_or_learned(x, weights):
    """lucidrains ``RandomOrLearnedSinusoidalPosEmb.forward``: ``[x | sin | cos]`` of ``(x * w) * 2 pi``."""
    x = x[:, None]
    freqs = x * weights[None, :] * 2 * math.pi
    return torch.cat((x, torch.cat((freqs.sin(), freqs.cos()), dim=-1)), dim=-1)


def edm_positional_embedding(x, num_channels, max_positions=10000, endpoint=False):
    """NVlabs/edm training/networks.py ``PositionalEmbedding.forward`` (torch, float32)."""
    freqs = torch.arange(start=0, end=num_channels // 2, dtype=torch.float32)
    freqs = freqs / (num_channels // 2 - (1 if endpoint else 0))
    freqs = (1 / max_positions) ** freqs
    x = x.ger(freqs.to(x.dtype))
    return torch.cat([x.cos(), x.sin()], dim=1)


def k_diffusion_fourier_features(x, weight):
    """crowsonkb/k-diffusion k_diffusion/layers.py ``FourierFeatures.forward``."""
    f = 2 * math.pi * x @ weight.T
    return torch.cat([f.cos(), f.sin()], dim=-1)


def flux_timestep_embedding(t, dim, max_period=10000, time_factor=1000.0):
    """black-forest-labs/flux src/flux/modules/layers.py ``timestep_embedding``."""
    t = time_factor * t
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    if torch.is_floating_point(t):
        embedding = embedding.to(t)
    return embedding


@pytest.mark.parametrize("dim", [7, 32, 33])
def test_odd_widths_without_the_zero_column_as_lucidrains_and_edm(dim):
    ours = sinusoidal_embedding(T, dim, "ddpm", pad_odd=False)
    assert ours.shape == (len(T), 2 * (dim // 2))
    # same math, other float32 operations (a multiply by -ln(P)/(h-1) there, a divide here)
    torch.testing.assert_close(ours, lucidrains_sinusoidal_pos_emb(T, dim), rtol=0, atol=2e-4)
    c_noise = torch.log(torch.tensor([0.002, 0.5, 80.0])) / 4
    edm = sinusoidal_embedding(c_noise, dim, "edm", pad_odd=False)
    torch.testing.assert_close(edm, edm_positional_embedding(c_noise, dim), rtol=0, atol=1e-6)
    module = SinusoidalEmbedding(dim, "ddpm", pad_odd=False)
    assert module.out_dim == 2 * (dim // 2)
    assert TimestepEmbedder(16, time_proj=module).time_embedding.linear_1.in_features == module.out_dim


def test_lucidrains_random_or_learned_sinusoid_is_fourier_with_the_input_first():
    torch.manual_seed(0)
    ours = FourierEmbedding(16, std=1.0, first="sin", include_input=True)
    x = torch.rand(5)
    assert ours.out_dim == 17
    assert torch.equal(ours(x), lucidrains_random_or_learned(x, ours.weight))


@pytest.mark.parametrize("in_features", [1, 3])
def test_fourier_of_several_features_as_k_diffusion(in_features):
    torch.manual_seed(0)
    ours = FourierEmbedding(8, std=1.0, first="cos", in_features=in_features)
    x = torch.randn(4, in_features)  # k-diffusion passes c_noise as [B, 1]
    assert torch.equal(ours(x), k_diffusion_fourier_features(x, ours.weight))
    assert ours(torch.randn(2, 3, in_features)).shape == (2, 3, 8)
    with pytest.raises(ValueError, match=rf"x must be \[\.\.\., {in_features}\] \(in_features\)"):
        ours(torch.randn(4, in_features + 1))


def test_flux_forms_the_scaled_timestep_in_bfloat16():
    sigma = torch.tensor([0.99, 0.75, 0.5, 0.1]).to(torch.bfloat16)
    theirs = flux_timestep_embedding(sigma, 256)
    ours = sinusoidal_embedding(sigma, 256, "adm", scale=1000, scale_in_input_dtype=True, dtype=torch.bfloat16)
    assert torch.equal(ours, theirs)
    with pytest.warns(UserWarning):
        inside = sinusoidal_embedding(sigma, 256, "adm", scale=1000, dtype=torch.bfloat16)
    assert not torch.equal(inside, theirs)  # 0.98828125 * 1000 kept as 988.28 in the float32 phase


def test_output_gain_as_x_transformers_scaled_sinusoid():
    x_transformers = pytest.importorskip("x_transformers.x_transformers")
    dim = 64
    theirs = x_transformers.ScaledSinusoidalEmbedding(dim)
    pos = torch.arange(50)
    with torch.no_grad():
        expected = theirs(torch.zeros(1, 50, dim))
    ours = sinusoidal_embedding(pos, dim, "mae", gain=float(theirs.scale))
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "time_proj",
    [
        lambda: SinusoidalEmbedding(33, "ddpm", pad_odd=False, gain=0.5),
        lambda: SinusoidalEmbedding(16, "adm", scale=1000, scale_in_input_dtype=True),
        lambda: FourierEmbedding(16, std=1.0, include_input=True, learnable=True),
        lambda: FourierEmbedding(16, first="cos", in_features=1),
    ],
    ids=["odd-gain", "flux", "lucidrains", "k-diffusion"],
)
def test_embedders_with_these_options_save_and_load(time_proj, tmp_path):
    torch.manual_seed(0)
    embedder = TimestepEmbedder(32, time_proj=time_proj())
    x = torch.rand(3, 1) if getattr(embedder.time_proj, "in_features", None) else torch.rand(3)
    embedder.save_pretrained(tmp_path / "e")
    again = TimestepEmbedder.from_pretrained(tmp_path / "e")
    assert torch.equal(again(x), embedder(x))
    assert again.time_proj.extra_repr() == embedder.time_proj.extra_repr()
