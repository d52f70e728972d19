"""On a GPU, no more work than diffusers: on the path the package takes on an accelerator (tensors report that
they are not on the CPU), the function, the modules and every patched tiny model run no more kernels and write no
more bytes than the installed diffusers' own, and read no value on the host. A small batch's time on a GPU is its
launches, a large one's its bytes; scripts/bench_gpu.py times both on a real device."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed import (
    FourierEmbedding,
    LowPrecisionTimestepWarning,
    SinusoidalEmbedding,
    TimestepEmbedder,
    get_timestep_embedding,
)
from timestep_embed.interop import patch_diffusers_model

from ..fixtures.coverage_reasons import LIMITS
from ..fixtures.devices import accelerator_path, counted_reads, kernel_count
from ..fixtures.tiny import BY_CLASS, TINY, build, run

diffusers = pytest.importorskip("diffusers")
embeddings = diffusers.models.embeddings


def assert_no_more_work(ours, theirs) -> None:
    assert ours.kernels <= theirs.kernels, (dict(ours.ops), dict(theirs.ops))
    assert ours.written <= theirs.written, (ours.written, theirs.written)


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([1, 2, 64, 1000, 4096, 20000]),
    dim=st.sampled_from([7, 32, 256, 320, 1280]),
    dtype=st.sampled_from([torch.int64, torch.int32, torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    flip=st.booleans(),
    shift=st.sampled_from([0, 1, 0.5]),
    scale=st.sampled_from([1, 1000, 0.25]),
    max_period=st.sampled_from([10000, 100]),
)
def test_the_function_runs_no_more_kernels_and_writes_no_more_bytes_than_diffusers(
    n, dim, dtype, flip, shift, scale, max_period
):
    t = (torch.arange(n) % 1000).to(dtype)
    flags = (flip, shift, scale, max_period)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LowPrecisionTimestepWarning)  # half-precision t: warned by its dtype
        ours = kernel_count(lambda: get_timestep_embedding(t, dim, *flags))
    theirs = kernel_count(lambda: embeddings.get_timestep_embedding(t, dim, *flags))
    assert_no_more_work(ours, theirs)


def _mlp_pair(width: int):
    """Our embedder and diffusers' ``Timesteps`` + ``TimestepEmbedding`` with the same weights."""
    ours = TimestepEmbedder(width, sinusoid_dim=320, num_timesteps=1000)
    proj, mlp = embeddings.Timesteps(320, True, 0), embeddings.TimestepEmbedding(320, width)
    mlp.load_state_dict(ours.time_embedding.state_dict())
    return ours, lambda t: mlp(proj(t))


@pytest.mark.parametrize("n", [2, 4096])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_the_modules_run_no_more_kernels_and_write_no_more_bytes_than_diffusers(n, autocast, dtype):
    t = torch.arange(n).to(dtype) % 1000
    ours, theirs = _mlp_pair(1280)
    x = torch.rand(n) + 0.1
    fourier = FourierEmbedding(16, log=True, first="cos")
    projection = embeddings.GaussianFourierProjection(8, log=True, flip_sin_to_cos=True)
    projection.weight.data.copy_(fourier.weight)
    sinusoid, timesteps = SinusoidalEmbedding(320, num_timesteps=1000), embeddings.Timesteps(320, True, 0)
    pairs = {
        "sinusoid": (lambda: sinusoid(t), lambda: timesteps(t)),
        "embedder": (lambda: ours(t), lambda: theirs(t)),
        "fourier": (lambda: fourier(x), lambda: projection(x)),
    }  # fmt: skip
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        for name, (a, b) in pairs.items():
            assert torch.allclose(a().float(), b().float(), atol=1e-2), name  # the same module, not just as cheap
            assert_no_more_work(kernel_count(a), kernel_count(b))


# the tiny models with a time path to patch (the coverage table names why the others have none); AnyFlow-FAR's
# flex_attention runs under no dispatch mode
PATCHED = sorted(c for c in BY_CLASS if "patch" not in LIMITS.get(c, {}) and c != "AnyFlowFARTransformer3DModel")


def _work(model, inputs, t, arg: str):
    count = kernel_count(lambda: run(model, inputs, t, arg))
    with accelerator_path(), counted_reads() as reads:
        run(model, inputs, t, arg)
    return count, sum(reads.values())


@pytest.mark.parametrize("cls", PATCHED)
def test_a_patched_model_runs_no_more_kernels_writes_no_more_bytes_and_reads_no_more_than_before(cls):
    model, inputs, t = build(BY_CLASS[cls])
    arg = TINY[BY_CLASS[cls]].timestep_arg
    before, reads_before = _work(model, inputs, t, arg)
    patched = patch_diffusers_model(copy.deepcopy(model))
    after, reads_after = _work(patched, inputs, t, arg)
    assert reads_after <= reads_before  # diffusers' own reads (a few models read a shape or a mask) stay
    assert_no_more_work(after, before)
