"""A sweep of the mistakes a user makes at the command line: each ends with exit code 2, a message on
stderr that names what is wrong, and no traceback; and nothing already in the run folder changes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from timestep_embed.cli import main
from timestep_embed.ddpm.train import run_training


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "run"
    run_training("smoke", folder, progress=False)
    return folder


def digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def files(tmp_path):
    """Bad input files: a text file named .npy, a wrong-shaped array, an empty dump, one row at t = 0."""
    (tmp_path / "text.npy").write_text("not an array")
    np.save(tmp_path / "shape.npy", np.zeros((3, 5), np.float32))
    np.save(tmp_path / "empty.npy", np.zeros((0, 8), np.float32))
    np.save(tmp_path / "one.npy", np.zeros((1, 8), np.float32))
    np.save(tmp_path / "emb.npy", np.zeros((10, 8), np.float32))
    (tmp_path / "twice.yaml").write_text("train:\n  steps: 3\ntrain:\n  seed: 3\n")
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "config.json").write_text("{}")
    save_file({"foo.weight": torch.zeros(2)}, tmp_path / "foo.safetensors")


CASES = {  # name -> (argv with RUN / TMP placeholders, a word the message must contain)
    "steps zero": (["train", "train.steps=0"], "train.steps"),
    "steps negative": (["train", "train.steps=-5"], "train.steps"),
    "batch zero": (["train", "train.batch_size=0"], "train.batch_size"),
    "log_every zero": (["train", "train.log_every=0"], "train.log_every"),
    "negative lr": (["train", "train.lr=-1"], "train.lr"),
    "nan minutes": (["train", "train.minutes=.nan"], "train.minutes"),
    "no samples": (["train", "sample.num_samples=0"], "sample.num_samples"),
    "too many sampling steps": (["train", "sample.steps=5000"], "sample.steps"),
    "dpm++2m on every step": (["train", "sample.sampler=dpm++2m", "sample.steps=1000"], "at most 999"),
    "ddim eta above 1": (["train", "sample.sampler=ddim", "sample.eta=1.5"], "sample.eta"),
    "seeds past 2^32": (["train", "sample.seed=4294967295"], "past the largest seed"),
    "consistency levels upside down": (["train", "sample.sampler=consistency", "sample.last_sigma=90"], "last_sigma"),
    "karras levels below the schedule": (
        [
            "train",
            "--config",
            "smoke",
            "sample.sampler=heun",
            "sample.spacing=karras",
            "sample.sigma_max=0.001",
            "--out-dir",
            "TMP/karras",
        ],
        "sample.sigma_max",
    ),
    "unknown key": (["train", "train.stepz=3"], "train.stepz"),
    "override without a dot": (["train", "steps=3"], "steps"),
    "unknown config name": (["train", "--config", "nosuch"], "nosuch"),
    "missing config file": (["train", "--config", "TMP/missing.yaml"], "missing.yaml"),
    "key written twice": (["train", "--config", "TMP/twice.yaml"], "twice"),
    "flow without euler": (["train", "diffusion.prediction=flow", "diffusion.min_snr_gamma=null"], "euler"),
    "euler without flow": (["train", "sample.sampler=euler"], "euler"),
    "missing data folder": (["train", "--config", "smoke", "data.source=TMP/nodata"], "nodata"),
    "zero threads": (["train", "train.threads=0"], "train.threads"),
    "no levels": (["train", "model.channels=[]"], "model.channels"),
    "bad unshuffle": (["train", "model.unshuffle=3"], "model.unshuffle"),
    "folder holds a run": (["train", "--config", "smoke", "--out-dir", "RUN"], "RUN"),
    "resume nothing": (["train", "--resume", "--out-dir", "TMP/emptydir"], "emptydir"),
    "sample missing run": (["sample", "TMP/norun"], "norun: no such run folder"),
    "sample zero steps": (["sample", "RUN", "sample.steps=0"], "sample.steps"),
    "sample bad sampler": (["sample", "RUN", "sample.sampler=bogus"], "bogus"),
    "sample euler on an eps model": (["sample", "RUN", "sample.sampler=euler"], "euler"),
    "sample over the scored samples": (["sample", "RUN", "--out", "RUN/samples"], "samples"),
    "sample on a missing device": (["sample", "RUN", "--device", "cuda:7"], "cuda"),
    "evaluate missing file": (["evaluate", "TMP/missing.npy"], "missing.npy"),
    "evaluate a text file": (["evaluate", "TMP/text.npy"], "text.npy"),
    "evaluate wrong shape": (["evaluate", "TMP/shape.npy"], "shape"),
    "evaluate zero epochs": (["evaluate", "TMP/shape.npy", "--classifier-epochs", "0"], "--classifier-epochs"),
    "detect missing file": (["detect", "TMP/missing.npy", "--timesteps", "0:10"], "missing.npy"),
    "detect zero step": (["detect", "TMP/emb.npy", "--timesteps", "0:10:0"], "--timesteps"),
    "detect bad range": (["detect", "TMP/emb.npy", "--timesteps", "abc"], "--timesteps"),
    "detect negative tol": (["detect", "TMP/emb.npy", "--timesteps", "0:10", "--tol", "-1"], "tol"),
    "detect a text file": (["detect", "TMP/text.npy", "--timesteps", "0:10"], "text.npy"),
    "detect an empty dump": (["detect", "TMP/empty.npy", "--timesteps", "0:0"], "not enough data"),
    "detect one row at zero": (["detect", "TMP/one.npy", "--timesteps", "0:1"], "not enough data"),
    "figures missing checkpoint": (["figures", "--out", "TMP/fig", "--checkpoint", "TMP/nockpt"], "nockpt: no such"),
    "figures zero dim": (["figures", "--out", "TMP/fig", "--dim", "0"], "--dim"),
    "figures time_mlp without a run": (["figures", "--out", "TMP/fig", "--only", "time_mlp"], "--checkpoint"),
    "figures bad convention": (["figures", "--out", "TMP/fig", "--convention", "bogus"], "bogus"),
    "export missing run": (["export", "TMP/norun", "--out", "TMP/exported"], "norun: no such run folder"),
    "export over a folder": (["export", "RUN", "--out", "TMP/taken"], "--overwrite"),
    "compare zero width": (["compare", "--dims", "0", "--out", "TMP/cmp"], "--dims"),
    "compare zero timesteps": (["compare", "-n", "0", "--out", "TMP/cmp"], "-n"),
    "compare bad preset": (["compare", "--presets", "bogus", "--out", "TMP/cmp"], "bogus"),
    "inspect missing file": (["inspect", "TMP/none.safetensors"], "none.safetensors"),
    "inspect a text file": (["inspect", "TMP/text.npy"], "text.npy"),
    "inspect a folder without weights": (["inspect", "TMP/emptydir"], "emptydir"),
    "inspect no time path": (["inspect", "TMP/foo.safetensors"], "no time path"),
    "no subcommand": ([], "usage"),
    "unknown subcommand": (["trian"], "trian"),
    "unknown option": (["train", "--steps", "3"], "--steps"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_user_mistake_is_exit_2_a_message_and_no_traceback(name, run, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TIMESTEP_EMBED_CACHE", str(tmp_path / "cache"))
    files(tmp_path)
    argv, word = CASES[name]
    argv = [a.replace("RUN", str(run)).replace("TMP", str(tmp_path)) for a in argv]
    word = word.replace("RUN", run.name)
    before = digest(run)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and word in err, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "usage:" not in err or name == "no subcommand", err  # argparse's own: one line
    assert digest(run) == before  # nothing the run already holds changed


def test_version_and_help_exit_0(capsys):
    for argv in (["--version"], ["train", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert "train.steps" in capsys.readouterr().out
