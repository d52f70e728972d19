"""Properties of the sinusoidal core (hypothesis), its input forms and dtypes, and its compute paths."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed import (
    PRESETS,
    Convention,
    LowPrecisionTimestepWarning,
    frequencies,
    frequencies_np,
    layout_permutation,
    sinusoidal,
    sinusoidal_embedding,
    sinusoidal_embedding_np,
)

from .fixtures.bits import same_bits

CONVENTIONS = [
    Convention(layout, first, shift)
    for layout in ("concat", "interleaved")
    for first in ("sin", "cos")
    for shift in (0, 1)
]
conventions = st.sampled_from(CONVENTIONS)
dims = st.integers(min_value=4, max_value=70)  # h >= 2, so freq_shift=1 is valid
batch_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@settings(max_examples=60, deadline=None)
@given(shape=batch_shapes, dim=dims, conv=conventions)
def test_any_batch_shape_gives_trailing_dim(shape, dim, conv):
    t = torch.rand(shape) * 1000
    emb = sinusoidal_embedding(t, dim, conv)
    assert emb.shape == (*shape, dim)
    assert emb.dtype == torch.float32
    flat = sinusoidal_embedding(t.reshape(-1), dim, conv)
    assert torch.equal(emb.reshape(-1, dim), flat)


@settings(max_examples=60, deadline=None)
@given(t=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40), dim=dims, conv=conventions)
def test_bounded_by_one(t, dim, conv):
    emb = sinusoidal_embedding(torch.tensor(t, dtype=torch.float64), dim, conv)
    assert float(emb.abs().max()) <= 1.0


@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("dim", [6, 7, 128])
def test_t_zero_is_ones_in_cos_columns_and_zeros_elsewhere(conv, dim):
    emb = sinusoidal_embedding([0], dim, conv)[0]
    cos_columns = [conv.column_of("cos", k, dim) for k in range(dim // 2)]
    expected = torch.zeros(dim)
    expected[cos_columns] = 1.0
    assert torch.equal(emb, expected)


@settings(max_examples=40, deadline=None)
@given(dim=dims, a=conventions, b=conventions, t=st.lists(st.floats(0, 1000), min_size=1, max_size=20))
def test_layouts_are_column_permutations_of_each_other(dim, a, b, t):
    b = Convention(b.layout, b.first, a.freq_shift)  # permutations exist within one grid
    perm = layout_permutation(a, b, dim)
    assert sorted(perm.tolist()) == list(range(dim))
    ea, eb = sinusoidal_embedding(t, dim, a), sinusoidal_embedding(t, dim, b)
    assert torch.equal(ea[:, perm], eb)


@settings(max_examples=40, deadline=None)
@given(half=st.integers(2, 40), conv=conventions, t=st.lists(st.floats(-500, 500), min_size=1, max_size=10))
def test_odd_dim_appends_a_zero_column_to_the_even_embedding(half, conv, t):
    odd = sinusoidal_embedding(t, 2 * half + 1, conv)
    even = sinusoidal_embedding(t, 2 * half, conv)
    assert torch.equal(odd[:, -1], torch.zeros(len(t)))
    assert torch.equal(odd[:, :-1], even)


@settings(max_examples=60, deadline=None)
@given(t=st.lists(st.floats(-4, 4), min_size=1, max_size=30), dim=dims, conv=conventions)
def test_float32_path_matches_float64_reference_for_small_t(t, dim, conv):
    # |t| <= 4: the float32 phase is off by at most half an ulp of 4, ~2.4e-7.
    emb = sinusoidal_embedding(t, dim, conv).double().numpy()
    assert np.abs(emb - sinusoidal_embedding_np(np.float32(t), dim, conv)).max() <= 1e-6


@settings(max_examples=60, deadline=None)
@given(
    t=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300),
    dim=st.integers(4, 300),
    conv=conventions,
    scale=st.sampled_from([1.0, 0.25, 1000.0]),
)
def test_precise_path_error_is_below_2e_7_up_to_1e6(t, dim, conv, scale):
    conv = Convention(conv.layout, conv.first, conv.freq_shift, scale=1.0)
    t = np.asarray(t) / scale
    emb = sinusoidal_embedding(t, dim, conv, scale=scale, precise=True).double().numpy()
    assert np.abs(emb - sinusoidal_embedding_np(t, dim, conv, scale=scale)).max() <= 2e-7


@pytest.mark.parametrize("n", [4, 3000])
@pytest.mark.parametrize("t_max, scale", [(1000.0, 1.0), (1e6, 1.0), (1000.0, 50.0)])
@pytest.mark.parametrize("conv, dim", [("adm", 640), ("vaswani", 257), ("ddpm", 33)])
def test_precise_path_stays_below_2e_7(n, t_max, scale, conv, dim):
    t = torch.rand(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) * t_max
    emb = sinusoidal_embedding(t, dim, conv, scale=scale, precise=True)
    assert emb.dtype == torch.float32
    assert np.abs(emb.double().numpy() - sinusoidal_embedding_np(t.numpy(), dim, conv, scale=scale)).max() <= 2e-7


def test_precise_integer_timesteps_are_float64_values_rounded_once():
    t = torch.randint(0, 1000, (3000,), generator=torch.Generator().manual_seed(0))
    emb = sinusoidal_embedding(t, 320, "adm", precise=True)
    error = np.abs(emb.double().numpy() - sinusoidal_embedding_np(t.numpy(), 320, "adm")).max()
    assert error <= 2.0**-25 * 1.01  # float64 values rounded once to float32: half an ulp of 1


@pytest.mark.parametrize("n", [4, 3000])
def test_float64_output_is_float64_accurate(n):
    t = torch.rand(n, dtype=torch.float64) * 1000
    emb = sinusoidal_embedding(t, 257, "vaswani", dtype=torch.float64)
    assert emb.dtype == torch.float64
    assert np.abs(emb.numpy() - sinusoidal_embedding_np(t.numpy(), 257, "vaswani")).max() <= 1e-12


def test_default_float32_path_has_the_expected_float32_phase_error():
    # The compatible path reproduces diffusers' float32 phase; its error grows with |t|. This
    # documents why `precise` exists: ~1e-2 at t ~ 1e6, while precise stays below 2e-7.
    t = torch.linspace(9e5, 1e6, 500, dtype=torch.float64)
    ref = sinusoidal_embedding_np(t.float().double().numpy(), 128, "adm")
    assert np.abs(sinusoidal_embedding(t.float(), 128, "adm").double().numpy() - ref).max() > 1e-3
    assert np.abs(sinusoidal_embedding(t.float(), 128, "adm", precise=True).double().numpy() - ref).max() < 2e-7


@pytest.mark.parametrize("value", [7, 7.0, [7], [[7]], np.array([7]), np.array(7.0), np.int32(7), torch.tensor(7)])
def test_input_forms_agree(value):
    emb = sinusoidal_embedding(value, 16, "adm")
    assert emb.shape == (*np.shape(value), 16)
    assert torch.equal(emb.reshape(16), sinusoidal_embedding(torch.tensor([7.0]), 16, "adm")[0])


def test_numpy_unsigned_and_float16_inputs():
    assert torch.equal(sinusoidal_embedding(np.array([3], dtype=np.uint8), 8), sinusoidal_embedding([3], 8))
    big = np.array([2**63 + 2**11], dtype=np.uint64)  # must not wrap to a negative int64
    assert torch.equal(sinusoidal_embedding(big, 8), sinusoidal_embedding(np.array([2.0**63 + 2**11]), 8))
    with pytest.warns(LowPrecisionTimestepWarning):  # fractional half-precision timesteps
        assert sinusoidal_embedding(np.array([0.5], dtype=np.float16), 8).shape == (1, 8)


@pytest.mark.skipif(not hasattr(torch, "uint64"), reason="this torch has no uint64 tensors")
def test_a_uint64_tensor_past_int64_with_few_distinct_values_keeps_its_values():
    big = np.array([2**63, 2**63 + 2048, 2**63 + 4096], np.uint64)[np.arange(10000) % 3]  # few values: the reuse sorts
    t = torch.from_numpy(big)
    assert torch.equal(sinusoidal_embedding(t, 8), sinusoidal_embedding(t.double(), 8))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_output_dtype(dtype):
    emb = sinusoidal_embedding(torch.arange(5), 32, "adm", dtype=dtype)
    assert emb.dtype == dtype
    ref = sinusoidal_embedding_np(np.arange(5), 32, "adm")
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float64: 1e-12}[dtype]
    assert np.abs(emb.double().numpy() - ref).max() <= tol


def test_device_follows_input_or_argument():
    assert sinusoidal_embedding(torch.arange(3), 8).device.type == "cpu"
    assert sinusoidal_embedding([1, 2], 8, device="cpu").device.type == "cpu"
    # another device than the input's, on any machine: meta holds no values
    assert sinusoidal_embedding([1, 2], 8, device="meta").is_meta
    assert sinusoidal_embedding(torch.arange(3), 8, device="meta").is_meta


def test_presets_and_option_overrides():
    assert torch.equal(
        sinusoidal_embedding([3.5], 10, "adm"), sinusoidal_embedding([3.5], 10, first="cos", freq_shift=0)
    )
    assert torch.equal(sinusoidal_embedding([3.5], 10), sinusoidal_embedding([3.5], 10, "adm"))  # the default
    assert set(PRESETS) >= {"vaswani", "ddpm", "adm", "edm"}


def test_frequencies_follow_the_formula():
    for shift in (0, 1):
        w = frequencies_np(64, shift, 10000)
        k = np.arange(32)
        assert np.allclose(w, 10000.0 ** (-k / (32 - shift)), rtol=1e-14, atol=0)
        assert np.allclose(frequencies(64, shift).numpy(), w, rtol=1e-6)
        assert frequencies(64, shift, precise=True).dtype == torch.float64


# ---- the distinct-values path gives the direct path's exact numbers ---------------------------
def direct(t, dim, conv, precise=False):
    """Row by row: each call is one value, so no batch-level reuse can be involved."""
    flat = torch.as_tensor(t).reshape(-1)
    rows = [sinusoidal_embedding(flat[i : i + 1], dim, conv, precise=precise) for i in range(len(flat))]
    return torch.cat(rows).reshape(*torch.as_tensor(t).shape, dim)


@pytest.fixture
def computed_rows(monkeypatch):
    """The number of rows each sinusoid pass of the core computes, call by call."""
    rows: list[int] = []
    one_pass = sinusoidal._direct

    def counted(flat, *args):
        rows.append(flat.shape[0])
        return one_pass(flat, *args)

    monkeypatch.setattr(sinusoidal, "_direct", counted)
    return rows


@pytest.mark.parametrize("precise", [False, True])
@pytest.mark.parametrize("conv, dim", [("adm", 128), ("vaswani", 257), ("ddpm", 33)])
def test_shared_timestep_batch_equals_rowwise(conv, dim, precise, computed_rows):
    t = torch.full((600,), 123.456)
    emb = sinusoidal_embedding(t, dim, conv, precise=precise)
    assert computed_rows == [1]  # one row, copied to the batch
    assert torch.equal(emb, direct(t[:1], dim, conv, precise).expand(600, dim))
    emb[0, 0] = 5.0  # a tensor of its own, not a view of one row
    assert emb[1, 0] != 5.0


@pytest.mark.parametrize("precise", [False, True])
@pytest.mark.parametrize(
    "t",
    [
        torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(0)),  # few integers
        (torch.rand(16, generator=torch.Generator().manual_seed(1)) * 1000).repeat_interleave(64).reshape(2, 512),
        torch.randint(0, 1000, (600,), generator=torch.Generator().manual_seed(2)).double(),  # mostly distinct
        torch.rand(3000, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 1000,  # all distinct
    ],
)
def test_repeated_values_are_embedded_once_with_the_same_bits(t, precise, computed_rows):
    emb = sinusoidal_embedding(t, 96, "adm", precise=precise)
    values, index = torch.unique(t.reshape(-1), return_inverse=True)
    few = 2 * len(values) <= t.numel()  # the reuse pays only when at most half the values are distinct
    assert sum(computed_rows) == (len(values) if few else t.numel()), (len(values), computed_rows)
    assert torch.equal(emb, direct(values, 96, "adm", precise)[index].reshape(*t.shape, 96))


@pytest.mark.parametrize("precise", [False, True])
@pytest.mark.parametrize(
    "t",
    [
        torch.tensor([0.0, -0.0] * 300),  # one value to the guards (-0.0 == 0.0), two bit patterns
        torch.tensor([-0.0, 0.0, 5.0, 7.0] * 300),  # few distinct values, two of them zeros
        torch.tensor([-0.0, 0.0] * 300, dtype=torch.bfloat16),
    ],
)
def test_negative_zero_keeps_its_sign_in_the_reuse_path(t, precise):
    # sin(-0.0) = -0.0: a row of -0.0 differs from a row of 0.0 in its sine columns' sign bits
    assert same_bits(sinusoidal_embedding(t, 64, "ddpm", precise=precise), direct(t, 64, "ddpm", precise))


def test_relative_position_identity_holds_on_the_embedding():
    # PE(p) . PE(q) = sum_k cos((p - q) w_k), a function of the offset only.
    p, q = 37.0, 11.0
    e = sinusoidal_embedding_np([p, q], 64, "vaswani")
    w = frequencies_np(64, 0)
    assert math.isclose(float(e[0] @ e[1]), float(np.cos((p - q) * w).sum()), abs_tol=1e-9)


@pytest.mark.parametrize("precise", [False, True])
def test_output_dtype_ignores_torch_default_dtype(precise):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        t = torch.rand(3000, dtype=torch.float32) * 1000
        for batch in (t, t[:3], torch.arange(5), torch.full((3000,), 7.0)):
            assert sinusoidal_embedding(batch, 320, precise=precise).dtype == torch.float32
    finally:
        torch.set_default_dtype(before)


# ---- large outputs are written in row blocks: the same bits, the output's memory ----------------
@pytest.mark.parametrize("precise", [False, True])
@pytest.mark.parametrize("conv, dim", [("adm", 320), ("vaswani", 257), ("ddpm", 33)])
def test_row_blocks_give_the_bits_of_one_pass(conv, dim, precise, monkeypatch):
    t = torch.rand(3001, dtype=torch.float64, generator=torch.Generator().manual_seed(5)) * 1e4
    monkeypatch.setattr(sinusoidal, "_BLOCK_MIN_VALUES", {False: 0, True: 0})
    monkeypatch.setattr(sinusoidal, "_BLOCK_VALUES", 5000)  # blocks of 5000 // dim rows, a partial last one
    blocks = sinusoidal_embedding(t, dim, conv, scale=3.0, gain=0.5, precise=precise)
    monkeypatch.setattr(sinusoidal, "_BLOCK_MIN_VALUES", {False: 1 << 40, True: 1 << 40})  # one pass
    assert torch.equal(blocks, sinusoidal_embedding(t, dim, conv, scale=3.0, gain=0.5, precise=precise))


def test_row_blocks_of_the_float32_path_are_diffusers_bits():
    from diffusers.models.embeddings import get_timestep_embedding as diffusers_embedding

    t = torch.rand(14001, generator=torch.Generator().manual_seed(6)) * 1000  # 14001 x 321 > 2 ** 22 values
    assert torch.equal(sinusoidal_embedding(t, 321, "ddpm", scale=2.0), diffusers_embedding(t, 321, scale=2.0))


def test_precise_blocks_are_the_float64_values_rounded_once():
    t = torch.rand(5000, dtype=torch.float64, generator=torch.Generator().manual_seed(7)) * 1e6
    assert torch.equal(
        sinusoidal_embedding(t, 256, precise=True), sinusoidal_embedding(t, 256, dtype=torch.float64).float()
    )
    assert torch.equal(
        sinusoidal_embedding(t, 256, precise=True, dtype=torch.bfloat16),
        sinusoidal_embedding(t, 256, dtype=torch.float64).to(torch.bfloat16),
    )
