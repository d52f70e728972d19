"""Mistakes in configs, data files and sizes refused by name before the work, each in one line with exit code 2 in
the command line: widths the attention cannot split, sections replaced by a number, IDX files that are not MNIST's
bytes and labels, a gzip stream that expands past its header, arrays and sample counts the memory cannot hold, a
scoring that would fail after the training, and a sampling that would overwrite a run's scored samples."""

from __future__ import annotations

import gzip
import math
import struct

import numpy as np
import pytest

from timestep_embed.cli import main
from timestep_embed.ddpm import ConfigError, DataError, RunConfig, UNet, run_training, sample_run
from timestep_embed.ddpm.data import load_idx_mnist, load_mnist, read_idx
from timestep_embed.ddpm.evaluate import frechet_distance, score
from timestep_embed.ddpm.runtime import Runtime
from timestep_embed.ddpm.trained import generate

from .test_data import idx_bytes, write_mnist
from .test_faults import SMOKE, fast


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.channels=[16,100]", "self-attention splits 100 channels into 3 heads"),
        ("train=5", "train = 5: expected a mapping for TrainConfig"),
        ("train=null", "train = None: expected a mapping for TrainConfig"),
        ("train.lr=1" + "0" * 400, "train.lr = inf: expected > 0"),
        (f"train.lr={2**1024 - 1}", "train.lr = inf: expected > 0"),  # just below 2**1024: no float holds it either
    ],
)
def test_a_config_mistake_is_one_line_before_anything_runs(override, message, capsys):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        RunConfig.load(SMOKE, [override])
    assert main(["train", "--config", "smoke", "--print-config", override]) == 2
    assert message in one_error_line(capsys)
    RunConfig.load(SMOKE, ["model.channels=[16,96]", "sample.num_samples=1"])  # these fit


@pytest.mark.parametrize(
    "images, labels, message",
    [
        (np.full((3, 28, 28), 0.5, np.float32), np.arange(3), "expected uint8 pixels (IDX type 0x08), got float32"),
        (np.full((3, 28, 28), 300, np.int32), np.arange(3), "expected uint8 pixels (IDX type 0x08), got int32"),
        (np.zeros((3, 28, 28), np.uint8), np.array([0, 4, 10]), "expected digit labels 0..9, got values from 0 to 10"),
    ],
)
def test_idx_files_that_are_not_mnists_bytes_and_digits_are_refused(images, labels, message, tmp_path):
    code = {np.dtype(np.float32): 0x0D, np.dtype(np.int32): 0x0C, np.dtype(np.uint8): 0x08}[images.dtype]
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(images, code))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels, 0x0C if labels.max() > 255 else 0x08))
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_idx_mnist(tmp_path)


def test_a_gzip_stream_that_expands_past_its_header_stops_there(tmp_path):
    header = struct.pack(">HBBIII", 0, 8, 3, 10, 28, 28)
    with gzip.open(tmp_path / "bomb.gz", "wb") as f:  # 10 images claimed, 256 MB of zeros given (in 250 kB)
        f.write(header)
        for _ in range(16):
            f.write(bytes(1 << 24))
    with pytest.raises(DataError, match="has trailing bytes: the header claims 7856 bytes, the gzip stream has more"):
        read_idx(tmp_path / "bomb.gz")


def test_arrays_and_samplings_larger_than_memory_are_refused_by_their_size(tmp_path, capsys):
    huge = tmp_path / "huge.npy"  # a sparse file whose header matches its size: 1 TB of float32
    with open(huge, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (350_000_000, 784)})
        f.seek(f.tell() + 350_000_000 * 784 * 4 - 1)
        f.write(b"\0")
    assert main(["evaluate", str(huge)]) == 2
    assert "huge.npy: 274,400,000,000 values of float32 (1.1 TB) is more than" in one_error_line(capsys)
    cfg = RunConfig.load(SMOKE, ["sample.num_samples=1000000000", "sample.batch_size=1000000000"])
    with pytest.raises(ValueError, match=r"sample.num_samples: 1,000,000,000 samples \(kept on the host\)"):
        generate(UNet(cfg.model), cfg, Runtime.create("cpu", False))


def test_big_endian_samples_load_in_the_native_order(tmp_path, capsys):
    x = np.random.default_rng(0).uniform(-1, 1, (20, 1, 28, 28)).astype(">f4")
    np.save(tmp_path / "be.npy", x)
    assert main(["evaluate", str(tmp_path / "be.npy"), "--no-references"]) == 0
    assert "copies of training digits" in capsys.readouterr().out


def test_a_data_folder_without_the_held_out_digits_fails_before_training(tmp_path, capsys):
    write_mnist(tmp_path / "data")
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / "data" / name).unlink()
    overrides = [*fast("eval.enabled=true", "eval.samplings=1"), f"data.source={tmp_path / 'data'}"]
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte"):
        run_training(SMOKE, tmp_path / "run", overrides=overrides, progress=False)
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_one_sample_trains_only_without_evaluation_and_samples_any_time(tmp_path):
    with pytest.raises(ConfigError, match="sample.num_samples = 1: the run's evaluation needs at least 2 samples"):
        run_training(SMOKE, tmp_path / "scored", overrides=fast("eval.enabled=true", "sample.num_samples=1"))
    assert not (tmp_path / "scored").exists()  # refused before the training, not after it
    run_training(SMOKE, tmp_path / "run", overrides=fast("sample.num_samples=1", "sample.batch_size=1"), progress=False)
    npy, _ = sample_run(tmp_path / "run", ["sample.num_samples=1"], tmp_path / "one", progress=False)
    assert np.load(npy).shape == (1, 1, 28, 28)


def test_sampling_never_replaces_a_runs_scored_samples(tmp_path, capsys):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=fast(), progress=False)
    before = (run / "samples.npy").read_bytes()
    capsys.readouterr()
    assert main(["sample", str(run), "sample.num_samples=2", "--out", str(run / "samples"), "--overwrite"]) == 2
    assert "the run's own samples.npy" in one_error_line(capsys)
    with pytest.raises(ValueError, match="the run's own samples.npy"):  # the library call too
        sample_run(run, ["sample.num_samples=2"], run / "samples", overwrite=True, progress=False)
    assert (run / "samples.npy").read_bytes() == before


def test_arguments_of_the_wrong_type_are_named():
    with pytest.raises(TypeError, match="pad_to_32 must be True or False, got 'no'"):
        load_mnist(pad_to_32="no")
    with pytest.raises(TypeError, match="time_embedder must be an nn.Module"):
        UNet(RunConfig.load(SMOKE).model, time_embedder="abc")


def test_one_class_scores_entropy_zero_and_equal_sets_a_distance_of_zero():
    rng = np.random.default_rng(0)
    for n in (50, 200, 1000):
        feats = rng.normal(size=(n, 128)) * rng.uniform(0.1, 10, 128)
        assert 0.0 <= frechet_distance(feats, feats) < 1e-6
    digits, labels = load_mnist()
    ones = digits[labels == 1][:20]
    scored = score(RunConfig.load(SMOKE), ones.numpy(), references=False)
    assert math.copysign(1.0, scored["entropy"]) == 1.0 or scored["entropy"] > 0  # never -0.0
