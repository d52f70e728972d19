"""The theory of the sinusoid on real numbers: every identity in float64 (<= 1e-9) and float32 (<= 1e-5)."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.analysis import coverage, properties
from timestep_embed.conventions import PRESETS, Convention
from timestep_embed.sinusoidal import sinusoidal_embedding_np


@st.composite
def conventions(draw):
    """Any layout / first / shift / max_period / scale, with a dim that is valid for the shift."""
    shift = draw(st.sampled_from([0.0, 1.0, 0.5]))
    dim = draw(st.integers(min_value=4 if shift else 1, max_value=512))
    conv = Convention(
        layout=draw(st.sampled_from(["concat", "interleaved"])),
        first=draw(st.sampled_from(["sin", "cos"])),
        freq_shift=shift,
        max_period=draw(st.sampled_from([10.0, 1000.0, 10000.0, 1e5])),
        scale=draw(st.sampled_from([1.0, 0.5, 2.0])),
    )
    return dim, conv


positions = st.one_of(st.integers(-10_000, 10_000), st.floats(-10_000, 10_000, allow_nan=False))
FAST = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------------------------- identities
@FAST
@given(conventions(), positions, positions)
def test_relative_identity_float64(dc, p, q):
    dim, conv = dc
    assert properties.relative_identity_error(p, q, dim, conv) <= 1e-9


@FAST
@given(conventions(), positions, positions)
def test_relative_identity_float32(dc, p, q):
    dim, conv = dc
    assert properties.relative_identity_error(p, q, dim, conv, precision="float32_precise") <= 1e-5


def test_relative_identity_for_all_pairs_at_once():
    p = np.arange(0, 1000, 9.0)
    lhs, rhs = properties.relative_identity(p[:, None], p[None, :], 128, "adm")
    assert lhs.shape == (112, 112) and np.max(np.abs(lhs - rhs)) <= 1e-9
    assert np.allclose(np.diag(lhs), 64)  # |PE|^2 = h


def test_float32_diffusers_arithmetic_is_the_weak_spot():
    """diffusers' float32 phases err by ~ulp(t): 1e-4 in the dot product at t ~ 1000; the
    precise path (float64 phases, one rounding) stays far below 1e-5."""
    p = np.arange(0, 1000, 7.0)
    plain = properties.relative_identity_error(p[:, None], p[None, :], 128, "adm", precision="float32")
    precise = properties.relative_identity_error(p[:, None], p[None, :], 128, "adm", precision="float32_precise")
    assert precise <= 1e-5 < plain <= 1e-3
    assert (
        properties.relative_identity_error(np.arange(8.0)[:, None], np.arange(8.0), 128, "adm", precision="float32")
        <= 1e-5
    )


@FAST
@given(conventions(), positions, st.floats(-1000, 1000, allow_nan=False))
def test_rotation_float64_and_float32(dc, p, k):
    dim, conv = dc
    assert properties.rotation_error(p, k, dim, conv) <= 1e-9
    assert properties.rotation_error(p, k, dim, conv, precision="float32_precise") <= 1e-5


def test_rotation_is_independent_of_p():
    p = np.arange(-500.0, 1500.0, 3.5)
    for name in ("vaswani", "ddpm", "adm"):
        assert properties.rotation_error(p, 17, 129, name) <= 1e-9


@FAST
@given(conventions(), st.floats(-100, 100), st.floats(-100, 100))
def test_rotation_group(dc, a, b):
    dim, conv = dc
    ma, mb = properties.rotation_matrix(a, dim, conv), properties.rotation_matrix(b, dim, conv)
    assert np.allclose(ma @ mb, properties.rotation_matrix(a + b, dim, conv), atol=1e-9)
    assert np.allclose(ma @ ma.T, np.eye(dim), atol=1e-12)
    assert np.allclose(ma.T, properties.rotation_matrix(-a, dim, conv), atol=1e-12)


def test_rotation_blocks_follow_the_layout():
    # interleaved: 2x2 blocks on the diagonal; concat: frequency j couples columns j and h + j
    m = properties.rotation_matrix(1.0, 6, "vaswani")
    assert np.array_equal(m != 0, np.kron(np.eye(3), np.ones((2, 2))) != 0)
    m = properties.rotation_matrix(1.0, 7, "adm")  # odd: last column zero in PE, maps to itself
    h = 3
    for j in range(h):
        assert m[j, j] == m[h + j, h + j] == pytest.approx(math.cos(PRESETS["adm"].scale * 1.0 * 10000 ** (-j / h)))
    assert m[-1, -1] == 1 and not m[-1, :-1].any() and not m[:-1, -1].any()
    # adm has cos first: cos(x + a) = cos a cos x - sin a sin x
    assert m[0, h] == pytest.approx(-math.sin(1.0))
    assert np.array_equal(properties.rotation_matrix(0.0, 7, "ddpm"), np.eye(7))


# -------------------------------------------------------------------- bounds / uniqueness
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_bounds(name):
    b = properties.bounds(np.linspace(-1e4, 1e4, 2001), 127, name)
    assert b.holds and b.expected_norm == math.sqrt(63) and -1 <= b.min < b.max <= 1


def test_uniqueness_of_the_sinusoid_and_the_offset_formula():
    emb = sinusoidal_embedding_np(np.arange(1000), 128, "adm")
    u = properties.uniqueness(emb)
    assert u.unique and u.num_collisions == 0
    offsets = properties.distance_by_offset(np.arange(1, 1000), 128, "adm")
    assert u.min_distance == pytest.approx(offsets.min(), abs=1e-12)
    assert abs(u.closest[1] - u.closest[0]) == 1 + int(np.argmin(offsets))
    # |PE(p) - PE(q)| depends on p - q only and matches the direct difference
    assert np.linalg.norm(emb[700] - emb[300]) == pytest.approx(properties.distance_by_offset(400, 128, "adm"))


def test_one_frequency_collides_at_710():
    u = properties.uniqueness(sinusoidal_embedding_np(np.arange(1000), 2, "vaswani"), tol=1e-4)
    assert u.first_collision == (0, 710) and u.min_distance < 1e-4
    fast = properties.position_uniqueness(1000, 2, "vaswani", tol=1e-4)  # the offset formula agrees with all pairs
    assert (fast.first_collision, fast.num_collisions) == (u.first_collision, u.num_collisions) == ((0, 710), 290)
    assert fast.min_distance == pytest.approx(u.min_distance, rel=1e-6)


def test_position_uniqueness_scales_to_a_million_positions():
    u = properties.position_uniqueness(1_000_000, 128, "adm")
    assert u.unique and 0.5 < u.min_distance <= properties.position_uniqueness(1000, 128, "adm").min_distance
    with pytest.raises(ValueError, match="n_positions must be an int >= 2"):
        properties.position_uniqueness(1, 8)


def test_uniqueness_reports_labels_and_first_collision():
    emb = np.array([[0.0], [5.0], [1.0], [5.0], [0.0]])
    u = properties.uniqueness(emb, positions=[10, 11, 12, 13, 14], tol=0.5)
    assert u.first_collision == (11, 13) and u.num_collisions == 2 and u.min_distance == 0
    with pytest.raises(ValueError, match="one label per row"):
        properties.uniqueness(emb, positions=[1, 2])
    with pytest.raises(ValueError, match=r"\[N, d\] with 2 <= N"):
        properties.uniqueness(np.zeros((1, 3)))


def test_dot_by_offset_is_the_dot_product():
    assert properties.dot_by_offset(0, 10, "vaswani") == 5
    emb = sinusoidal_embedding_np([3.0, 250.5], 64, "ddpm")
    assert emb[0] @ emb[1] == pytest.approx(properties.dot_by_offset(247.5, 64, "ddpm"), abs=1e-10)


# ------------------------------------------------------------------------------ wavelengths
def test_wavelengths():
    w = properties.wavelengths(5, "vaswani")
    assert np.allclose(w[:4], [2 * np.pi, 2 * np.pi, 200 * np.pi, 200 * np.pi]) and w[4] == np.inf
    w = properties.wavelengths(8, "ddpm")  # shift 1: the last frequency has period 2 pi max_period
    assert w[3] == pytest.approx(2 * np.pi * 1e4) and w[7] == w[3]
    emb = properties.embed([0.3, 0.3 + w[2]], 8, "ddpm")  # each column repeats after its wavelength
    assert abs(emb[1, 2] - emb[0, 2]) < 1e-9 and abs(emb[1, 6] - emb[0, 6]) < 1e-9
    flipped = Convention("concat", "cos", 0.0, scale=-0.37)  # a negative scale: the same periods, positive
    assert np.array_equal(properties.wavelengths(8, flipped), properties.wavelengths(8, replace(flipped, scale=0.37)))


# ------------------------------------------------------------------------------ coverage
def test_coverage_warns_for_raw_unit_interval():
    with pytest.warns(coverage.CoverageWarning, match="Scale t by ~1000"):
        cov = coverage.frequency_coverage((0, 1), 128, "adm")
    assert cov.slow.all() and not cov.aliased.any() and cov.recommended_scale == pytest.approx(1000)
    assert cov.cycles_over_range.max() == pytest.approx(1 / (2 * np.pi))


def test_coverage_is_fine_after_x1000_and_for_indices():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert coverage.frequency_coverage((0, 1), 128, Convention(first="cos", scale=1000.0)).ok
        assert coverage.frequency_coverage((0, 999), 128, "ddpm", step=1).ok


def test_coverage_detects_aliasing():
    with pytest.warns(coverage.CoverageWarning, match="aliasing"):
        cov = coverage.frequency_coverage((0, 1), 128, Convention(scale=10_000.0))
    assert cov.aliased[0] and cov.max_scale == pytest.approx(np.pi * 1000)


def test_coverage_suggests_max_period_when_the_scale_is_already_right():
    cov = coverage.frequency_coverage((0, 99), 128, "adm", step=1, warn=False)
    assert not cov.ok and "max_period" in cov.messages[0]


# ------------------------------------------------------------------------------- errors
def test_clear_errors():
    with pytest.raises(ValueError, match="precision must be one of"):
        properties.embed([1], 8, precision="float16")
    with pytest.raises(ValueError, match="t_range"):
        coverage.frequency_coverage((1, 0))
    with pytest.raises(ValueError, match="step must be > 0"):
        coverage.frequency_coverage((0, 1), step=0)
    with pytest.raises(ValueError, match="finite"):
        properties.dot_by_offset([np.nan], 8)
    with pytest.raises(ValueError, match="denominator"):
        properties.rotation_matrix(1, 2, "ddpm")
    with pytest.raises(ValueError, match="convention must be one of"):
        properties.wavelengths(8, "vaswanii")


def test_uniqueness_never_pairs_a_row_with_itself():
    # 2449 rows: the last row block holds the last row alone (no pair i < j left in it)
    u = properties.uniqueness(np.random.default_rng(0).standard_normal((2449, 8)))
    assert u.min_distance > 0.1 and u.closest[0] < u.closest[1]


def test_the_properties_hold_with_an_output_gain():
    """x-transformers' ScaledSinusoidalEmbedding: the pairs are g sin, g cos with g = dim ** -0.5."""
    scaled = Convention("concat", "sin", 0.0, 10000.0, 1.0, 128**-0.5)
    assert properties.relative_identity_error(np.arange(50.0)[:, None], np.arange(50.0), 128, scaled) <= 1e-12
    assert properties.bounds(np.arange(100), 128, scaled).holds
    fast = properties.position_uniqueness(1000, 128, scaled, tol=0.5)
    direct = properties.uniqueness(properties.embed(np.arange(1000), 128, scaled), tol=0.5)
    assert fast.min_distance == pytest.approx(direct.min_distance) and fast.unique == direct.unique is False
