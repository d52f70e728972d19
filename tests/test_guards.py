"""Every guard of the core: the message names the argument, the value and what is accepted."""

import contextlib
import re
import warnings

import numpy as np
import pytest
import torch
from diffusers.models.embeddings import get_timestep_embedding as diffusers_embedding
from torch._subclasses.fake_tensor import FakeTensorMode

from timestep_embed import (
    Convention,
    LowPrecisionTimestepWarning,
    SinusoidalEmbedding,
    TimestepEmbedder,
    get_timestep_embedding,
    sinusoidal_embedding,
)

from .fixtures.devices import accelerator_path


@pytest.mark.parametrize("dim", [0, -3])
def test_dim_below_one(dim):
    with pytest.raises(ValueError, match=rf"dim must be an int >= 1, got {dim}"):
        sinusoidal_embedding([1], dim)


@pytest.mark.parametrize("dim", [2.0, "8", True, None])
def test_dim_not_an_int(dim):
    with pytest.raises(TypeError, match="dim must be an int >= 1"):
        sinusoidal_embedding([1], dim)


def test_dim_two_with_shift_one_is_refused_where_diffusers_returns_nan():
    assert torch.isnan(diffusers_embedding(torch.tensor([1, 2]), 2, downscale_freq_shift=1)).all()
    with pytest.raises(ValueError, match=r"dim=2 with freq_shift=1.*h - freq_shift = 0.*NaN"):
        sinusoidal_embedding([1, 2], 2, freq_shift=1)
    assert torch.isfinite(sinusoidal_embedding([1, 2], 2, freq_shift=0)).all()


def test_dim_one_is_a_zero_column_as_in_diffusers():
    assert torch.equal(sinusoidal_embedding([3, 4], 1), torch.zeros(2, 1))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("n", [1, 100])
def test_non_finite_timesteps(bad, n):
    t = torch.zeros(n)
    t[-1] = bad
    with pytest.raises(ValueError, match=r"timesteps must be finite, got non-finite values such as \[(nan|inf|-inf)\]"):
        sinusoidal_embedding(t, 8)


def test_huge_but_finite_timesteps_are_not_mistaken_for_inf():
    t = torch.full((100,), 3e38)  # the float64 sum stays finite; float32 would overflow
    assert torch.isfinite(sinusoidal_embedding(t, 8)).all()
    # a small batch is read as Python floats, whose sum overflows here: each value is looked at instead
    huge = torch.tensor([1.7e308, 1.7e308], dtype=torch.float64)
    assert sinusoidal_embedding(huge, 8, precise=True).shape == (2, 8)


@pytest.mark.parametrize(
    "bad, word",
    [
        (torch.tensor([1 + 2j]), "complex"),
        (np.array([1 + 2j]), "complex"),
        (torch.tensor([True]), "bool"),
        (True, "bool"),
        (np.array([True]), "bool"),
        ("10", "string"),
        (["a"], "str|<U1"),
    ],
)
def test_non_numeric_timesteps(bad, word):
    with pytest.raises(TypeError, match=rf"timesteps must be.*({word}|{word.lower()})"):
        sinusoidal_embedding(bad, 8)


@pytest.mark.parametrize("max_period", [0, -10.0])
def test_max_period_must_be_positive(max_period):
    with pytest.raises(ValueError, match=rf"max_period must be > 0.*got {max_period}"):
        sinusoidal_embedding([1], 8, max_period=max_period)


def test_non_finite_options():
    with pytest.raises(ValueError, match="scale must be finite"):
        Convention(scale=float("inf"))
    with pytest.raises(TypeError, match="freq_shift must be a real number"):
        Convention(freq_shift="1")


def test_unknown_layout_first_and_preset_names():
    with pytest.raises(ValueError, match=r"layout must be one of \('concat', 'interleaved'\), got 'stacked'"):
        sinusoidal_embedding([1], 8, layout="stacked")
    with pytest.raises(ValueError, match=r"first must be one of \('sin', 'cos'\), got 'tan'"):
        sinusoidal_embedding([1], 8, first="tan")
    with pytest.raises(ValueError, match=r"convention must be one of \[.*'adm'.*\] or a Convention, got 'ddim'"):
        sinusoidal_embedding([1], 8, "ddim")
    with pytest.raises(ValueError, match="convention must be one of"):
        sinusoidal_embedding([1], 8, ["adm"])  # unhashable: still the clear message


def test_bad_output_dtype():
    with pytest.raises(TypeError, match=r"dtype must be a floating torch.dtype.*torch.int64"):
        sinusoidal_embedding([1], 8, dtype=torch.int64)


def test_bfloat16_rounding_warning_names_what_happened_and_the_fix():
    t = torch.tensor([999.0]).to(torch.bfloat16)
    assert float(t) == 1000.0  # the trap itself
    with pytest.warns(
        LowPrecisionTimestepWarning,
        match=r"torch.bfloat16 with fractional values or integers above 256.*999 into 1000.*int64 or float32",
    ):
        sinusoidal_embedding(t, 8)


def test_float16_rounding_warning():
    t = torch.tensor([998.4]).half()
    assert float(t) == 998.5
    with pytest.warns(LowPrecisionTimestepWarning, match=r"float16 with fractional values.*0.5 apart near 1000"):
        sinusoidal_embedding(t, 8)


def test_the_rounding_warning_is_shown_once_per_call_site_whatever_the_values():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: once per call site and message
        for step in range(5):
            sinusoidal_embedding(torch.tensor([900.0 + 8 * step]).bfloat16(), 8)  # five maxima, one call site
    assert [w.category for w in caught] == [LowPrecisionTimestepWarning]


def test_no_warning_for_exact_small_integers_in_half_precision():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sinusoidal_embedding(torch.arange(200).to(torch.bfloat16), 8)
        sinusoidal_embedding(torch.arange(2000).half(), 8)
        sinusoidal_embedding(torch.tensor([999.4]), 8)  # float32 holds it: no warning


@pytest.mark.parametrize(
    "bad", [torch.tensor([1e300], dtype=torch.float64), torch.full((100,), 1e39, dtype=torch.float64)]
)
def test_finite_float64_that_overflows_float32_is_refused(bad):
    with pytest.raises(ValueError, match=r"timesteps up to 1e\+(300|39) with scale 1 overflow the float32 phase"):
        sinusoidal_embedding(bad, 8)
    assert torch.isfinite(sinusoidal_embedding(bad[:1] / 1e280 if bad[0] > 1e100 else bad, 8, precise=True)).all()


def test_timesteps_times_scale_that_overflow_are_refused():
    with pytest.raises(ValueError, match=r"timesteps up to 1e\+30 with scale 1e\+10 overflow"):
        sinusoidal_embedding(torch.tensor([1e30]), 8, scale=1e10)


@pytest.mark.parametrize("n", [1, 100])
def test_guards_hold_for_inputs_that_require_grad(n):
    t = torch.zeros(n, requires_grad=True)
    with torch.no_grad():
        t[-1] = float("nan")
    with pytest.raises(ValueError, match="timesteps must be finite"):
        sinusoidal_embedding(t, 8)


@pytest.mark.parametrize("dtype", [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)])
@pytest.mark.parametrize("n", [3, 100])
def test_unsigned_torch_timesteps_are_embedded_as_diffusers_does(dtype, n):
    t = torch.arange(n).to(dtype)
    assert torch.equal(sinusoidal_embedding(t, 16, "ddpm"), diffusers_embedding(t, 16))


def test_float_dim_is_refused_even_after_the_int_was_used():
    sinusoidal_embedding([1], 8)
    with pytest.raises(TypeError, match="dim must be an int >= 1, got 8.0"):
        sinusoidal_embedding([1], 8.0)


def test_module_integer_cache_outside_its_range_computes_directly():
    module = SinusoidalEmbedding(8, num_timesteps=100)
    t = torch.tensor([-1, 5, 100])
    assert torch.equal(module(t), sinusoidal_embedding(t, 8))
    with pytest.raises(ValueError, match="num_timesteps must be an int >= 1, got 0"):
        SinusoidalEmbedding(8, num_timesteps=0)


# ------------------------------------------------------------------- caches (issue 25, item 7)
def grad_of_embedding(dim):
    t = torch.tensor([3.0, 917.5], requires_grad=True)
    sinusoidal_embedding(t, dim).sum().backward()
    return t.grad


@pytest.mark.parametrize("mode", ["inference_mode", "fake_tensor_mode"])
def test_the_frequency_cache_does_not_depend_on_the_mode_it_was_filled_in(mode):
    dim = {"inference_mode": 994, "fake_tensor_mode": 996}[mode]  # widths no other test embeds first
    t = torch.tensor([3.0, 917.5])
    if mode == "inference_mode":
        with torch.inference_mode():
            filled = sinusoidal_embedding(t, dim)
    else:
        with FakeTensorMode(allow_non_fake_inputs=True):  # a real input inside a fake-tensor mode
            sinusoidal_embedding(t, dim)
        filled = sinusoidal_embedding(t, dim)
    assert torch.equal(filled, diffusers_embedding(t, dim, True, 0))
    grad = grad_of_embedding(dim)  # d/dt works after it; the diffusers gradient, bit for bit
    reference = torch.tensor([3.0, 917.5], requires_grad=True)
    diffusers_embedding(reference, dim, True, 0).sum().backward()
    assert torch.equal(grad, reference.grad)


def test_the_module_cache_filled_in_inference_mode_serves_training():
    embedder = TimestepEmbedder(64, num_timesteps=100)
    t = torch.tensor([1, 50])
    with torch.inference_mode():
        embedder(t)  # fills the integer-step rows of time_proj
    embedder(t).sum().backward()  # the rows reach the MLP, whose weights need grad
    assert embedder.time_embedding.linear_1.weight.grad.abs().sum() > 0
    assert not embedder.time_proj._rows.is_inference()


# ------------------------------------------------------------ back doors (issue 25, item 8)
@pytest.mark.parametrize("bad", [float("nan"), 1e300])
def test_a_parameter_input_is_checked_like_any_tensor(bad):
    t = torch.nn.Parameter(torch.tensor([1.0, bad], dtype=torch.float64))
    with pytest.raises(ValueError, match="timesteps must be finite|overflow the float32 phase"):
        sinusoidal_embedding(t, 8)
    with pytest.raises(ValueError, match="timesteps must be finite|overflow the float32 phase"):
        get_timestep_embedding(t, 8)


def test_a_parameter_input_still_gives_diffusers_numbers_and_gradient():
    t = torch.nn.Parameter(torch.tensor([3.0, 917.5]))
    emb = sinusoidal_embedding(t, 16)
    assert torch.equal(emb, diffusers_embedding(t.detach(), 16, True, 0))
    emb.sum().backward()
    assert t.grad.abs().sum() > 0


def test_max_period_whose_frequencies_overflow_is_refused_where_diffusers_returns_nan():
    t = torch.tensor([0.0, 5.0])
    assert torch.isnan(diffusers_embedding(t, 256, max_period=1e-40, downscale_freq_shift=0)).any()
    with pytest.raises(ValueError, match=r"max_period=1e-40 .*frequencies up to .*beyond torch.float32"):
        sinusoidal_embedding(t, 256, max_period=1e-40)
    assert torch.isfinite(sinusoidal_embedding(t, 256, max_period=1e-30)).all()  # w_max ~ 1e30 fits


def test_max_period_below_one_that_overflows_the_phase_is_refused():
    t = torch.tensor([0.0, 1e9])
    assert torch.isnan(diffusers_embedding(t, 256, max_period=1e-30, downscale_freq_shift=0)).any()
    with pytest.raises(
        ValueError, match=r"timesteps up to 1e\+09 with scale 1 and frequencies up to \S+e\+29 overflow"
    ):
        sinusoidal_embedding(t, 256, max_period=1e-30)


@pytest.mark.parametrize("gain, dtype", [(1e39, torch.float32), (-1e39, torch.bfloat16), (1e5, torch.float16)])
def test_a_gain_that_overflows_the_output_is_refused(gain, dtype):
    assert not torch.isfinite(gain * torch.ones(1, dtype=dtype)).all()  # what the embedding would hold
    with pytest.raises(ValueError, match=re.escape(f"gain={gain:g} overflows {dtype}")):
        sinusoidal_embedding([0.0, 3.0], 8, gain=gain, dtype=dtype)
    fits = torch.finfo(dtype).max / 2
    assert torch.isfinite(sinusoidal_embedding([0.0, 3.0], 8, gain=fits, dtype=dtype)).all()


def test_scale_formed_in_float16_is_checked_against_float16():
    t = torch.tensor([0.5, 100.0]).half()
    with pytest.raises(
        ValueError, match=r"timesteps up to 100 with scale 1000 overflow torch.float16 .*scale_in_input"
    ):
        sinusoidal_embedding(t, 8, scale=1000, scale_in_input_dtype=True)
    with pytest.warns(LowPrecisionTimestepWarning):  # 0.5 in float16: maybe rounded
        assert torch.isfinite(sinusoidal_embedding(t, 8, scale=1000)).all()  # the float32 phase holds 1e5
    assert torch.isfinite(sinusoidal_embedding(t.float(), 8, scale=1000, scale_in_input_dtype=True)).all()


def test_flux_rounding_asked_for_is_not_warned_about_on_any_device():
    sigma = torch.tensor([0.99, 0.75]).bfloat16()  # black-forest-labs/flux: time_factor * t in bfloat16
    flux = dict(scale=1000, scale_in_input_dtype=True, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sinusoidal_embedding(sigma, 256, "adm", **flux).dtype == torch.bfloat16
        with accelerator_path():
            sinusoidal_embedding(sigma, 256, "adm", **flux)
    for where in (contextlib.nullcontext, accelerator_path):  # without the option (or with scale 1): warned
        with where(), pytest.warns(LowPrecisionTimestepWarning):
            sinusoidal_embedding(sigma, 256, "adm", scale=1000, dtype=torch.bfloat16)
        with where(), pytest.warns(LowPrecisionTimestepWarning):
            sinusoidal_embedding(sigma * 1000, 256, "adm", scale_in_input_dtype=True)
