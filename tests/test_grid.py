"""Patch-grid position embeddings against diffusers (run time) and a transcription of timm's."""

from __future__ import annotations

import pytest
import torch

from timestep_embed import grid_embedding, grid_positions, patch_grid_embedding, video_grid_embedding

diffusers_embeddings = pytest.importorskip("diffusers.models.embeddings")


@pytest.mark.parametrize(
    "dim, grid_size, base_size, interpolation",
    [(64, 8, 16, 1.0), (1152, 16, 16, 1.0), (96, (4, 6), 4, 2.0), (1536, 24, 64, 1.0)],
)
def test_patch_grid_embedding_is_diffusers_get_2d_sincos_pos_embed(dim, grid_size, base_size, interpolation):
    theirs = diffusers_embeddings.get_2d_sincos_pos_embed(
        dim, grid_size, base_size=base_size, interpolation_scale=interpolation, output_type="pt"
    )
    options = {"base_size": base_size, "interpolation_scale": interpolation}
    ours = patch_grid_embedding(dim, grid_size, **options, dtype=torch.float64)
    assert ours.shape == theirs.shape
    # both in float64; the frequencies are exp(-ln(1e4) k / h) here, 1 / 1e4 ** (k / h) there
    torch.testing.assert_close(ours, theirs.double(), rtol=0, atol=1e-12)
    as_patch_embed = patch_grid_embedding(dim, grid_size, **options)
    torch.testing.assert_close(as_patch_embed, theirs.float(), rtol=0, atol=1.2e-7)  # PatchEmbed keeps .float()


@pytest.mark.parametrize("dim, spatial, frames", [(64, 4, 3), (128, (6, 4), 5)])
def test_video_grid_embedding_is_diffusers_get_3d_sincos_pos_embed(dim, spatial, frames):
    theirs = diffusers_embeddings.get_3d_sincos_pos_embed(
        dim, spatial, frames, spatial_interpolation_scale=1.5, temporal_interpolation_scale=2.0, output_type="pt"
    )
    ours = video_grid_embedding(
        dim, spatial, frames, spatial_interpolation_scale=1.5, temporal_interpolation_scale=2.0, dtype=torch.float64
    )
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs.double(), rtol=0, atol=1e-12)


def timm_build_sincos2d_pos_embed(feat_shape, dim, temperature=10000.0, interleave_sin_cos=False):
    """Transcribed from timm/layers/pos_embed_sincos.py ``build_sincos2d_pos_embed`` (timm 1.0):
    bands 1 / temperature ** (arange(dim // 4) / (dim // 4)), an (h, w) 'ij' grid, stacked sin/cos."""
    pos_dim = dim // 4
    bands = 1.0 / (temperature ** (torch.arange(pos_dim, dtype=torch.float32) / pos_dim))
    grid = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in feat_shape], indexing="ij"))
    pos2 = grid.flatten(1).transpose(0, 1).unsqueeze(-1) * bands.unsqueeze(0)
    stack_dim = 2 if interleave_sin_cos else 1
    return torch.stack([torch.sin(pos2), torch.cos(pos2)], dim=stack_dim).flatten(1)


@pytest.mark.parametrize("interleave", [False, True])
def test_grid_embedding_builds_timm_tables(interleave):
    h, w, dim = 5, 7, 64
    theirs = timm_build_sincos2d_pos_embed([h, w], dim, interleave_sin_cos=interleave)
    ours = grid_embedding(grid_positions(h, w), [dim // 2, dim // 2], group="axis" if interleave else "function")
    # timm rounds its bands and phases in float32; ours are float64 rounded once
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)


def test_grid_positions_and_errors():
    assert grid_positions(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    with pytest.raises(ValueError, match=r"dims must be 2 even ints >= 2 \(one per axis\), got \[4\]"):
        grid_embedding(grid_positions(2, 3), [4])
    with pytest.raises(ValueError, match="group must be one of"):
        grid_embedding(grid_positions(2, 3), [4, 4], group="pairs")
    with pytest.raises(ValueError, match="group='function' splits"):
        grid_embedding(grid_positions(2, 3), [4, 4], "vaswani", group="function")
    with pytest.raises(ValueError, match="dim must be a multiple of 4"):
        patch_grid_embedding(30, 4)
    with pytest.raises(ValueError, match="grid_size must be a positive int or 2 positive ints"):
        patch_grid_embedding(32, (4, 0))
    with pytest.raises(ValueError, match="dim must be a multiple of 16"):
        video_grid_embedding(24, 4, 2)
