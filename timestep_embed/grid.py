"""Sinusoidal position embeddings of patch grids (images 2-D, videos 3-D) on the core.

Every grid embedding in use is the 1-D sinusoid of each coordinate, side by side: DiT, PixArt and
SD3 (diffusers ``get_2d_sincos_pos_embed``), CogVideoX (``get_3d_sincos_pos_embed``), MAE
(``util/pos_embed.py``), timm (``build_sincos2d_pos_embed``). They differ in three choices, each an
argument here: which coordinate comes first, how coordinates are scaled (diffusers divides by
``size / base_size`` and an interpolation scale), and how the blocks are grouped (per axis
``[sin x | cos x | sin y | cos y]`` or per function ``[sin x | sin y | cos x | cos y]``, timm's default).
The 1-D sinusoid is [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding] of the ``"mae"`` preset
(``[sin | cos]``, shift 0), in float64 by default as diffusers computes these tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .checks import check_choice, check_device, check_float_dtype, check_real
from .conventions import Convention, resolve_convention
from .guards import as_tensor
from .sinusoidal import sinusoidal_embedding

__all__ = ["grid_positions", "grid_embedding", "patch_grid_embedding", "video_grid_embedding"]

GROUPS = ("axis", "function")


def _sizes(value, name: str, count: int) -> tuple[int, ...]:
    sizes = (value,) * count if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(sizes) != count or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"{name} must be a positive int or {count} positive ints, got {value!r}")
    return sizes


def grid_positions(*sizes: int, device=None) -> torch.Tensor:
    """The float32 coordinates of a grid, ``[prod(sizes), len(sizes)]``: row ``r`` holds the indices
    ``(i, j, ...)`` of cell ``r`` in row-major order (the last axis varies fastest)."""
    if not sizes:
        raise ValueError("grid_positions needs at least one size, e.g. grid_positions(16, 16)")
    _sizes(sizes, "sizes", len(sizes))
    device = check_device(device)
    axes = [torch.arange(s, dtype=torch.float32, device=device) for s in sizes]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(sizes))


def grid_embedding(
    positions: torch.Tensor,
    dims: Sequence[int],
    convention: str | Convention = "mae",
    *,
    group: str = "axis",
    precise: bool = True,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The 1-D sinusoid of each coordinate, side by side: ``positions [N, A] -> [N, sum(dims)]``.

    Args:
        positions: one row per token, one column per axis, in the order the blocks should appear.
        dims: the width of each axis' block (``A`` even ints).
        convention: the 1-D sinusoid (default ``"mae"``: ``[sin | cos]``, shift 0).
        group: ``"axis"``: ``[axis 0 | axis 1 | ...]``, each block in the convention's layout;
            ``"function"``: the first function of every axis, then the second (``[sin x | sin y | cos x |
            cos y]``; concat layouts only).
        precise: float64 phase and sin/cos (diffusers' and MAE's tables are float64), rounded once.
        dtype: the output dtype.
    """
    positions = as_tensor(positions, name="positions")
    if positions.dim() != 2:
        raise ValueError(f"positions must be [N, axes], got shape {tuple(positions.shape)}")
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"dims must be a list of ints, one block width per axis, got {dims!r}")
    dims = list(dims)
    bad = [d for d in dims if isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2]
    if len(dims) != positions.shape[1] or bad:
        raise ValueError(f"dims must be {positions.shape[1]} even ints >= 2 (one per axis), got {dims!r}")
    check_choice(group, "group", GROUPS)
    conv = resolve_convention(convention)
    if group == "function" and conv.layout != "concat":
        raise ValueError(f"group='function' splits each block into its two halves; {conv} is {conv.layout!r}")
    blocks = [sinusoidal_embedding(positions[:, a], d, conv, precise=precise, dtype=dtype) for a, d in enumerate(dims)]
    if group == "axis":
        return torch.cat(blocks, dim=-1)
    halves = [b.chunk(2, dim=-1) for b in blocks]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=-1)


def patch_grid_embedding(
    dim: int,
    grid_size: int | Sequence[int],
    *,
    base_size: float = 16,
    interpolation_scale: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The 2-D table of diffusers' ``PatchEmbed`` (DiT, PixArt, SD3): ``[height * width, dim]``.

    Cell ``(i, j)`` (row ``i * width + j``) holds ``[mae(x_j, dim/2) | mae(y_i, dim/2)]`` with
    ``x_j = j / (width / base_size) / interpolation_scale`` and ``y_i`` likewise: the column coordinate
    first, as diffusers' ``get_2d_sincos_pos_embed`` (its ``emb_h`` encodes the column). ``grid_size``
    is ``height`` or ``(height, width)``.
    """
    height, width = _sizes(grid_size, "grid_size", 2)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 4 or dim % 4:
        raise ValueError(f"dim must be a multiple of 4 (two axes of sin/cos pairs), got {dim!r}")
    base_size = check_real(base_size, "base_size", positive=True)
    interpolation_scale = check_real(interpolation_scale, "interpolation_scale", positive=True)
    check_float_dtype(dtype)
    cells = grid_positions(height, width)
    scale = torch.tensor([width, height], dtype=torch.float32) / base_size
    xy = cells[:, [1, 0]] / scale / interpolation_scale  # float32, in diffusers' order of operations
    return grid_embedding(xy, [dim // 2, dim // 2], "mae", dtype=dtype)


def video_grid_embedding(
    dim: int,
    spatial_size: int | Sequence[int],
    temporal_size: int,
    *,
    spatial_interpolation_scale: float = 1.0,
    temporal_interpolation_scale: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The 3-D table of diffusers' ``get_3d_sincos_pos_embed`` (CogVideoX): ``[frames, height * width, dim]``.

    ``[mae(t, dim/4) | mae(x, 3 dim/8) | mae(y, 3 dim/8)]`` with ``t = frame / temporal_interpolation_scale``
    and ``x, y`` the column and row indices over ``spatial_interpolation_scale``; ``spatial_size`` is
    ``(width, height)`` in diffusers' order, or one int.
    """
    width, height = _sizes(spatial_size, "spatial_size", 2)
    (frames,) = _sizes(temporal_size, "temporal_size", 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 16 or dim % 16:
        raise ValueError(f"dim must be a multiple of 16 (a quarter for time, 3/8 per spatial axis), got {dim!r}")
    spatial_interpolation_scale = check_real(spatial_interpolation_scale, "spatial_interpolation_scale", positive=True)
    temporal_interpolation_scale = check_real(
        temporal_interpolation_scale, "temporal_interpolation_scale", positive=True
    )
    check_float_dtype(dtype)
    cells = grid_positions(height, width)
    spatial = grid_embedding(cells[:, [1, 0]] / spatial_interpolation_scale, [3 * dim // 8] * 2, dtype=dtype)
    steps = torch.arange(frames, dtype=torch.float32)[:, None] / temporal_interpolation_scale
    temporal = grid_embedding(steps, [dim // 4], dtype=dtype)
    return torch.cat(
        [temporal[:, None, :].expand(-1, height * width, -1), spatial[None].expand(frames, -1, -1)], dim=-1
    )
