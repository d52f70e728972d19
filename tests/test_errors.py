"""A user's mistake with any public function or module of the core, ``nn`` and ``analysis`` is answered
by the package, before torch, numpy or Python: a TypeError or ValueError raised inside timestep_embed
whose message names the argument.

Each case calls one function with one wrong argument (a wrong type, dtype, shape or device, None, a
string, a bool, a complex number, a ragged list...) and names the word the message must contain.
"""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch

import timestep_embed as te
from timestep_embed import analysis, grid_embedding, grid_positions, patch_grid_embedding, video_grid_embedding
from timestep_embed.analysis import figures, naive, properties, relation
from timestep_embed.analysis.diff_report import embedding_causes
from timestep_embed.analysis.dump import timestep_range
from timestep_embed.nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP, time_input

T = torch.tensor([1.0, 2.0])
EMB = np.zeros((8, 8))
BAD_VALUES = {  # not numbers at all: refused wherever numbers are expected
    "None": None,
    "str": "abc",
    "bool": True,
    "complex": 1j,
    "bool_tensor": torch.tensor([True]),
    "complex_tensor": torch.tensor([1j]),
    "str_list": ["a"],
    "object": object(),
    "ragged": [[1, 2], [3]],
}
BAD_INTS = {
    "None": None,
    "str": "8",
    "float": 8.5,
    "bool": True,
    "negative": -1,
    "zero": 0,
    "tensor": torch.tensor([8]),
}
BAD_REALS = {"None": None, "str": "1", "nan": float("nan"), "inf": float("inf"), "complex": 1j, "bool": True}
BAD_DTYPES = {"None": None, "int64": torch.int64, "str": "float32", "numpy": np.float32, "complex": torch.complex64}
BAD_DEVICES = {"nonsense": "nonsense", "float": 3.5, "object": object(), "absent": "cuda:9"}

# (function name, argument name, lambda value: the call)
VALUE_TAKERS = [
    ("sinusoidal_embedding", "timesteps", lambda v: te.sinusoidal_embedding(v, 8)),
    ("get_timestep_embedding", "timesteps", lambda v: te.get_timestep_embedding(v, 8)),
    ("sinusoidal_embedding_np", "timesteps", lambda v: te.sinusoidal_embedding_np(v, 8)),
    ("SinusoidalEmbedding.forward", "timesteps", lambda v: SinusoidalEmbedding(8, num_timesteps=10)(v)),
    ("FourierEmbedding.forward", "x", lambda v: FourierEmbedding(8)(v)),
    ("TimestepEmbedder.forward", "timesteps", lambda v: TimestepEmbedder(16)(v)),
    ("time_input", "t", lambda v: time_input(v, "times_T")),
    ("TimestepMLP.forward", "sample", lambda v: TimestepMLP(8, 16)(v)),
    ("grid_embedding", "positions", lambda v: grid_embedding(v, [4])),
    ("bounds", "positions", lambda v: analysis.bounds(v, 8)),
    ("dot_by_offset", "offsets", lambda v: analysis.dot_by_offset(v, 8)),
    ("rotation_matrix", "k", lambda v: analysis.rotation_matrix(v, 8)),
    ("rotation_error", "p", lambda v: analysis.rotation_error(v, 1, 8)),
    ("uniqueness", "embeddings", lambda v: analysis.uniqueness(v)),
    ("relate", "reference", lambda v: relation.relate(v, [1.0])),
    ("naive_embedding", "positions", lambda v: naive.naive_embedding("raw", v)),
    ("detect_convention", "embeddings", lambda v: te.detect_convention(v, np.arange(8))),
    ("detect_convention", "timesteps", lambda v: te.detect_convention(EMB, v)),
    ("diff_report", "timesteps", lambda v: te.diff_report("adm", "ddpm", v, 8)),
    ("embedding_causes", "a", lambda v: embedding_causes(v, EMB[:4], np.arange(4))),
    ("frequency_coverage", "t_range", lambda v: analysis.frequency_coverage(v)),
]
INT_TAKERS = [
    ("sinusoidal_embedding", "dim", lambda v: te.sinusoidal_embedding(T, v)),
    ("get_timestep_embedding", "embedding_dim", lambda v: te.get_timestep_embedding(T, v)),
    ("frequencies", "dim", lambda v: te.frequencies(v)),
    ("frequencies_np", "dim", lambda v: te.frequencies_np(v)),
    ("layout_permutation", "dim", lambda v: te.layout_permutation("adm", "vaswani", v)),
    ("SinusoidalEmbedding", "dim", lambda v: SinusoidalEmbedding(v)),
    (
        "SinusoidalEmbedding",
        "num_timesteps",
        lambda v: SinusoidalEmbedding(8, num_timesteps=v if v is not None else ""),
    ),
    ("FourierEmbedding", "dim", lambda v: FourierEmbedding(v)),
    ("FourierEmbedding", "in_features", lambda v: FourierEmbedding(8, in_features=v if v is not None else "")),
    ("TimestepMLP", "in_dim", lambda v: TimestepMLP(v, 8)),
    ("TimestepMLP", "hidden_dim", lambda v: TimestepMLP(8, v)),
    ("TimestepEmbedder", "emb_dim", lambda v: TimestepEmbedder(v)),
    ("TimestepEmbedder", "num_timesteps", lambda v: TimestepEmbedder(16, num_timesteps=v)),
    (
        "TimestepEmbedder.forward",
        "batch_size",
        lambda v: TimestepEmbedder(16)(1.0, batch_size=v if v is not None else ""),
    ),
    ("default_sinusoid_dim", "emb_dim", lambda v: te.nn.default_sinusoid_dim(v)),
    ("time_input", "num_timesteps", lambda v: time_input(T, "times_T", v)),
    ("patch_grid_embedding", "dim", lambda v: patch_grid_embedding(v, 4)),
    ("patch_grid_embedding", "grid_size", lambda v: patch_grid_embedding(8, v)),
    ("video_grid_embedding", "temporal_size", lambda v: video_grid_embedding(16, 4, v)),
    ("grid_positions", "sizes", lambda v: grid_positions(v)),
    ("grid_embedding", "dims", lambda v: grid_embedding(torch.zeros(2, 1), [v])),
    ("bounds", "dim", lambda v: analysis.bounds([1.0], v)),
    ("wavelengths", "dim", lambda v: analysis.wavelengths(v)),
    ("position_uniqueness", "n_positions", lambda v: analysis.position_uniqueness(v, 8)),
    ("uniqueness", "max_rows", lambda v: analysis.uniqueness(np.eye(3), max_rows=v)),
    ("frequency_coverage", "dim", lambda v: analysis.frequency_coverage((0, 1), v)),
    ("diff_report", "dim", lambda v: te.diff_report("adm", "ddpm", np.arange(8), v)),
    ("scheme_properties", "n_positions", lambda v: naive.scheme_properties("raw", v)),
    ("naive_embedding", "length", lambda v: naive.naive_embedding("raw", [0], v if v is not None else "")),
    ("make_figures", "dpi", lambda v: figures.make_figures("unused", names=["heatmap"], dpi=v)),
    ("make_figures", "dim", lambda v: figures.make_figures("unused", dim=v, names=["heatmap"])),
]
REAL_TAKERS = [
    *[
        ("sinusoidal_embedding", f, lambda v, f=f: te.sinusoidal_embedding(T, 8, **{f: v if v is not None else ""}))
        for f in ("freq_shift", "max_period", "scale", "gain")
    ],
    (
        "get_timestep_embedding",
        "downscale_freq_shift",
        lambda v: te.get_timestep_embedding(T, 8, downscale_freq_shift=v),
    ),
    ("get_timestep_embedding", "scale", lambda v: te.get_timestep_embedding(T, 8, scale=v)),
    ("get_timestep_embedding", "max_period", lambda v: te.get_timestep_embedding(T, 8, max_period=v)),
    ("frequencies", "max_period", lambda v: te.frequencies(8, max_period=v)),
    ("FourierEmbedding", "std", lambda v: FourierEmbedding(8, std=v)),
    ("patch_grid_embedding", "base_size", lambda v: patch_grid_embedding(8, 4, base_size=v)),
    ("patch_grid_embedding", "interpolation_scale", lambda v: patch_grid_embedding(8, 4, interpolation_scale=v)),
    (
        "video_grid_embedding",
        "spatial_interpolation_scale",
        lambda v: video_grid_embedding(16, 4, 2, spatial_interpolation_scale=v),
    ),
    ("detect_convention", "tol", lambda v: te.detect_convention(EMB, np.arange(8), tol=v)),
    ("diff_report", "tol", lambda v: te.diff_report("adm", "ddpm", np.arange(8), 8, tol=v)),
    ("uniqueness", "tol", lambda v: analysis.uniqueness(np.eye(3), tol=v)),
    ("position_uniqueness", "tol", lambda v: analysis.position_uniqueness(10, 8, tol=v)),
    ("frequency_coverage", "step", lambda v: analysis.frequency_coverage(step=v if v is not None else "")),
    ("frequency_coverage", "fraction", lambda v: analysis.frequency_coverage(fraction=v)),
    ("rotation_matrix", "k", lambda v: analysis.rotation_matrix(v, 8)),
    ("rotation_error", "k", lambda v: analysis.rotation_error([1.0], v, 8)),
    ("timestep_range", "stop", lambda v: timestep_range(0, v)),
]
FLAG_TAKERS = [
    ("sinusoidal_embedding", "precise", lambda v: te.sinusoidal_embedding(T, 8, precise=v)),
    ("sinusoidal_embedding", "pad_odd", lambda v: te.sinusoidal_embedding(T, 7, pad_odd=v)),
    ("sinusoidal_embedding", "scale_in_input_dtype", lambda v: te.sinusoidal_embedding(T, 8, scale_in_input_dtype=v)),
    ("get_timestep_embedding", "flip_sin_to_cos", lambda v: te.get_timestep_embedding(T, 8, flip_sin_to_cos=v)),
    ("SinusoidalEmbedding", "precise", lambda v: SinusoidalEmbedding(8, precise=v)),
    ("FourierEmbedding", "log", lambda v: FourierEmbedding(8, log=v)),
    ("TimestepMLP", "bias", lambda v: TimestepMLP(8, 16, bias=v)),
    ("frequency_coverage", "warn", lambda v: analysis.frequency_coverage(warn=v)),
]
CHOICE_TAKERS = [
    ("sinusoidal_embedding", "convention", lambda v: te.sinusoidal_embedding(T, 8, v)),
    ("sinusoidal_embedding", "layout", lambda v: te.sinusoidal_embedding(T, 8, layout=v if v is not None else 3)),
    ("SinusoidalEmbedding", "convention", lambda v: SinusoidalEmbedding(8, v)),
    ("FourierEmbedding", "first", lambda v: FourierEmbedding(8, first=v)),
    ("TimestepMLP", "act", lambda v: TimestepMLP(8, 16, act=v if v is not None else 3)),
    ("TimestepEmbedder", "time_input", lambda v: TimestepEmbedder(16, time_input=v)),
    ("time_input", "time_input", lambda v: time_input(T, v)),
    ("grid_embedding", "group", lambda v: grid_embedding(torch.zeros(2, 1), [4], group=v)),
    ("embed", "precision", lambda v: properties.embed([1.0], 8, precision=v)),
    ("naive_embedding", "scheme", lambda v: naive.naive_embedding(v, [1])),
    ("diff_report", "impl_a", lambda v: te.diff_report(v, "ddpm", np.arange(8), 8)),
]
BAD_CHOICES = {"None": None, "unknown": "ddim", "int": 3, "list": ["adm"]}
DTYPE_TAKERS = [
    ("sinusoidal_embedding", "dtype", lambda v: te.sinusoidal_embedding(T, 8, dtype=v)),
    ("grid_embedding", "dtype", lambda v: grid_embedding(torch.zeros(2, 1), [4], dtype=v)),
    ("patch_grid_embedding", "dtype", lambda v: patch_grid_embedding(8, 4, dtype=v)),
]
DEVICE_TAKERS = [
    ("sinusoidal_embedding", "device", lambda v: te.sinusoidal_embedding(T, 8, device=v)),
    ("sinusoidal_embedding(list)", "device", lambda v: te.sinusoidal_embedding([1.0], 8, device=v)),
    ("frequencies", "device", lambda v: te.frequencies(8, device=v)),
    ("grid_positions", "device", lambda v: grid_positions(4, device=v)),
]
# One call each: shapes, devices and values that the functions above cannot take.
SINGLE = {
    "TimestepMLP sample width": ("sample", lambda: TimestepMLP(8, 16)(torch.zeros(2, 5))),
    "TimestepMLP integer sample": ("sample", lambda: TimestepMLP(8, 16)(torch.zeros(2, 8, dtype=torch.int64))),
    "TimestepMLP 0-d sample": ("sample", lambda: TimestepMLP(8, 16)(torch.tensor(1.0))),
    "TimestepMLP sample on meta": ("sample", lambda: TimestepMLP(8, 16)(torch.zeros(2, 8, device="meta"))),
    "TimestepMLP condition width": (
        "condition",
        lambda: TimestepMLP(8, 16, cond_dim=4)(torch.zeros(2, 8), torch.zeros(2, 5)),
    ),
    "TimestepMLP condition list": ("condition", lambda: TimestepMLP(8, 16, cond_dim=4)(torch.zeros(2, 8), [1.0] * 4)),
    "TimestepMLP condition batch": (
        "condition",
        lambda: TimestepMLP(8, 16, cond_dim=4)(torch.zeros(2, 8), torch.zeros(3, 4)),
    ),
    "TimestepMLP condition without cond_proj": (
        "condition",
        lambda: TimestepMLP(8, 16)(torch.zeros(2, 8), torch.zeros(2, 4)),
    ),
    "TimestepEmbedder condition width": ("condition", lambda: TimestepEmbedder(16, cond_dim=4)(T, torch.zeros(2, 5))),
    "TimestepEmbedder condition list": ("condition", lambda: TimestepEmbedder(16, cond_dim=4)(T, [[1.0] * 4] * 2)),
    "TimestepEmbedder t on meta": ("t is on meta", lambda: TimestepEmbedder(16)(torch.zeros(2, device="meta"))),
    "TimestepEmbedder batch_size mismatch": ("batch_size", lambda: TimestepEmbedder(16)(torch.zeros(3), batch_size=2)),
    "TimestepEmbedder time_proj object": ("time_proj", lambda: TimestepEmbedder(16, time_proj=object())),
    "TimestepEmbedder time_proj without width": (
        "sinusoid_dim",
        lambda: TimestepEmbedder(16, time_proj=torch.nn.Identity()),
    ),
    "TimestepEmbedder sinusoid_dim": ("sinusoid_dim", lambda: TimestepEmbedder(16, sinusoid_dim="8")),
    "FourierEmbedding in_features width": (
        "in_features",
        lambda: FourierEmbedding(8, in_features=2)(torch.zeros(3, 3)),
    ),
    "FourierEmbedding x on meta": ("x is on meta", lambda: FourierEmbedding(8)(torch.zeros(2, device="meta"))),
    "FourierEmbedding log of a negative": ("log=True", lambda: FourierEmbedding(8, log=True)(torch.tensor([-1.0]))),
    "FourierEmbedding NaN": ("finite", lambda: FourierEmbedding(8)(torch.tensor([float("nan")]))),
    "FourierEmbedding generator": ("generator", lambda: FourierEmbedding(8, generator="1")),
    "time_input quarter_log of zero": ("quarter_log", lambda: time_input(torch.tensor([0.0]), "quarter_log")),
    "grid_embedding 1-d positions": ("positions", lambda: grid_embedding(torch.zeros(3), [4])),
    "grid_embedding dims int": ("dims", lambda: grid_embedding(torch.zeros(3, 1), 4)),
    "grid_positions without sizes": ("size", lambda: grid_positions()),
    "uniqueness 3-d": ("embeddings", lambda: analysis.uniqueness(np.zeros((2, 2, 2)))),
    "uniqueness NaN rows": ("embeddings", lambda: analysis.uniqueness(np.full((3, 2), np.nan))),
    "uniqueness positions": ("positions", lambda: analysis.uniqueness(np.eye(3), positions="abc")),
    "relate sizes": ("size", lambda: relation.relate([1.0, 2.0], [1.0])),
    "coverage t_range of three": ("t_range", lambda: analysis.frequency_coverage((0, 1, 2))),
    "coverage max_slow_share": ("max_slow_share", lambda: analysis.frequency_coverage(max_slow_share=2.0)),
    "detect 3-d": ("embeddings", lambda: te.detect_convention(np.zeros((8, 8, 2)), np.arange(8))),
    "detect rows": ("rows", lambda: te.detect_convention(EMB, np.arange(9))),
    "detect NaN timesteps": ("timesteps", lambda: te.detect_convention(EMB, np.full(8, np.nan))),
    "detect callable output": ("output of source", lambda: te.detect_convention(lambda t: "x", np.arange(8))),
    "detect too wide": (
        "columns",
        lambda: te.detect_convention(np.zeros((4, (1 << 16) + 2), np.float32), np.arange(4)),
    ),
    "timestep_range too long": ("timesteps", lambda: timestep_range(0, 1e12)),
    "timestep_range step 0": ("step", lambda: timestep_range(0, 10, 0)),
    "diff_report empty": ("timesteps", lambda: te.diff_report("adm", "ddpm", [], 8)),
    "diff_report output": ("output", lambda: te.diff_report(lambda t: "x", "ddpm", np.arange(8), 8)),
    "make_figures names string": ("names", lambda: figures.make_figures("unused", names="heatmap")),
    "make_figures positions": ("positions", lambda: figures.make_figures("unused", positions=400.0)),
    "make_figures a billion positions": ("positions", lambda: figures.make_figures("unused", positions=10**9)),
    "make_figures a huge dim": ("dims", lambda: figures.make_figures("unused", dim=10**7)),
    "frequencies_np max_period": ("max_period", lambda: te.frequencies_np(8, max_period=-1)),
    "convention_to_diffusers": ("convention", lambda: te.convention_to_diffusers(None)),
    "layout_permutation source": ("convention", lambda: te.layout_permutation(3, "adm", 8)),
}


def cases():
    groups = [
        (VALUE_TAKERS, BAD_VALUES),
        (INT_TAKERS, BAD_INTS),
        (REAL_TAKERS, BAD_REALS),
        (FLAG_TAKERS, {"str": "no", "int": 2, "None": None}),
        (CHOICE_TAKERS, BAD_CHOICES),
        (DTYPE_TAKERS, BAD_DTYPES),
        (DEVICE_TAKERS, BAD_DEVICES),
    ]
    for takers, values in groups:
        for function, argument, call in takers:
            for label, value in values.items():
                yield pytest.param(
                    argument, lambda call=call, value=value: call(value), id=f"{function}-{argument}-{label}"
                )
    for label, (word, call) in SINGLE.items():
        yield pytest.param(word, call, id=label)


@pytest.mark.parametrize("word, call", list(cases()))
def test_the_package_answers_with_the_argument_name(word, call):
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    raised_in = traceback.extract_tb(caught.value.__traceback__)[-1].filename
    assert "/timestep_embed/" in raised_in.replace("\\", "/"), f"raised by {raised_in}: {caught.value}"
    message = str(caught.value)
    assert word in message or word.replace("timesteps", "t") in message, message
