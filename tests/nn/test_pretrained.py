"""Pretrained folders: a flat config.json of the constructor's arguments and model.safetensors, both ways;
the folders of earlier versions; limits on what a config file may be; named errors for bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from timestep_embed import Convention, FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder
from timestep_embed.ddpm.config import UNetConfig
from timestep_embed.ddpm.unet import UNet
from timestep_embed.folders import load_pretrained
from timestep_embed.nn import InModelDtype, TimestepMLP
from timestep_embed.weights import MAX_JSON_BYTES, CheckpointError, locate_keys, read_json

T = torch.tensor([0.25, 0.5, 2.0])


def flux_like():
    proj = InModelDtype(SinusoidalEmbedding(16, "adm", scale=1000.0, scale_in_input_dtype=True))
    return TimestepEmbedder(32, time_proj=proj)


def narrow_mlp():
    embedder = TimestepEmbedder(32, sinusoid_dim=8)
    embedder.time_embedding = TimestepMLP(8, 48, out_dim=32, bias=False)
    return embedder


EMBEDDERS = {
    "sinusoid": lambda: TimestepEmbedder(64, convention="vaswani", time_input="times_T", post_act="silu"),
    "conditioned": lambda: TimestepEmbedder(64, cond_dim=6, precise=True),
    "fourier": lambda: TimestepEmbedder(
        64, time_proj=FourierEmbedding.edm(24, learnable=True), time_input="quarter_log"
    ),
    "custom convention": lambda: TimestepEmbedder(32, convention=Convention("concat", "cos", 0.5, 500.0)),
    "flux": flux_like,
    "another MLP": narrow_mlp,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(EMBEDDERS))
def test_save_pretrained_round_trip(name, dtype, tmp_path):
    embedder = EMBEDDERS[name]().to(dtype)
    embedder.save_pretrained(tmp_path / "e")
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert config["_class_name"] == "TimestepEmbedder" and config["emb_dim"] == embedder.emb_dim  # flat
    assert set(config["_timestep_embed"]) == {"timestep_embed", "torch"}
    loaded = TimestepEmbedder.from_pretrained(tmp_path / "e")  # in the dtype it was saved in
    cond = torch.randn(3, 6) if embedder.time_embedding.cond_proj is not None else None
    with torch.no_grad():
        assert loaded(T, cond).dtype == dtype and torch.equal(loaded(T, cond), embedder(T, cond))
    assert loaded.config() == embedder.config()


def test_fourier_features_keep_their_stored_dtype_beside_a_bfloat16_mlp(tmp_path):
    torch.manual_seed(0)
    embedder = TimestepEmbedder(64, time_proj=FourierEmbedding(16, log=True))
    embedder.time_embedding.bfloat16()  # the MLP in bfloat16, the Fourier weights in float32
    embedder.save_pretrained(tmp_path / "e")
    loaded = TimestepEmbedder.from_pretrained(tmp_path / "e")
    assert loaded.time_proj.weight.dtype == torch.float32
    assert loaded.time_embedding.linear_1.weight.dtype == torch.bfloat16
    sigma = torch.tensor([0.002, 1.0, 80.0])
    with torch.no_grad():
        assert torch.equal(loaded(sigma), embedder(sigma))


def test_the_hub_mixin_reads_the_folder(tmp_path):
    """huggingface_hub.PyTorchModelHubMixin rebuilds an embedder with the default sinusoid and MLP
    from the same folder: config.json holds the constructor's arguments."""
    hub = pytest.importorskip("huggingface_hub")

    class HubEmbedder(hub.PyTorchModelHubMixin, TimestepEmbedder):  # the mixin's from_pretrained
        pass

    torch.manual_seed(0)
    embedder = TimestepEmbedder(64, convention="ddpm", num_timesteps=500)
    embedder.save_pretrained(tmp_path / "e")
    loaded = HubEmbedder.from_pretrained(tmp_path / "e")
    with torch.no_grad():
        assert torch.equal(loaded(torch.tensor([0, 10, 499])), embedder(torch.tensor([0, 10, 499])))
    assert loaded.time_proj.convention == embedder.time_proj.convention


def test_folders_of_earlier_versions_still_load(tmp_path):
    """Before the flat config.json: {"class": ..., "config": {...}, "versions": ...}."""
    from safetensors.torch import save_file

    embedder = TimestepEmbedder(32, sinusoid_dim=8, convention="ddpm")
    old = {"emb_dim": 32, "sinusoid_dim": 8, "time_input": "identity", "num_timesteps": 1000, "act": "silu",
           "post_act": None, "cond_dim": None, "convention": {"layout": "concat", "first": "sin", "freq_shift": 1.0,
           "max_period": 10000.0, "scale": 1.0, "gain": 1.0}, "precise": False,
           "sinusoid": {"dim": 8, "pad_odd": True, "scale_in_input_dtype": False, "num_timesteps": 1000}}  # fmt: skip
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text(json.dumps({"class": "TimestepEmbedder", "config": old}))
    save_file(embedder.state_dict(), str(tmp_path / "e" / "model.safetensors"))
    loaded = TimestepEmbedder.from_pretrained(tmp_path / "e")
    assert torch.equal(loaded(torch.tensor([3, 700])), embedder(torch.tensor([3, 700])))


def test_the_unet_folder_keeps_its_run_config(tmp_path):
    unet = UNet(UNetConfig(image_size=8, channels=(8, 16), emb_dim=16)).eval()
    unet.save_pretrained(tmp_path / "u", run_config=None)
    config, _ = load_pretrained(tmp_path / "u", "UNet")
    assert config["channels"] == [8, 16] and config["run"] is None  # flat, as the mixin reads it
    loaded = UNet.from_pretrained(tmp_path / "u", torch_dtype=torch.float64)
    x, t = torch.randn(2, 1, 8, 8, dtype=torch.float64), torch.tensor([3, 500])
    with torch.no_grad():
        assert torch.allclose(loaded(x, t), unet.double()(x, t))
    with pytest.raises(ValueError, match="holds a UNet, not a TimestepEmbedder"):
        TimestepEmbedder.from_pretrained(tmp_path / "u")


def test_config_files_are_checked_before_they_are_parsed(tmp_path):
    (tmp_path / "big.json").write_bytes(b'{"a": "' + b"x" * MAX_JSON_BYTES + b'"}')
    with pytest.raises(ValueError, match="bytes; a config file is refused above"):
        read_json(tmp_path / "big.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested 100000 levels deep; a config file is refused above 32"):
        read_json(tmp_path / "deep.json")
    (tmp_path / "brace.json").write_text('{"key": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert read_json(tmp_path / "brace.json")["key"].startswith("[[")  # brackets inside strings do not nest
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        read_json(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_json(tmp_path / "bad.json")


def test_an_edited_config_gets_a_named_error(tmp_path):
    TimestepEmbedder(32).save_pretrained(tmp_path / "e")
    path = tmp_path / "e" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "emb_dim": "wide"}))
    with pytest.raises(ValueError, match="config.json does not build a TimestepEmbedder: emb_dim must be an int"):
        TimestepEmbedder.from_pretrained(tmp_path / "e")
    path.write_text(json.dumps({**config, "emb_dim": 16}))
    with pytest.raises(ValueError, match="state dict does not fit.*shape mismatches"):
        TimestepEmbedder.from_pretrained(tmp_path / "e")
    path.write_text(json.dumps(config)[:-1] + ', "emb_dim": 16}')  # a key given twice: refused, not the last kept
    with pytest.raises(ValueError, match="config.json: the key 'emb_dim' is given twice in one object"):
        TimestepEmbedder.from_pretrained(tmp_path / "e")


def test_bad_arguments_are_named(tmp_path):
    TimestepEmbedder(32).save_pretrained(tmp_path / "e")
    with pytest.raises(ValueError, match="torch_dtype must be a floating torch dtype.*got 'int8'"):
        TimestepEmbedder.from_pretrained(tmp_path / "e", torch_dtype="int8")
    with pytest.raises(ValueError, match="device must be a torch device.*got 'gpu7'"):
        TimestepEmbedder.from_pretrained(tmp_path / "e", device="gpu7")
    with pytest.raises(ValueError, match="subfolder must be a relative folder name"):
        TimestepEmbedder.from_pretrained(tmp_path, subfolder="../e")
    with pytest.raises(FileNotFoundError, match="no subfolder 'unet'"):
        TimestepEmbedder.from_pretrained(tmp_path, subfolder="unet")
    with pytest.raises(FileNotFoundError, match="neither a folder nor a Hub repository id"):
        TimestepEmbedder.from_pretrained(tmp_path / "missing" / "deeper")
    with pytest.raises(TypeError, match="name_or_path must be a folder or a Hub repository id"):
        TimestepEmbedder.from_pretrained(42)
    loaded = TimestepEmbedder.from_pretrained(tmp_path / "e", torch_dtype="bfloat16", device="cpu")
    assert loaded.time_embedding.linear_1.weight.dtype == torch.bfloat16


def test_a_hub_id_is_resolved_through_huggingface_hub(monkeypatch, tmp_path):
    """A name that is not a folder goes to huggingface_hub.snapshot_download (offline here: named error)."""
    hub = pytest.importorskip("huggingface_hub")
    TimestepEmbedder(32).save_pretrained(tmp_path / "snapshot" / "sub")
    calls = []

    def fake_download(repo_id, revision=None, allow_patterns=None):
        calls.append((repo_id, revision, allow_patterns))
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(hub, "snapshot_download", fake_download)
    loaded = TimestepEmbedder.from_pretrained("someone/time-path", subfolder="sub", revision="v1")
    assert loaded.emb_dim == 32 and calls == [("someone/time-path", "v1", ["sub/*.json", "sub/*.safetensors"])]

    def offline(*args, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr(hub, "snapshot_download", offline)
    with pytest.raises(FileNotFoundError, match="'someone/time-path': not a local folder, and the Hub download failed"):
        TimestepEmbedder.from_pretrained("someone/time-path")


def test_push_to_hub_uploads_the_folder(monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    seen = {}

    class FakeApi:
        def __init__(self, token=None):
            seen["token"] = token

        def create_repo(self, repo_id, private=None, exist_ok=False):
            seen["repo"] = (repo_id, private, exist_ok)

        def upload_folder(self, repo_id, folder_path, commit_message):
            from pathlib import Path

            seen["files"] = sorted(p.name for p in Path(folder_path).iterdir())
            return "https://huggingface.co/someone/time-path/commit/abc"

    monkeypatch.setattr(hub, "HfApi", FakeApi)
    url = TimestepEmbedder(32).push_to_hub("someone/time-path", private=True, token="t")
    assert url.endswith("/commit/abc") and seen["files"] == ["config.json", "model.safetensors"]
    assert seen["repo"] == ("someone/time-path", True, True) and seen["token"] == "t"
    with pytest.raises(ValueError, match="repo_id must be 'owner/name'"):
        TimestepEmbedder(32).push_to_hub("no-owner")


def test_importing_the_package_does_not_import_huggingface_hub():
    code = "import sys, timestep_embed, timestep_embed.nn; print('huggingface_hub' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def write_shards(folder, shards: dict, index: dict) -> None:
    from safetensors.torch import save_file

    folder.mkdir()
    for name, tensors in shards.items():
        save_file(tensors, str(folder / name))
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    (folder / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel", "_diffusers_version": "0.30"}))


def test_shards_are_read_by_their_index_and_each_key_is_in_one_file(tmp_path):
    """The loader and `inspect` share one check: a key in two shards is refused (the last read would win), and
    the shards must hold exactly the keys the index lists, each in the file it names."""
    w, b = "time_embedding.linear_1.weight", "time_embedding.linear_1.bias"
    a_file, b_file = {w: torch.zeros(2, 2)}, {b: torch.ones(2)}
    write_shards(tmp_path / "good", {"a.safetensors": a_file, "b.safetensors": b_file},
                 {w: "a.safetensors", b: "b.safetensors"})  # fmt: skip
    assert sorted(load_pretrained(tmp_path / "good")[1]) == [b, w]
    write_shards(tmp_path / "twice", {"a.safetensors": a_file, "b.safetensors": {w: torch.ones(2, 2)}},
                 {w: "a.safetensors", "x": "b.safetensors"})  # fmt: skip
    with pytest.raises(CheckpointError, match=rf"'{w}' is in two files, .*a.safetensors and .*b.safetensors"):
        load_pretrained(tmp_path / "twice")
    write_shards(tmp_path / "moved", {"a.safetensors": a_file, "b.safetensors": b_file},
                 {w: "b.safetensors", b: "a.safetensors"})  # fmt: skip
    with pytest.raises(CheckpointError, match=rf"index.json and its shards disagree on 2 key\(s\), e.g. '{w}': "
                       "the index has it in b.safetensors, it is in a.safetensors"):  # fmt: skip
        load_pretrained(tmp_path / "moved")
    write_shards(tmp_path / "unlisted", {"a.safetensors": {**a_file, "extra": torch.ones(1)}, "b.safetensors": b_file},
                 {w: "a.safetensors", b: "b.safetensors"})  # fmt: skip
    with pytest.raises(CheckpointError, match="e.g. 'extra': the index has it not listed, it is in a.safetensors"):
        load_pretrained(tmp_path / "unlisted")
    write_shards(tmp_path / "dotdot", {"a.safetensors": a_file}, {w: "../a.safetensors"})
    with pytest.raises(ValueError, match=r"the shard '../a.safetensors' of '.*' is not a file name in this folder"):
        load_pretrained(tmp_path / "dotdot")
    with pytest.raises(CheckpointError, match="^the shard index and its shards disagree"):  # no index file named
        locate_keys({tmp_path / "a.safetensors": [w]}, index={w: "b.safetensors"})


def test_a_legacy_config_whose_model_is_not_an_object_is_named(tmp_path):
    from safetensors.torch import save_file

    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text(json.dumps({"class": "UNet", "config": {"model": [1, 2]}}))
    save_file({"w": torch.zeros(1)}, str(tmp_path / "e" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"config.json: config.model must be an object of the model's fields .* got "
                       r"list \[1, 2\]"):  # fmt: skip
        load_pretrained(tmp_path / "e")
