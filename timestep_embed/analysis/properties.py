"""The theory of the sinusoidal embedding, checked on real numbers.

With ``h = dim // 2``, frequencies ``w_k`` ([`frequencies_np`][timestep_embed.frequencies_np]), the
convention's ``scale`` s and ``gain`` g, every convention holds the pairs ``g sin(s p w_k), g cos(s p w_k)``, so

* bounds: every entry lies in [-|g|, |g|] and ``|PE(p)| = |g| sqrt(h)`` for every p;
* relative position: ``PE(p) . PE(q) = g^2 sum_k cos(s (p - q) w_k)``: a function of the offset only,
  hence ``|PE(p) - PE(q)|^2 = 4 g^2 sum_k sin^2(s (p - q) w_k / 2)`` too;
* rotation: ``PE(p + k) = M_k PE(p)`` with ``M_k`` orthogonal, independent of p, made of 2x2 blocks
  ``[[cos, sin], [-sin, cos]](s k w_j)`` acting on the (sin, cos) columns of frequency j, wherever
  the layout puts them (an odd dim's zero column is mapped to itself);
* wavelength: the columns of frequency k repeat every ``2 pi / (s w_k)`` positions.

Everything is float64 numpy. ``precision="float32"`` evaluates the embedding with the torch path
exactly as diffusers does (float32 phases) and ``"float32_precise"`` with float64 phases rounded once,
to show what float32 costs. Positions are arrays of any shape ``[...]``; embeddings are ``[..., dim]``.
[`uniqueness`][timestep_embed.analysis.uniqueness] takes any embedding matrix ``[N, d]``, so the naive schemes reuse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..checks import check_choice, check_int, check_real, real_array
from ..conventions import Convention, resolve_convention
from ..guards import check_dim
from ..sinusoidal import frequencies_np, sinusoidal_embedding, sinusoidal_embedding_np

__all__ = [
    "PRECISIONS", "Bounds", "Uniqueness", "embed", "bounds", "uniqueness", "position_uniqueness", "dot_by_offset",
    "distance_by_offset", "relative_identity", "relative_identity_error", "rotation_matrix", "rotation_error",
    "wavelengths", "angular_frequencies", "positions_array",
]  # fmt: skip

PRECISIONS = ("float64", "float32", "float32_precise")


def angular_frequencies(dim: int, conv: Convention) -> np.ndarray:
    """``s * w_k`` [h]: the phase advance per unit of the fed value, float64."""
    return conv.scale * frequencies_np(dim, conv.freq_shift, conv.max_period)


def positions_array(values, name: str) -> np.ndarray:
    """``values`` as a float64 array of any shape; TypeError/ValueError naming ``name`` unless finite numbers."""
    array = real_array(values, name).astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite real numbers, got {values!r}")
    return array


def embed(positions, dim: int, convention: str | Convention = "adm", *, precision: str = "float64") -> np.ndarray:
    """The embedding ``[..., dim]`` of ``positions [...]`` computed at ``precision``, as float64.

    ``"float64"``: the numpy reference; ``"float32"``: [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding]
    (diffusers' float32 arithmetic); ``"float32_precise"``: the same with ``precise=True``.
    """
    p = positions_array(positions, "positions")
    conv = resolve_convention(convention)
    if precision == "float64":
        return sinusoidal_embedding_np(p, dim, conv)
    check_choice(precision, "precision", PRECISIONS)
    out = sinusoidal_embedding(
        torch.from_numpy(p), dim, conv, dtype=torch.float32, precise=precision == "float32_precise"
    )
    return out.double().numpy()


# ------------------------------------------------------------------------------------ bounds
@dataclass(frozen=True)
class Bounds:
    """Extremes over the positions checked: entries in [min, max], norms in [norm_min, norm_max]."""

    min: float
    max: float
    norm_min: float
    norm_max: float
    expected_norm: float  # |g| sqrt(h) for a sinusoid of gain g
    limit: float = 1.0  # |g|: the entries' bound

    @property
    def holds(self) -> bool:
        """Entries in [-|g|, |g|] and every norm within 1e-9 of |g| sqrt(h)."""
        tol = 1e-9 * max(1.0, self.expected_norm)
        return (
            self.min >= -self.limit * (1 + 1e-12)
            and self.max <= self.limit * (1 + 1e-12)
            and abs(self.norm_min - self.expected_norm) <= tol
            and abs(self.norm_max - self.expected_norm) <= tol
        )


def bounds(positions, dim: int, convention: str | Convention = "adm") -> Bounds:
    """Entry range and norm range of the embedding over ``positions [...]``."""
    emb = embed(positions, dim, convention).reshape(-1, dim)
    norms, gain = np.linalg.norm(emb, axis=-1), abs(resolve_convention(convention).gain)
    expected = gain * math.sqrt(dim // 2)
    return Bounds(float(emb.min()), float(emb.max()), float(norms.min()), float(norms.max()), expected, gain)


# -------------------------------------------------------------------------------- uniqueness
@dataclass(frozen=True)
class Uniqueness:
    """Pairwise distances among the rows of an embedding matrix.

    ``closest``: the (i, j) positions at ``min_distance``; ``first_collision``: the first pair
    (i < j, smallest j, then smallest i) strictly closer than ``tol``, None if none; ``num_collisions``: how
    many pairs are closer than ``tol``.
    """

    min_distance: float
    closest: tuple[float, float]
    first_collision: tuple[float, float] | None
    num_collisions: int
    tol: float

    @property
    def unique(self) -> bool:
        return self.first_collision is None


def uniqueness(embeddings, positions=None, tol: float = 1e-3, *, max_rows: int = 20000) -> Uniqueness:
    """Minimum pairwise Euclidean distance among the rows of ``embeddings [N, d]`` (N >= 2).

    ``positions [N]`` labels the rows (default ``0 .. N-1``). Squared distances come from the Gram
    matrix in row blocks; every pair that could be the minimum or a collision within the Gram
    matrix's rounding error is then recomputed from direct float64 differences.
    """
    emb = positions_array(embeddings, "embeddings")
    max_rows = check_int(max_rows, "max_rows", 2)
    tol = check_real(tol, "tol", minimum=0)
    if emb.ndim == 1:
        emb = emb[:, None]
    if emb.ndim != 2 or not 2 <= emb.shape[0] <= max_rows:
        raise ValueError(f"embeddings must be [N, d] with 2 <= N <= {max_rows}, got shape {emb.shape}")
    n = emb.shape[0]
    labels = np.arange(n) if positions is None else real_array(positions, "positions").reshape(-1)
    if labels.shape[0] != n:
        raise ValueError(f"positions must have one label per row ({n}), got {labels.shape[0]}")
    sq = (emb**2).sum(-1)
    slack = 1e-12 * max(1.0, float(sq.max())) * emb.shape[1]  # bound on the Gram rounding error
    exact = lambda i, j: np.sqrt(((emb[i] - emb[j]) ** 2).sum(-1))  # noqa: E731
    best, closest = np.inf, (0, 1)
    collisions: list[tuple[int, int]] = []
    block = max(1, 2_000_000 // n)
    for start in range(0, n, block):
        stop = min(n, start + block)
        d2 = sq[start:stop, None] + sq[None, :] - 2 * emb[start:stop] @ emb.T  # [b, n]
        d2[np.arange(n)[None, :] <= np.arange(start, stop)[:, None]] = np.inf  # pairs i < j only
        if not np.isfinite(d2.min()):  # the last row alone: no pair left
            continue
        i, j = np.nonzero(d2 <= d2.min() + 2 * slack)
        dist = exact(start + i, j)
        if dist.min() < best:
            best, closest = float(dist.min()), (start + int(i[dist.argmin()]), int(j[dist.argmin()]))
        i, j = np.nonzero(d2 < tol**2 + 2 * slack)
        keep = exact(start + i, j) < tol
        collisions += zip((j[keep]).tolist(), (start + i[keep]).tolist(), strict=True)
    label = lambda i: labels[i].item()  # noqa: E731
    first = min(collisions) if collisions else None  # smallest j, then smallest i
    collision = None if first is None else (label(first[1]), label(first[0]))
    return Uniqueness(best, (label(closest[0]), label(closest[1])), collision, len(collisions), tol)


def position_uniqueness(
    n_positions: int, dim: int, convention: str | Convention = "adm", tol: float = 1e-3
) -> Uniqueness:
    """[`uniqueness`][timestep_embed.analysis.uniqueness] of the positions ``0 .. n_positions - 1`` of a sinusoid in O(N
    h), not O(N^2 h): the distance of two positions depends on their offset only
    ([`distance_by_offset`][timestep_embed.analysis.distance_by_offset]), so the closest pair and the first collision
    are ``(0, d)`` for the smallest such offset d."""
    check_int(n_positions, "n_positions", 2)
    tol = check_real(tol, "tol", minimum=0)
    dist = np.concatenate(
        [
            distance_by_offset(np.arange(lo, min(lo + 4096, n_positions)), dim, convention)
            for lo in range(1, n_positions, 4096)
        ]
    )  # offsets 1 .. N-1
    hits = np.flatnonzero(dist < tol) + 1
    first = (0, int(hits[0])) if hits.size else None
    closest = (0, int(np.argmin(dist)) + 1)
    return Uniqueness(float(dist.min()), closest, first, int((n_positions - hits).sum()), tol)  # N - d pairs


# ------------------------------------------------------------------------ relative position
def dot_by_offset(offsets, dim: int, convention: str | Convention = "adm") -> np.ndarray:
    """``g^2 sum_k cos(s d w_k)`` for ``offsets d [...]``: the dot product of any two positions d apart."""
    d, conv = positions_array(offsets, "offsets"), resolve_convention(convention)
    return conv.gain**2 * np.cos(d[..., None] * angular_frequencies(dim, conv)).sum(-1)


def distance_by_offset(offsets, dim: int, convention: str | Convention = "adm") -> np.ndarray:
    """``|PE(p + d) - PE(p)| = 2 |g| sqrt(sum_k sin^2(s d w_k / 2))`` for ``offsets d [...]``, any p."""
    d, conv = positions_array(offsets, "offsets"), resolve_convention(convention)
    half_phase = 0.5 * d[..., None] * angular_frequencies(dim, conv)
    return 2.0 * abs(conv.gain) * np.sqrt((np.sin(half_phase) ** 2).sum(-1))


def relative_identity(
    p, q, dim: int, convention: str | Convention = "adm", *, precision: str = "float64"
) -> tuple[np.ndarray, np.ndarray]:
    """Both sides of ``PE(p) . PE(q) = g^2 sum_k cos(s (p - q) w_k)``, each ``[...]`` (p, q broadcast).

    The left side uses embeddings at ``precision``, accumulated in float64; the right is float64.
    """
    p, q = np.broadcast_arrays(positions_array(p, "p"), positions_array(q, "q"))
    lhs = (embed(p, dim, convention, precision=precision) * embed(q, dim, convention, precision=precision)).sum(-1)
    return lhs, dot_by_offset(p - q, dim, convention)


def relative_identity_error(
    p, q, dim: int, convention: str | Convention = "adm", *, precision: str = "float64"
) -> float:
    """Max |lhs - rhs| of [`relative_identity`][timestep_embed.analysis.relative_identity] over the broadcast p, q."""
    lhs, rhs = relative_identity(p, q, dim, convention, precision=precision)
    return float(np.max(np.abs(lhs - rhs)))


# ---------------------------------------------------------------------------------- rotation
def rotation_matrix(k: float, dim: int, convention: str | Convention = "adm") -> np.ndarray:
    """``M_k [dim, dim]`` with ``PE(p + k) = M_k @ PE(p)`` for every p; float64, orthogonal.

    For frequency j with phase ``a = s k w_j``, sin column i_s and cos column i_c (placed by the
    layout): ``sin(x + a) = cos(a) sin(x) + sin(a) cos(x)`` and ``cos(x + a) = cos(a) cos(x) -
    sin(a) sin(x)``. An odd dim's last (always zero) column maps to itself, so ``M_0 = I`` and
    ``M_a M_b = M_{a+b}``.
    """
    conv = resolve_convention(convention)
    phase = check_real(k, "k") * angular_frequencies(dim, conv)
    m = np.zeros((dim, dim))
    for j, a in enumerate(phase):
        i_s, i_c = conv.column_of("sin", j, dim), conv.column_of("cos", j, dim)
        m[i_s, i_s], m[i_s, i_c] = math.cos(a), math.sin(a)
        m[i_c, i_s], m[i_c, i_c] = -math.sin(a), math.cos(a)
    if dim % 2 == 1:
        m[-1, -1] = 1.0
    return m


def rotation_error(p, k: float, dim: int, convention: str | Convention = "adm", *, precision: str = "float64") -> float:
    """Max |PE(p + k) - M_k PE(p)| over ``p [...]``, embeddings at ``precision``, M_k float64."""
    p, k = positions_array(p, "p"), check_real(k, "k")
    shifted = embed(p + k, dim, convention, precision=precision)
    rotated = embed(p, dim, convention, precision=precision) @ rotation_matrix(k, dim, convention).T
    return float(np.max(np.abs(shifted - rotated)))


# -------------------------------------------------------------------------------- wavelengths
def wavelengths(dim: int, convention: str | Convention = "adm") -> np.ndarray:
    """Period ``2 pi / (s w_k)`` of each column ``[dim]``, in the layout's column order (inf for an
    odd dim's zero column): how many units of the fed value until that column repeats."""
    conv = resolve_convention(convention)
    check_dim(dim, conv.freq_shift)
    out = np.full(dim, np.inf)
    for j, w in enumerate(angular_frequencies(dim, conv)):
        for function in ("sin", "cos"):
            out[conv.column_of(function, j, dim)] = 2 * math.pi / abs(w)  # a period: a negative scale flips the sign
    return out
