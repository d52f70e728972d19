"""Valid inputs of odd kinds are embedded, and inputs that would ask for more memory than there is are refused by
name with the size they would take, before anything is allocated and without reading a tensor's values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import timestep_embed as te
from timestep_embed.analysis.figures import make_figures
from timestep_embed.cli import main
from timestep_embed.nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder
from timestep_embed.sinusoidal import distinct_values

UNSIGNED = [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]


# ---- valid inputs that crashed
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_timesteps_with_few_distinct_values_are_embedded_like_int64(dtype):
    t = (torch.arange(100_000) % 7).to(dtype)  # large enough for the distinct-values path (a sort)
    assert torch.equal(te.sinusoidal_embedding(t, 32), te.sinusoidal_embedding(t.long(), 32))
    values, index = distinct_values(t)
    assert torch.equal(values[index], t.long())
    with pytest.raises(TypeError, match="t must be a torch.Tensor, got list"):
        distinct_values([1, 1, 2])


def test_fourier_features_of_python_floats_are_in_the_weights_dtype_as_the_sinusoid_is():
    module = FourierEmbedding(8)
    assert module([1.0, 2.0]).dtype == torch.float32 == te.sinusoidal_embedding([1.0, 2.0], 8).dtype
    assert module(np.array([1.0, 2.0])).dtype == torch.float32
    assert module(torch.tensor([1.0, 2.0], dtype=torch.float64)).dtype == torch.float64  # a tensor keeps its own


# ---- our messages, not torch's or numpy's
def test_a_sparse_tensor_is_refused_by_name():
    sparse = torch.tensor([1.0, 0.0, 2.0]).to_sparse()
    for call in (lambda: te.sinusoidal_embedding(sparse, 8), lambda: te.sinusoidal_embedding_np(sparse, 8),
                 lambda: FourierEmbedding(8)(sparse), lambda: SinusoidalEmbedding(8)(sparse)):  # fmt: skip
        with pytest.raises(TypeError, match=r"(timesteps|x) must be a dense tensor, got layout torch.sparse_coo"):
            call()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="longdouble is float64 on this platform")
def test_a_longdouble_array_is_refused_by_name():
    for call in (te.sinusoidal_embedding, te.sinusoidal_embedding_np):
        with pytest.raises(TypeError, match="timesteps has numpy dtype float128.*convert it to float64"):
            call(np.array([1, 2], dtype=np.longdouble), 8)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_the_numpy_reference_refuses_what_the_torch_path_refuses(bad):
    for call in (te.sinusoidal_embedding, te.sinusoidal_embedding_np):
        with pytest.raises(ValueError, match="timesteps must be finite"):
            call([1.0, bad], 8)
    with pytest.raises(ValueError, match="overflow the float64 phase"):
        te.sinusoidal_embedding_np([1e300], 8, scale=1e10)


# ---- sizes refused before the allocator is asked
def test_an_embedding_larger_than_memory_is_refused_with_its_size():
    t = torch.zeros(1).expand(10**9)  # 10^9 timesteps that take no memory themselves
    with pytest.raises(ValueError, match=r"timesteps: 1,000,000,000 rows of 320 float32 \(1.28 TB\) is more than"):
        te.sinusoidal_embedding(t, 320)
    with pytest.raises(ValueError, match=r"rows of 320 float64 \(2.56 TB\)"):
        te.sinusoidal_embedding(t, 320, dtype=torch.float64)
    assert te.sinusoidal_embedding(torch.zeros(10**9, device="meta"), 320).is_meta  # no memory: no refusal
    with pytest.raises(ValueError, match=r"timesteps: 1,000,000,000 values to sort for their distinct ones \(32 GB\)"):
        TimestepEmbedder(64)(t)  # before its search for distinct values, which would sort 10^9 values


def test_the_numpy_reference_and_the_comparison_refuse_widths_larger_than_memory(tmp_path, capsys):
    with pytest.raises(
        ValueError, match=r"timesteps: 4 rows of 100000000000 float64 \(3.2 TB\) is more than .*\(not one: 800 GB\)"
    ):
        te.sinusoidal_embedding_np([1.0] * 4, 10**11)
    with pytest.raises(
        ValueError, match=r"dim=1000000000000: 500,000,000,000 float64 frequencies \(dim // 2\) \(4 TB\)"
    ):
        te.frequencies_np(10**12)
    assert main(["compare", "--out", str(tmp_path / "a" / "b"), "--dims", "100000000000", "-n", "4"]) == 2
    assert not (tmp_path / "a").exists()  # the arguments are checked before a folder is made
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["timestep-embed compare: error: dims must be widths in 1 .. 65536, got 100000000000"], err


def test_complex_embeddings_are_refused_in_one_line_naming_the_dtype(tmp_path, capsys):
    np.save(tmp_path / "emb.npy", np.zeros((10, 8), np.complex64))
    assert main(["detect", str(tmp_path / "emb.npy"), "--timesteps", "0:10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "an array of shape (10, 8) (numpy dtype complex64)" in err[0], err


def test_an_integer_step_cache_larger_than_memory_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"num_timesteps: 100,000,000,000 cached rows of 8 float32 \(3.2 TB\)"):
        SinusoidalEmbedding(8, num_timesteps=10**11)
    with pytest.raises(ValueError, match="num_timesteps: 100,000,000,000 cached rows"):
        TimestepEmbedder(32, num_timesteps=10**11)
    TimestepEmbedder(32, num_timesteps=10**11, time_input="times_1000_over_T")  # no cache: nothing to refuse


def test_a_pretrained_folder_that_asks_for_a_huge_cache_is_refused(tmp_path):
    folder = TimestepEmbedder(32, num_timesteps=1000).save_pretrained(tmp_path / "emb")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_timesteps": 10**11}))
    with pytest.raises(ValueError, match="num_timesteps: 100,000,000,000 cached rows"):
        TimestepEmbedder.from_pretrained(folder)


def test_a_dpi_whose_canvas_cannot_fit_in_memory_is_refused_before_drawing(tmp_path):
    with pytest.raises(ValueError, match=r"dpi=100000: [\d,]+ RGBA pixels of the [\d.]+x[\d.]+-inch figure \("):
        make_figures(tmp_path, names=["heatmap"], dpi=100_000)
    assert not list(tmp_path.iterdir())
