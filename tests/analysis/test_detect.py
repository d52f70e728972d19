"""Convention detector and diff report: every preset, diffusers' flags (run-time oracle), rounding, garbage."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.analysis import detect_convention, diff_report
from timestep_embed.analysis.dump import MAX_DIM, MAX_TIMESTEPS, timestep_range
from timestep_embed.cli import main, parse_timesteps
from timestep_embed.conventions import PRESETS, Convention
from timestep_embed.nn import SinusoidalEmbedding
from timestep_embed.sinusoidal import sinusoidal_embedding

T = np.arange(0, 1000, 3, dtype=np.float64)  # includes values bf16/fp16 cannot hold exactly


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_detects_every_preset(name):
    emb = sinusoidal_embedding(torch.from_numpy(T), 32, name).numpy()
    result = detect_convention(emb, T)
    assert result.matched and result.convention == PRESETS[name] and name in result.presets
    assert result.rounding is None and result.residual < 1e-4


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("max_period", [10000, 1000])
def test_detects_diffusers_flags(flip, shift, max_period):
    embeddings = pytest.importorskip("diffusers.models.embeddings")

    def diffusers_impl(t):
        return embeddings.get_timestep_embedding(t, 32, flip, shift, max_period=max_period)

    result = detect_convention(diffusers_impl, T)
    expected = Convention("concat", "cos" if flip else "sin", float(shift), float(max_period))
    assert result.matched and result.convention == expected, result.summary()


@pytest.mark.filterwarnings("ignore::timestep_embed.guards.LowPrecisionTimestepWarning")
@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bfloat16"), (torch.float16, "float16")])
def test_detects_timesteps_rounded_before_the_embedding(dtype, name):
    t = torch.from_numpy(T + 0.3)  # fractional: float16 has to round them too
    emb = sinusoidal_embedding(t.to(dtype), 32, "adm").numpy()
    result = detect_convention(emb, t.numpy())
    assert result.matched and result.convention == PRESETS["adm"] and result.rounding == name
    assert name in result.summary()


def test_detects_flux_scaling_in_bfloat16():
    """black-forest-labs/flux forms time_factor * t in bfloat16: sigma 0.99 reaches the phase as 988."""
    sigma = np.linspace(0.0, 1.0, 97)
    t = torch.from_numpy(sigma).to(torch.bfloat16)
    emb = sinusoidal_embedding(t, 64, "adm", scale=1000, scale_in_input_dtype=True, dtype=torch.bfloat16)
    result = detect_convention(emb, sigma)
    assert result.matched, result.summary()
    assert result.convention == Convention("concat", "cos", 0.0, scale=1000.0)
    assert result.rounding == "bfloat16, scale * t formed in bfloat16"


@pytest.mark.parametrize("gain", [64**-0.5, 2.0])
def test_detects_an_output_gain_as_a_gain(gain):
    pos = np.arange(0, 200, dtype=np.float64)
    emb = sinusoidal_embedding(torch.from_numpy(pos), 64, "mae", gain=gain).numpy()
    result = detect_convention(emb, pos)
    assert result.matched and result.convention.gain == pytest.approx(gain, rel=1e-6), result.summary()
    assert result.presets == ("mae",) and "an output gain of" in result.summary()
    assert not any("not sin/cos pairs" in n for n in result.notes)


def test_garbage_matches_nothing_and_says_so():
    garbage = np.random.default_rng(0).normal(size=(len(T), 32))
    result = detect_convention(garbage, T)
    assert not result.matched and result.residual > 0.5
    text = result.summary()
    assert "NO MATCH" in text and "not sin/cos pairs" in text


def test_shuffled_columns_match_nothing():
    emb = sinusoidal_embedding(torch.from_numpy(T), 32, "adm").numpy()
    result = detect_convention(emb[:, np.random.default_rng(1).permutation(32)], T)
    assert not result.matched


@settings(max_examples=8, deadline=None)
@given(
    period=st.floats(300, 50000),
    scale=st.sampled_from([0.5, 1.0, 2.0]),
    layout=st.sampled_from(["concat", "interleaved"]),
    first=st.sampled_from(["sin", "cos"]),
)
def test_continuous_fit_recovers_off_grid_values(period, scale, layout, first):
    conv = Convention(layout, first, 0.0, period, scale)
    t = np.arange(0, 400, dtype=np.float64)
    result = detect_convention(sinusoidal_embedding(torch.from_numpy(t), 32, conv).numpy(), t)
    assert result.matched, result.summary()
    assert (result.convention.layout, result.convention.first) == (layout, first)
    assert result.convention.scale == pytest.approx(scale, rel=1e-3)
    decay = np.log(result.convention.max_period) / (16 - result.convention.freq_shift)
    assert decay == pytest.approx(np.log(period) / 16, rel=1e-3)


@settings(max_examples=25, deadline=None)
@given(
    dim=st.integers(8, 48),
    layout=st.sampled_from(["concat", "interleaved"]),
    first=st.sampled_from(["sin", "cos"]),
    shift=st.sampled_from([0.0, 1.0]),
    period=st.sampled_from([10000.0, 1000.0, 100.0]),
    scale=st.sampled_from([1.0, 1000.0]),
)
def test_any_grid_convention_is_recovered(dim, layout, first, shift, period, scale):
    conv = Convention(layout, first, shift, period, scale)
    t = np.arange(0, 1, 1 / 300) if scale == 1000.0 else np.arange(0, 1000, 3.0)
    emb = sinusoidal_embedding(torch.from_numpy(t), dim, conv, dtype=torch.float64)
    result = detect_convention(emb, t)
    assert result.matched, result.summary()
    found = result.convention  # the same numbers (tiny widths have look-alike grids)
    again = sinusoidal_embedding(torch.from_numpy(t), dim, found, dtype=torch.float64)
    assert (again - emb).abs().max() <= 1e-3
    if dim >= 12:
        assert found == conv


def test_bfloat16_dump_matches_within_its_precision():
    emb = sinusoidal_embedding(torch.from_numpy(T), 32, "ddpm").to(torch.bfloat16)
    result = detect_convention(emb, T)
    assert result.matched and result.convention == PRESETS["ddpm"]
    assert result.tolerance >= 2**-7


def test_detects_a_callable_module_and_odd_width():
    result = detect_convention(SinusoidalEmbedding(33, "vaswani"))
    assert result.matched and result.convention == PRESETS["vaswani"]


def test_detect_input_errors():
    with pytest.raises(ValueError, match="rows but timesteps has"):
        detect_convention(np.zeros((4, 8)), np.arange(5))
    with pytest.raises(ValueError, match="timesteps are required"):
        detect_convention(np.zeros((4, 8)))
    with pytest.raises(ValueError, match="NaN"):
        detect_convention(np.full((2, 8), np.nan), [0, 1])


# ------------------------------------------------------------------ diff report
@pytest.mark.filterwarnings("ignore::timestep_embed.guards.LowPrecisionTimestepWarning")
def test_diff_report_names_each_cause():
    grid = torch.arange(0, 1000, 3)
    assert diff_report("adm", "ldm", grid, 32).identical
    swapped = diff_report("ddpm", Convention("concat", "cos", 1.0), grid, 32)
    assert not swapped.identical and any("swapped" in c for c in swapped.causes)
    shift = diff_report("ddpm", Convention("concat", "sin", 0.0), grid, 32)
    assert [c for c in shift.causes if "half - 1" in c] and len(shift.causes) == 1
    assert shift.columns.min() >= 1  # column 0 (w_0 = 1) is the same in both
    rounded = diff_report("adm", lambda t: sinusoidal_embedding(t.to(torch.bfloat16).float(), 32, "adm"), grid, 32)
    assert rounded.causes == ["B rounds the timesteps to bfloat16 before the embedding (A does not)"]
    assert rounded.rows.min() > 256  # bf16 holds every integer up to 256
    layout = diff_report("vaswani", Convention("concat", "sin"), grid, 32)
    assert any("interleaved" in c for c in layout.causes)
    assert "likely cause" in layout.summary()


def test_diff_report_unknown_implementation():
    noise = np.random.default_rng(2).normal(size=(334, 32))
    report = diff_report("adm", lambda t: noise, torch.arange(0, 1000, 3), 32)
    assert not report.identical and "matches no known sinusoidal convention" in report.causes[0]


# ------------------------------------------------------------------ CLI
def _run(argv):
    return main(["detect", *argv])


def test_cli_detect(tmp_path, capsys):
    t = np.arange(0, 1000, 5)
    np.save(tmp_path / "emb.npy", sinusoidal_embedding(torch.from_numpy(t), 64, "ddpm").numpy())
    np.save(tmp_path / "t.npy", t)
    assert _run([str(tmp_path / "emb.npy"), "--timesteps", "0:1000:5"]) == 0
    assert "presets: ddpm" in capsys.readouterr().out
    assert _run([str(tmp_path / "emb.npy"), "--timesteps", str(tmp_path / "t.npy"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["matched"] and data["convention"]["freq_shift"] == 1.0
    np.save(tmp_path / "garbage.npy", np.random.default_rng(0).normal(size=(200, 64)))
    assert _run([str(tmp_path / "garbage.npy"), "--timesteps", "0:1000:5"]) == 1
    assert _run([str(tmp_path / "emb.npy"), "--timesteps", "0:10"]) == 2
    assert "rows but timesteps has" in capsys.readouterr().err


def test_parse_timesteps():
    assert parse_timesteps("0:4").tolist() == [0, 1, 2, 3]
    assert parse_timesteps("0:1:0.25").tolist() == [0, 0.25, 0.5, 0.75]
    for bad in ("10", "a:b", "0:5:0"):
        with pytest.raises(ValueError, match="start:stop"):
            parse_timesteps(bad)


@pytest.mark.parametrize(
    "emb, t",
    [
        (np.zeros((0, 8)), np.zeros(0)),  # an empty dump
        (sinusoidal_embedding(torch.zeros(1), 8, "adm").numpy(), np.zeros(1)),  # one row at t = 0
        (sinusoidal_embedding(torch.zeros(5), 8, "adm").numpy(), np.zeros(5)),  # many rows, all t = 0
        (sinusoidal_embedding(torch.tensor([1.0, 2.0, 1.0]), 8, "adm").numpy(), np.array([1.0, 2.0, 1.0])),
    ],
)
def test_detect_needs_evidence(emb, t):
    with pytest.raises(ValueError, match="not enough data"):
        detect_convention(emb, t)


def test_detect_tolerance_must_be_positive():
    emb = sinusoidal_embedding(torch.arange(10.0), 8, "adm").numpy()
    for tol in (-1e-3, 0.0, float("nan")):
        with pytest.raises(ValueError, match="tol must be (> 0|finite)"):
            detect_convention(emb, np.arange(10.0), tol=tol)


# ---- hostile sizes: refused by name before memory is taken, or read in MAX_ROWS rows
def test_a_range_of_a_trillion_timesteps_is_refused_before_allocating():
    with pytest.raises(
        ValueError, match=r"timesteps: 1,000,000,000,000 values \(8 TB\) is more than the detector takes"
    ):
        timestep_range(0, 1e12)
    assert np.array_equal(timestep_range(0, 10, 0.5), np.arange(0, 10, 0.5))
    assert timestep_range(0, MAX_TIMESTEPS).size == MAX_TIMESTEPS  # the limit itself is accepted


def test_a_large_memory_mapped_dump_is_read_in_a_few_rows(tmp_path):
    n = 2_000_000  # 128 MB of float32 on disk; the detector reads 2048 of its rows
    dump = np.lib.format.open_memmap(tmp_path / "emb.npy", mode="w+", dtype=np.float32, shape=(n, 16))
    for start in range(0, n, 1_000_000):
        dump[start : start + 1_000_000] = sinusoidal_embedding(
            torch.arange(start, start + 1_000_000) % 1000, 16
        ).numpy()
    dump.flush()
    del dump
    emb, t = np.load(tmp_path / "emb.npy", mmap_mode="r"), np.arange(n) % 1000
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    result = detect_convention(emb, t)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.matched and "adm" in result.presets
    assert peak < 16e6  # a float64 copy of the dump alone would be 256 MB


def test_a_dump_wider_than_the_detector_takes_is_refused():
    with pytest.raises(ValueError, match=f"embeddings: {MAX_DIM + 2:,} columns is wider"):
        detect_convention(np.zeros((4, MAX_DIM + 2), np.float32), np.arange(4))


def test_a_match_holds_on_every_row_not_only_those_the_search_reads():
    t = np.arange(2048.0)
    emb = sinusoidal_embedding(torch.from_numpy(t), 64, "adm", precise=True).numpy()
    assert detect_convention(emb, t).matched
    read = set(np.linspace(0, 2047, 1024).round().astype(int).tolist())  # the rows the grid search reads
    unread = [i for i in range(2048) if i not in read]
    emb[unread] = -emb[unread]
    found = detect_convention(emb, t)
    assert not found.matched and found.residual > 1.9


def test_diff_report_names_an_output_gain():
    scaled = Convention("concat", "sin", 0.0, 10000.0, 1.0, 128**-0.5)
    causes = diff_report("mae", scaled, torch.arange(1000), 128).causes
    assert causes and "a different output gain" in causes[0] and "B 0.0883883" in causes[0], causes
