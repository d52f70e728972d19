"""Forged files and odd values get the package's named errors (one line in the command line, exit 2), not an
AttributeError, a parser's message or a silent wrong answer: checkpoint metadata of the wrong shape, deep YAML, seeds
torch cannot take, samples of the wrong kind, a torn log line, an export killed between its two files."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from timestep_embed import folders
from timestep_embed.cli import main
from timestep_embed.ddpm import (
    CheckpointError,
    ConfigError,
    RunConfig,
    UNet,
    load_mnist,
    load_model,
    run_config,
    run_training,
    sample_run,
)
from timestep_embed.ddpm.checkpoint import load_checkpoint, read_metadata
from timestep_embed.ddpm.evaluate import prepare_samples
from timestep_embed.ddpm.runlog import drop_log_lines_after

from .test_faults import SMOKE, fast

FAST = fast("train.snapshot_every=0")
TINY_SAMPLING = ["sample.num_samples=2", "sample.batch_size=2", "sample.steps=2"]


def forge(path: Path, metadata) -> Path:
    """A safetensors file of one tensor whose header's ``__metadata__`` is ``metadata``, whatever its shape."""
    from safetensors.torch import save

    data = save({"x": torch.zeros(1)})
    n = struct.unpack("<Q", data[:8])[0]
    header = {**json.loads(data[8 : 8 + n]), "__metadata__": metadata}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n :])
    return path


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def export(folder: Path, **changes) -> Path:
    """A tiny untrained UNet of the smoke config (with ``changes`` to its diffusion section) as an exported folder."""
    cfg = RunConfig.load(SMOKE, [f"diffusion.{k}={v}" for k, v in changes.items()])
    return UNet(cfg.model).save_pretrained(folder, run_config=cfg)


# ---- 3: checkpoint metadata of the wrong shape
@pytest.mark.parametrize(
    "metadata, why",
    [
        ("a string", "__metadata__ must map names to strings"),
        ({"timestep_embed": 5}, "__metadata__ must map names to strings"),
        ({"timestep_embed": json.dumps({"config": [1, 2]})}, "the stored config is a list"),
    ],
)
def test_malformed_checkpoint_metadata_is_a_checkpoint_error_everywhere(tmp_path, capsys, metadata, why):
    file = forge(tmp_path / "checkpoint.safetensors", metadata)
    calls = [lambda: load_model(file), lambda: run_config(tmp_path)]
    if "must map" in why:
        calls += [lambda: read_metadata(file), lambda: load_checkpoint(file)]
    for call in calls:
        with pytest.raises(CheckpointError, match=why):
            call()
    assert main(["sample", str(file)]) == 2 and why in one_line(capsys)
    RunConfig.load(SMOKE).save(tmp_path / "config.yaml")  # a run folder around the forged checkpoint
    assert main(["train", "--resume", "--out-dir", str(tmp_path), "--quiet", *FAST]) == 2
    assert why in one_line(capsys)


# ---- 6: Python's and torch's messages where ours belong
def test_a_deeply_nested_yaml_config_is_a_config_error(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("train: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        RunConfig.load(path)
    assert main(["train", "--config", str(path), "--out-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert "nested too deeply" in one_line(capsys) and not (tmp_path / "run").exists()


def test_paths_that_are_not_paths_are_named():
    with pytest.raises(TypeError, match=r"source must be a path \(str or os.PathLike\), got 123 \(int\)"):
        load_mnist(123)
    with pytest.raises(TypeError, match=r"path must be a path \(str or os.PathLike\), got None"):
        load_checkpoint(None)


@pytest.mark.parametrize("key", ["train.seed", "sample.seed", "eval.classifier.seed"])
@pytest.mark.parametrize("seed", [2**63, 2**64, -1])
def test_a_seed_torch_cannot_take_is_a_config_error(key, seed):
    with pytest.raises(ConfigError, match=rf"{key} = {seed}: expected \[0, 4294967296\)"):
        RunConfig.load(SMOKE, [f"{key}={seed}"])
    unscored = ["eval.enabled=false"] if key == "sample.seed" else []  # scored samplings take seed + 1, ...
    RunConfig.load(SMOKE, [f"{key}={2**32 - 1}", *unscored])


def test_a_regular_file_where_a_folder_belongs_is_named(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("mine")
    with pytest.raises(FileExistsError, match=f"folder '{file}': {file} is a file, not a folder"):
        UNet(RunConfig.load(SMOKE).model).save_pretrained(file)
    assert main(["train", "--config", SMOKE, "--out-dir", str(file), "--quiet", *FAST]) == 2
    assert f"out_dir '{file}': {file} is a file, not a folder" in one_line(capsys)
    assert main(["train", "--config", SMOKE, "--out-dir", str(file / "run"), "--quiet", *FAST]) == 2
    assert "is a file, not a folder" in one_line(capsys) and file.read_text() == "mine"


# ---- 7: what was accepted silently
@pytest.mark.parametrize(
    "samples, why",
    [
        (np.zeros((4, 28, 28), np.complex64), "samples must be int or float numbers"),
        (np.zeros((4, 28, 28), bool), "samples must be int or float numbers"),
        (np.full((4, 28, 28), 1.2, np.float32), r"samples range \[1.2, 1.2\]: expected \[-1, 1\]"),
        (np.full((4, 28, 28), -1.01, np.float32), r"expected \[-1, 1\]"),
    ],
)
def test_samples_of_the_wrong_kind_or_range_are_refused(samples, why):
    with pytest.raises((TypeError, ValueError), match=why):
        prepare_samples(samples)
    assert prepare_samples(np.full((4, 28, 28), 1.0, np.float32)).max() == 1  # the range itself is fine


def test_resume_and_overwrite_together_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="--resume and --overwrite contradict each other"):
        run_training(SMOKE, tmp_path / "run", overrides=FAST, resume=True, overwrite=True, progress=False)
    assert not (tmp_path / "run").exists()


def test_an_out_folder_gets_the_samples_inside_it(tmp_path):
    folder = export(tmp_path / "exp")
    for out in (str(tmp_path / "new") + "/", str(folder)):  # a name ending in /, or a folder that exists
        npy, png = sample_run(folder, TINY_SAMPLING, out, device="cpu", progress=False)
        assert npy.parent == png.parent == Path(out) and npy.name == "samples-ddpm-2-seed0.npy"
    assert not (tmp_path / "new.npy").exists() and not (tmp_path / "exp.npy").exists()


# ---- 8: a torn last line in log.jsonl
def test_a_torn_log_line_is_dropped_with_a_warning_and_the_resume_goes_on(tmp_path, caplog):
    run = tmp_path / "run"
    stopped = run_training(SMOKE, run, overrides=FAST, progress=False, callback=lambda step, *_: step >= 2)
    assert stopped["train_steps"] == 2
    log = run / "log.jsonl"
    whole = log.read_text()
    log.write_text(whole + whole.splitlines()[-1][:20])  # a line cut short, without its newline
    with caplog.at_level(logging.WARNING):
        metrics = run_training(SMOKE, run, overrides=FAST, progress=False, resume=True)
    assert metrics["finished"] and metrics["train_steps"] == 4
    assert "line 3 is not a log record" in caplog.text
    # log_every 5: step 1, then the last line of each part (the steps since the line before)
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 4]
    log.write_text('{"step": 1}\n{"step": 7}\n{"step": 2')  # torn in the middle of a number too
    drop_log_lines_after(log, 5)
    assert log.read_text() == '{"step": 1}\n'


# ---- 9: an export is one unit
def test_an_export_killed_between_its_two_files_is_refused_and_its_temp_files_are_swept(tmp_path, monkeypatch, capsys):
    folder = export(tmp_path / "exp", schedule="cosine")
    write = folders.atomic_write_bytes

    def killed_at_the_weights(path, data, **kw):
        if Path(path).name == folders.PRETRAINED_WEIGHTS:
            raise KeyboardInterrupt  # the kill between the two files
        return write(path, data, **kw)

    monkeypatch.setattr(folders, "atomic_write_bytes", killed_at_the_weights)
    with pytest.raises(KeyboardInterrupt):
        export(folder, schedule="linear")  # another noise schedule over the first export
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="model.safetensors is not the file config.json was saved with"):
        load_model(folder)
    assert main(["sample", str(folder)]) == 2 and "save the folder again" in one_line(capsys)
    for name in (".model.safetensors.k1ll3d.tmp", ".config.json.k1ll3d.tmp"):  # what a kill inside a write leaves
        (folder / name).write_bytes(b"half")
    export(folder, schedule="linear")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert load_model(folder)[1].diffusion.schedule == "linear"
