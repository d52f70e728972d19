"""Bit-identical to the installed diffusers (run-time oracle, never stored numbers)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import timestep_embed

from .fixtures.bits import same_bits

diffusers_embeddings = pytest.importorskip("diffusers.models.embeddings")
diffusers_embedding = diffusers_embeddings.get_timestep_embedding

FLAGS = list(itertools.product([False, True], [0, 1], [1, 0.5, 1000.0], [10000, 100]))


def timesteps_grid():
    g = torch.Generator().manual_seed(0)
    return {
        "int64 0..999": torch.arange(1000),
        "int32 random": torch.randint(0, 1000, (37,), generator=g, dtype=torch.int32),
        "int64 beyond the table": torch.randint(0, 10**7, (50,), generator=g),
        "float fractional": torch.rand(300, generator=g) * 1000,
        "float integral": torch.arange(64).float() * 15,
        "float large": torch.rand(40, generator=g) * 1e6,
        "float64": torch.rand(20, generator=g, dtype=torch.float64) * 1000,
        "negative": -torch.rand(9, generator=g) * 50,
        "one shared timestep": torch.full((512,), 321.5),
        "scalar batch": torch.tensor([17]),
    }


@pytest.mark.parametrize("flip, shift, scale, max_period", FLAGS)
@pytest.mark.parametrize("dim", [1, 3, 8, 9, 64, 127, 320])
def test_equal_for_every_option_combination(flip, shift, scale, max_period, dim):
    if dim >= 2 and dim // 2 - shift == 0:  # diffusers divides by zero here and returns NaN; we refuse
        assert torch.isnan(diffusers_embedding(torch.arange(3), dim, flip, shift, scale, max_period)[:, :-1]).all()
        with pytest.raises(ValueError, match="freq_shift"):
            timestep_embed.get_timestep_embedding(torch.arange(3), dim, flip, shift, scale, max_period)
        return
    for name, t in timesteps_grid().items():
        ours = timestep_embed.get_timestep_embedding(t, dim, flip, shift, scale, max_period)
        theirs = diffusers_embedding(t, dim, flip, shift, scale, max_period)
        assert ours.dtype == theirs.dtype == torch.float32
        assert same_bits(ours, theirs), name


def test_defaults_match():
    t = torch.tensor([0, 1, 999])
    assert same_bits(timestep_embed.get_timestep_embedding(t, 32), diffusers_embedding(t, 32))


@pytest.mark.parametrize("dim, flip, shift, scale", [(1280, True, 0, 1), (1281, False, 1, 1), (257, True, 1, 2.5)])
def test_large_outputs_match(dim, flip, shift, scale):
    # over 2**22 output values, all distinct: the CPU's row blocks (a last block that is not full)
    t = torch.rand((1 << 22) // dim + 7) * 1000
    ours = timestep_embed.get_timestep_embedding(t, dim, flip, shift, scale)
    assert same_bits(ours, diffusers_embedding(t, dim, flip, shift, scale))


@settings(max_examples=80, deadline=None)
@given(
    t=st.lists(st.floats(-1e5, 1e5, width=32), min_size=1, max_size=64),
    dim=st.integers(4, 200),
    flip=st.booleans(),
    shift=st.sampled_from([0, 1]),
)
def test_equal_on_arbitrary_float_timesteps(t, dim, flip, shift):
    t = torch.tensor(t, dtype=torch.float32)
    assert same_bits(
        timestep_embed.get_timestep_embedding(t, dim, flip, shift), diffusers_embedding(t, dim, flip, shift)
    )


@settings(max_examples=40, deadline=None)
@given(
    pool=st.lists(st.floats(-1e4, 1e4, width=32) | st.sampled_from([0.0, -0.0]), min_size=1, max_size=40),
    picks=st.lists(st.integers(0, 39), min_size=512, max_size=1500),
    dim=st.sampled_from([16, 64, 321]),
    flip=st.booleans(),
)
def test_equal_on_large_batches_of_repeated_float_timesteps(pool, picks, dim, flip):
    # >= 512 timesteps from a small pool: the CPU's reuse path (one row per distinct value, gathered);
    # -0.0 beside 0.0 compares equal but embeds to other bits (sin(-0.0) = -0.0)
    t = torch.tensor([pool[i % len(pool)] for i in picks], dtype=torch.float32)
    assert same_bits(timestep_embed.get_timestep_embedding(t, dim, flip, 1), diffusers_embedding(t, dim, flip, 1))


@settings(max_examples=60, deadline=None)
@given(t=st.lists(st.integers(0, 5000), min_size=1, max_size=100), dim=st.integers(4, 200), flip=st.booleans())
def test_equal_on_arbitrary_integer_timesteps(t, dim, flip):
    t = torch.tensor(t)
    assert same_bits(timestep_embed.get_timestep_embedding(t, dim, flip, 1), diffusers_embedding(t, dim, flip, 1))


def test_accepts_any_batch_shape_where_diffusers_takes_1d():
    t = torch.rand(3, 4) * 1000
    ours = timestep_embed.get_timestep_embedding(t, 16, True, 0)
    assert ours.shape == (3, 4, 16)
    assert same_bits(ours.reshape(12, 16), diffusers_embedding(t.reshape(-1), 16, True, 0))


def test_sinusoidal_embedding_equals_diffusers_where_its_options_apply():
    t = torch.rand(100) * 1000
    for name, flags in [("ddpm", (False, 1)), ("adm", (True, 0))]:
        assert same_bits(timestep_embed.sinusoidal_embedding(t, 64, name), diffusers_embedding(t, 64, *flags))


@pytest.mark.parametrize("dim, shift", [(8, 5), (9, 4.5), (16, 9)])
def test_a_shift_past_half_the_width_gives_diffusers_growing_frequencies(dim, shift):
    """h - freq_shift < 0: the frequencies grow with k, finite where they fit float32, as diffusers computes them;
    only h - freq_shift = 0 (0 / 0 at k = 0) is NaN there and refused here."""
    t = torch.tensor([0.0, 1.0, 2.0, 7.5])
    assert same_bits(
        timestep_embed.get_timestep_embedding(t, dim, False, shift), diffusers_embedding(t, dim, False, shift)
    )
    assert torch.isnan(diffusers_embedding(t, 8, False, 4)).any()
    with pytest.raises(ValueError, match="denominator h - freq_shift = 0"):
        timestep_embed.get_timestep_embedding(t, 8, False, 4)


def test_numpy_uint64_past_int64_rounds_once_as_diffusers_does():
    """A uint64 array above 2**63 is embedded from its own values: through float64 it would round twice
    (2**63 + 2**39 + 1 -> 2**63 + 2**39 -> 2**63 in float32, where the value itself rounds to 2**63 + 2**40)."""
    array = np.array([2**63 + 2**39 + 1, 5], dtype=np.uint64)
    if not hasattr(torch, "uint64"):
        pytest.skip("torch < 2.3 has no uint64")
    theirs = diffusers_embedding(torch.from_numpy(array), 32)
    assert same_bits(timestep_embed.get_timestep_embedding(array, 32), theirs)
