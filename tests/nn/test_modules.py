"""Embedding modules: exact agreement with the core, diffusers parity (run-time oracle), compile/export."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.conventions import PRESETS
from timestep_embed.nn import (
    TIME_INPUTS,
    FourierEmbedding,
    SinusoidalEmbedding,
    TimestepEmbedder,
    TimestepMLP,
    default_sinusoid_dim,
    time_input,
)
from timestep_embed.sinusoidal import frequencies, sinusoidal_embedding

emb_mod = pytest.importorskip("diffusers.models.embeddings")
PRESET_NAMES = ["vaswani", "ddpm", "adm", "edm", "edm_song"]


# ------------------------------------------------------------------ SinusoidalEmbedding
@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("dim", [7, 32])
@pytest.mark.parametrize("precise", [False, True])
def test_sinusoidal_module_equals_core(name, dim, precise):
    m = SinusoidalEmbedding(dim, name, num_timesteps=1000, precise=precise)
    for t in (torch.tensor([0, 1, 17, 999]), torch.tensor([0.0, 0.5, 17.25, 998.75]), torch.tensor([[3, 4], [5, 6]])):
        assert torch.equal(m(t), sinusoidal_embedding(t, dim, name, precise=precise))  # ints: the cache


@settings(max_examples=40, deadline=None)
@given(
    dim=st.integers(2, 70),
    name=st.sampled_from(PRESET_NAMES),
    precise=st.booleans(),
    t=st.lists(st.integers(-5, 1200), min_size=1, max_size=9),
)
def test_sinusoidal_module_cache_equals_core(dim, name, precise, t):
    if PRESETS[name].freq_shift >= dim // 2:
        return
    m = SinusoidalEmbedding(dim, name, precise=precise, num_timesteps=1000)
    tt = torch.tensor(t)
    assert torch.equal(m(tt), sinusoidal_embedding(tt, dim, name, precise=precise))


def test_sinusoidal_module_has_no_state_and_its_values_survive_half_and_moves():
    t = torch.arange(1000)
    m = SinusoidalEmbedding(64, num_timesteps=1000)
    assert m.state_dict() == {} and list(m.parameters()) == [] and list(m.buffers()) == []
    m(t)  # fills the cache for the CPU
    m.half().to("meta")
    assert m(t.to("meta")).is_meta
    expected = sinusoidal_embedding(t, 64, "adm")
    assert m(t).dtype == torch.float32 and torch.equal(m(t), expected)


def test_sinusoidal_module_out_of_table_steps_fall_back_to_core():
    m = SinusoidalEmbedding(16, "ddpm", num_timesteps=10)
    t = torch.tensor([[3, 10], [-2, 4000]])
    assert torch.equal(m(t), sinusoidal_embedding(t, 16, "ddpm"))
    assert m(t).shape == (2, 2, 16)


def test_sinusoidal_module_equals_diffusers_timesteps():
    for flip in (False, True):
        for shift in (0, 1):
            ref = emb_mod.Timesteps(33, flip, shift)
            m = SinusoidalEmbedding(33, "ddpm", first="cos" if flip else "sin", freq_shift=shift, num_timesteps=1000)
            for t in (torch.arange(0, 1000, 7), torch.linspace(0, 999, 50)):
                assert torch.equal(m(t), ref(t))


def test_sinusoidal_module_under_compile_does_not_recompile():
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    m = SinusoidalEmbedding(24, "ddpm", scale=2.0)
    compiled = torch.compile(m, dynamic=True, backend=counting_backend)
    for batch in (2, 3, 17, 64):
        t = torch.rand(batch) * 1000
        torch.testing.assert_close(compiled(t), sinusoidal_embedding(t, 24, "ddpm", scale=2.0), rtol=0, atol=0)
    assert len(graphs) == 1


def test_embedder_compiles_with_aot_autograd_and_backpropagates():
    torch._dynamo.reset()
    e = TimestepEmbedder(32)
    compiled = torch.compile(e, dynamic=True, backend="aot_eager")
    for batch in (3, 5):
        t = torch.randint(0, 1000, (batch,))
        out = compiled(t)
        torch.testing.assert_close(out, e(t), rtol=0, atol=1e-6)
        out.sum().backward()
    assert e.time_embedding.linear_1.weight.grad is not None


def test_sinusoidal_module_exports_with_dynamic_batch():
    m = SinusoidalEmbedding(20, "vaswani", num_timesteps=1000)
    batch = torch.export.Dim("batch")
    program = torch.export.export(m, (torch.arange(4.0),), dynamic_shapes=({0: batch},))
    for t in (torch.arange(9.0) * 3.5, torch.tensor([2.0, 7.0])):
        assert torch.equal(program.module()(t), sinusoidal_embedding(t, 20, "vaswani"))
    embedder = TimestepEmbedder(32)
    program = torch.export.export(embedder, (torch.arange(4),), dynamic_shapes=({0: batch},))
    t = torch.tensor([3, 999, 0])
    torch.testing.assert_close(program.module()(t), embedder(t), rtol=0, atol=0)


@pytest.mark.slow
def test_embedder_under_inductor():
    torch._dynamo.reset()
    e = TimestepEmbedder(64)
    compiled = torch.compile(e, dynamic=True)
    for batch in (2, 9):
        t = torch.randint(0, 1000, (batch,))
        torch.testing.assert_close(compiled(t), e(t), rtol=1e-5, atol=1e-5)


def test_gradient_flows_through_float_timesteps():
    m = SinusoidalEmbedding(8, "adm")
    t = torch.tensor([0.5, 3.0], requires_grad=True)
    m(t).sum().backward()
    freqs = frequencies(8)
    expected = (torch.cos(t[:, None] * freqs) - torch.sin(t[:, None] * freqs)) * freqs
    torch.testing.assert_close(t.grad, expected.sum(1).detach())


# ------------------------------------------------------------------ FourierEmbedding
@pytest.mark.parametrize("log", [True, False])
@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("set_w", [True, False])
def test_fourier_equals_diffusers_gaussian_fourier_projection(log, flip, set_w):
    torch.manual_seed(0)
    ref = emb_mod.GaussianFourierProjection(8, scale=16, set_W_to_weight=set_w, log=log, flip_sin_to_cos=flip)
    ours = FourierEmbedding(16, first="cos" if flip else "sin", log=log)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.rand(11) * 80 + 0.002
    assert torch.equal(ours(x), ref(x))
    back = emb_mod.GaussianFourierProjection(8, set_W_to_weight=set_w, log=log, flip_sin_to_cos=flip)
    back.load_state_dict(ours.state_dict(), strict=True)
    assert torch.equal(back.weight, ours.weight)


@pytest.mark.parametrize("log", [True, False])
@pytest.mark.parametrize("module_dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_fourier_equals_diffusers_for_every_timestep_dtype_in_a_cast_module(log, module_dtype):
    # diffusers multiplies the timesteps by its weight: integer steps take the weight's dtype (float32 after log)
    torch.manual_seed(0)
    ref = emb_mod.GaussianFourierProjection(8, scale=16, log=log, flip_sin_to_cos=True).to(module_dtype)
    ours = FourierEmbedding(16, first="cos", log=log).to(module_dtype)
    ours.load_state_dict(ref.state_dict(), strict=True)
    steps = torch.tensor([1, 500, 999])
    for t in (steps, steps.int(), steps.float() + 0.5, steps.bfloat16(), steps.double()):
        got, expected = ours(t), ref(t)  # float16 phases of 999 overflow to NaN rows in both
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True, msg=str(t.dtype))
    torch.testing.assert_close(ours(999), ref(torch.tensor([999]))[0], rtol=0, atol=0, equal_nan=True)  # a Python int


def test_fourier_edm_variant_matches_edm_formula():
    # EDM training/networks.py FourierEmbedding.forward, transcribed: x.ger(2*pi*freqs) -> [cos, sin]
    m = FourierEmbedding.edm(32, generator=torch.Generator().manual_seed(3))
    assert m.fold_2pi and m.first == "cos"
    x = torch.randn(7) * 0.25
    phases = x.ger((2 * np.pi * m.weight).to(x.dtype))
    assert torch.equal(m(x), torch.cat([phases.cos(), phases.sin()], dim=1))


def test_fourier_fixed_vs_learnable():
    fixed, learned = FourierEmbedding(8), FourierEmbedding(8, learnable=True)
    assert list(fixed.parameters()) == [] and "weight" in fixed.state_dict()
    learned(torch.rand(3)).sum().backward()
    assert learned.weight.grad is not None
    a = FourierEmbedding(8, std=3.0, generator=torch.Generator().manual_seed(1))
    b = FourierEmbedding(8, std=3.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.weight, b.weight) and a(torch.ones(2, 3)).shape == (2, 3, 8)


def test_fourier_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dim must be an even int"):
        FourierEmbedding(7)
    with pytest.raises(ValueError, match=r"first must be one of \['cos', 'sin'\], got 'tan'"):
        FourierEmbedding(8, first="tan")


# ------------------------------------------------------------------ time_input
def test_time_input_kinds():
    t = torch.tensor([0, 10, 3999])
    assert time_input(t, "identity") is t
    assert torch.equal(time_input(t, "times_1000_over_T", 4000), t.float() * (1000.0 / 4000))  # improved-diffusion
    u = torch.tensor([0.0, 0.25, 1.0])
    assert torch.equal(time_input(u, "times_T"), u * 1000)
    assert torch.equal(time_input(u, "times_T", num_timesteps=50), u * 50)
    sigma = torch.tensor([0.002, 1.0, 80.0])
    assert torch.equal(time_input(sigma, "quarter_log"), sigma.log() / 4)  # EDM c_noise
    assert float(time_input(0.5, "times_T")) == 500.0 and float(time_input(2, "times_1000_over_T", 4000)) == 0.5
    assert set(TIME_INPUTS) == {"identity", "times_T", "times_1000_over_T", "quarter_log"}
    with pytest.raises(ValueError, match="time_input must be one of"):
        time_input(t, "sigma")


# ------------------------------------------------------------------ TimestepMLP
@pytest.mark.parametrize("act", ["silu", "gelu", "mish"])
@pytest.mark.parametrize("post_act", [None, "silu"])
@pytest.mark.parametrize("cond_dim,out_dim", [(None, None), (6, 12)])
def test_mlp_loads_diffusers_timestep_embedding_both_ways(act, post_act, cond_dim, out_dim):
    torch.manual_seed(0)
    ref = emb_mod.TimestepEmbedding(16, 24, act_fn=act, out_dim=out_dim, post_act_fn=post_act, cond_proj_dim=cond_dim)
    ours = TimestepMLP(16, 24, out_dim=out_dim, act=act, post_act=post_act, cond_dim=cond_dim)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(5, 16)
    cond = torch.randn(5, cond_dim) if cond_dim else None
    assert (ours(x, cond) - ref(x, cond)).abs().max() <= 1e-6
    torch.manual_seed(1)
    other = TimestepMLP(16, 24, out_dim=out_dim, act=act, post_act=post_act, cond_dim=cond_dim)
    ref.load_state_dict(other.state_dict(), strict=True)
    assert (other(x, cond) - ref(x, cond)).abs().max() <= 1e-6


def test_mlp_errors():
    with pytest.raises(ValueError, match="act must be one of"):
        TimestepMLP(4, 8, act="tanhh")
    with pytest.raises(ValueError, match="hidden_dim must be an int >= 1"):
        TimestepMLP(4, 0)
    with pytest.raises(ValueError, match="no cond_proj"):
        TimestepMLP(4, 8)(torch.zeros(1, 4), torch.zeros(1, 3))


# ------------------------------------------------------------------ TimestepEmbedder
def test_embedder_equals_diffusers_time_path():
    torch.manual_seed(0)
    proj, mlp = emb_mod.Timesteps(32, True, 0), emb_mod.TimestepEmbedding(32, 128)
    ours = TimestepEmbedder(128)
    assert default_sinusoid_dim(128) == 32 and ours.emb_dim == 128
    ours.time_embedding.load_state_dict(mlp.state_dict(), strict=True)
    for t in (torch.randint(0, 1000, (6,)), torch.rand(6) * 999):
        assert (ours(t) - mlp(proj(t))).abs().max() <= 1e-6


def test_embedder_output_depends_on_t_and_kinds():
    for kind, t in (
        ("identity", torch.tensor([1, 500])),
        ("times_T", torch.tensor([0.001, 0.5])),
        ("times_1000_over_T", torch.tensor([4, 2000])),
        ("quarter_log", torch.tensor([0.01, 5.0])),
    ):
        e = TimestepEmbedder(64, time_input=kind, num_timesteps=4000 if kind == "times_1000_over_T" else 1000)
        out = e(t)
        assert out.shape == (2, 64) and not torch.allclose(out[0], out[1])
        expected = e.time_embedding(sinusoidal_embedding(time_input(t, kind, e.num_timesteps), 16, "adm"))
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_embedder_fourier_and_errors():
    e = TimestepEmbedder(64, time_proj=FourierEmbedding.edm(24), time_input="quarter_log")
    assert isinstance(e.time_proj, FourierEmbedding) and e.time_embedding.linear_1.in_features == 24
    assert e(torch.rand(3) + 0.1).shape == (3, 64)
    assert math.isclose(default_sinusoid_dim(1280), 320) and default_sinusoid_dim(8) == 4
    with pytest.raises(ValueError, match="time_input must be one of"):
        TimestepEmbedder(64, time_input="seconds")
    with pytest.raises(ValueError, match="convention must be one of"):
        TimestepEmbedder(64, convention="adn")
    with pytest.raises(ValueError, match="emb_dim must be an int >= 1"):
        TimestepEmbedder(0)


def test_hooks_on_children_still_fire():
    e = TimestepEmbedder(32)
    t = torch.tensor([4, 9])
    expected = e(t)
    seen = []
    for module in (e.time_proj, e.time_embedding, e.time_embedding.linear_1, e.time_embedding.act):
        module.register_forward_hook(lambda m, args, out: seen.append(type(m).__name__))
    assert torch.equal(e(t), expected)
    assert sorted(seen) == ["Linear", "SiLU", "SinusoidalEmbedding", "TimestepMLP"]


def per_token_timesteps(batch=2, frames=16, tokens=4096, floating=False):
    """Diffusion-forcing style: each frame its own t, every token of the frame the same."""
    frame_t = torch.randint(0, 1000, (batch, frames), generator=torch.Generator().manual_seed(0))
    t = frame_t.repeat_interleave(tokens // frames, dim=1)
    return t.float() * 0.5 if floating else t


@pytest.mark.parametrize("floating", [False, True])
def test_embedder_per_token_runs_the_distinct_values_and_equals_the_per_token_run(floating):
    torch.manual_seed(0)
    embedder = TimestepEmbedder(64, 32)
    t = per_token_timesteps(floating=floating)
    calls = []
    embedder.time_embedding.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    with torch.no_grad():
        out = embedder(t)
        per_token = embedder.time_embedding(embedder.time_proj(t.reshape(-1)))
    assert out.shape == (2, 4096, 64)
    assert calls[0] == torch.unique(t).numel() <= 32  # the MLP saw the distinct values only
    # equal up to the matrix multiply's rounding, which depends on the number of rows
    torch.testing.assert_close(out.reshape(-1, 64), per_token, rtol=0, atol=1e-6)


def test_embedder_per_token_gradients_reach_the_weights_as_a_per_token_run():
    torch.manual_seed(0)
    embedder = TimestepEmbedder(16, 8)
    t = per_token_timesteps(tokens=1024)
    target = torch.randn(2, 1024, 16)
    grads = []
    for run in (embedder, lambda s: embedder.time_embedding(embedder.time_proj(s))):
        embedder.zero_grad()
        (run(t) - target).pow(2).mean().backward()
        grads.append(embedder.time_embedding.linear_1.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_embedder_per_token_not_reused_with_a_condition_or_grad_wrt_t():
    torch.manual_seed(0)
    embedder = TimestepEmbedder(16, 8, cond_dim=4)
    t = per_token_timesteps(tokens=1024).float().requires_grad_()
    calls = []
    embedder.time_embedding.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[:-1]))
    embedder(t).sum().backward()
    assert calls[-1] == (2, 1024) and t.grad is not None
    embedder(t.detach(), torch.randn(2, 1024, 4))
    assert calls[-1] == (2, 1024)


@pytest.mark.parametrize("batch, distinct", [(4, 4), (600, 600), (600, 1), (600, 3)])
def test_embedder_with_fourier_features_of_rows_embeds_each_row(batch, distinct):
    # k-diffusion's FourierFeatures take [B, 1]: a row, not an entry, is one timestep (no reuse of entries)
    torch.manual_seed(0)
    embedder = TimestepEmbedder(32, time_proj=FourierEmbedding(16, in_features=1))
    t = torch.randint(0, distinct, (batch, 1)).float() + 0.5
    with torch.no_grad():
        expected = embedder.time_embedding(embedder.time_proj(t))
        assert torch.equal(embedder(t), expected) and expected.shape == (batch, 32)


def test_embedder_scalar_step_with_an_unbatched_condition_is_one_row():
    torch.manual_seed(0)
    embedder, condition = TimestepEmbedder(32, cond_dim=4), torch.randn(4)
    with torch.no_grad():
        expected = embedder.time_embedding(embedder.time_proj(torch.tensor(5)), condition)
        assert expected.shape == (32,) and torch.equal(embedder(torch.tensor(5), condition), expected)
        assert embedder(5, condition[None].expand(3, 4)).shape == (3, 32)  # [B, cond_dim]: B rows


def test_quarter_log_takes_a_half_precision_sigma_to_float32_first():
    """EDM casts sigma to float32 before c_noise = ln(sigma) / 4: a bfloat16 log would be off by 1.8e-3 at 80."""
    for dtype in (torch.float16, torch.bfloat16):
        sigma = torch.tensor([0.5, 80.0], dtype=dtype)  # both exact in either dtype
        assert torch.equal(time_input(sigma, "quarter_log"), torch.tensor([0.5, 80.0]).log() / 4)


def test_the_integer_step_cache_is_the_cpus_whatever_the_default_device():
    module, t = SinusoidalEmbedding(16, num_timesteps=1000), torch.tensor([1, 2])
    torch.set_default_device("meta")
    try:
        out = module(t)
    finally:
        torch.set_default_device(None)
    assert out.device.type == "cpu" and torch.equal(out, sinusoidal_embedding(t, 16))


def test_a_batch_condition_applies_to_each_rows_per_token_timesteps():
    torch.manual_seed(0)
    embedder = TimestepEmbedder(64, 16, cond_dim=4)
    t, condition = torch.tensor([[0, 999, 500], [7, 7, 3]]), torch.randn(2, 4)
    with torch.no_grad():
        rows = torch.stack([embedder(t[b], condition=condition[b].expand(3, 4)) for b in range(2)])
        assert torch.allclose(embedder(t, condition=condition), rows, atol=1e-6)


def test_batch_size_takes_one_step_or_as_many_rows():
    embedder = TimestepEmbedder(32, 8)
    with torch.no_grad():
        one = embedder(torch.tensor(5), batch_size=3)
        assert torch.equal(embedder(torch.tensor([5]), batch_size=3), one)  # [1] expands, as diffusers' UNets do
        assert torch.equal(embedder(5, batch_size=3), one)
    for t in (torch.zeros(2, 5), [1, 2], torch.tensor([1, 2])):
        with pytest.raises(ValueError, match=r"is not one step or 3 rows: batch_size=3"):
            embedder(t, batch_size=3)
