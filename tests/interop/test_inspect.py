"""``timestep-embed inspect`` on tiny local checkpoints: safetensors files and diffusers model folders
(sharded or not) of the tiny random-weight models, and a checkpoint of each registered family's keys."""

from __future__ import annotations

import difflib
import json
import os

import pytest
import torch
from safetensors.torch import save_file

from timestep_embed.cli import main
from timestep_embed.ddpm import RunConfig, UNet, UNetConfig
from timestep_embed.ddpm.checkpoint import save_training_state
from timestep_embed.families import FAMILIES, LAYOUT_BY_CLASS, LAYOUTS, Layout
from timestep_embed.interop import schedule_precision
from timestep_embed.interop.inspect import inspect_checkpoint
from timestep_embed.nn import SinusoidalEmbedding, TimestepEmbedder

from .conftest import build


def keys_of(layout: Layout) -> dict[str, torch.Tensor]:
    """A tiny checkpoint of a layout's keys: its time path (256 -> 8 -> 8) and one tensor per marker."""
    first, second = (k for k in layout.required_keys()[:2])
    state = {first: torch.randn(8, 256), second: torch.randn(8, 8)}
    state.update({k: torch.randn(8) for k in layout.required_keys()[2:]})  # a Fourier weight
    state.update({m: torch.zeros(1) for m in layout.markers})
    return state


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.layouts])
def test_inspect_names_each_family_on_a_checkpoint_of_its_keys(name, tmp_path):
    """A file of the keys of the family's first detectable layout; a folder whose config.json names the
    class where the keys are another layout's (skyreels_v2, cogview3plus, the twins bria and longcat_image)."""
    layouts = FAMILIES[name].layouts
    by_class = {layout: cls for cls, layout in LAYOUT_BY_CLASS.items()}
    layout = next((x for x in layouts if x.auto and x.name not in by_class), None) or layouts[0]
    path = tmp_path / "model.safetensors"
    save_file(keys_of(layout), path)
    if layout.name in by_class:
        (tmp_path / "config.json").write_text(json.dumps({"_class_name": by_class[layout.name]}))
        path = tmp_path
    found = inspect_checkpoint(path)
    assert found.matched and found.match.layout.family == name and found.contract.name == name
    assert found.match.paths[0].widths == (256, 8, 8) and found.finite and found.dtype == torch.float32


def save(model, path, dtype=torch.float32):
    save_file({k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}, path)


def test_a_bfloat16_flux_file(tmp_path, capsys):
    model, _, _ = build("flux_dev")
    save(model, tmp_path / "flux.safetensors", torch.bfloat16)
    assert main(["inspect", str(tmp_path / "flux.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "layout: flux_dev, family flux_dev, under prefix ''" in out
    assert "timestep (time_text_embed.timestep_embedder: 256 -> 32 -> 32)" in out
    assert "guidance (time_text_embed.guidance_embedder: 256 -> 32 -> 32)" in out
    assert "weights of the main one: bfloat16, finite" in out
    assert "model does:      timestep.to(model dtype) * 1000" in out
    assert "flux_dev in bfloat16 over FlowMatchEulerDiscreteScheduler" in out and "bfloat16 is not safe" in out


def test_sharded_folders_and_the_class_in_config_json(tmp_path, capsys):
    """A sharded SD3 folder; a UNet whose keys say nothing of SD (config.json does); SkyReels-V2's
    folder (Wan's keys, its class picks its float64 layout)."""
    sd3, _, _ = build("sd3")
    sd3.save_pretrained(tmp_path / "sd3", max_shard_size="20KB")
    assert len(list((tmp_path / "sd3").glob("*.safetensors"))) > 1
    assert main(["inspect", str(tmp_path / "sd3"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["layout"], report["contract"]["name"], report["matched"]) == ("sd3", "sd3", True)
    assert report["decided_by"][0] == "config.json: SD3Transformer2DModel" and len(report["files"]) > 1
    assert report["time_paths"][0]["linears"] == ["time_text_embed.timestep_embedder.linear_1",
                                                  "time_text_embed.timestep_embedder.linear_2"]  # fmt: skip
    assert report["precision"]["safe"]
    index = tmp_path / "sd3" / "diffusion_pytorch_model.safetensors.index.json"
    index.rename(tmp_path / "sd3" / "model.safetensors.index.json")  # transformers' name for the index
    assert inspect_checkpoint(tmp_path / "sd3").match.layout.name == "sd3"
    sd3.save_pretrained(tmp_path / "sd3_fp16", max_shard_size="20KB", variant="fp16")  # .index.fp16.json
    assert inspect_checkpoint(tmp_path / "sd3_fp16").match.layout.name == "sd3"
    unet, _, _ = build("stable_diffusion")
    unet.save_pretrained(tmp_path / "unet")
    assert inspect_checkpoint(tmp_path / "unet").match.layout.name == "stable_diffusion"
    save(unet, tmp_path / "unet.safetensors")
    alone = inspect_checkpoint(tmp_path / "unet.safetensors")  # the keys alone: a diffusers UNet, no contract
    assert alone.match.layout.name == "diffusers" and alone.contract is None
    assert "contract: none" in alone.summary()
    sky, _, _ = build("SkyReelsV2Transformer3DModel")
    sky.save_pretrained(tmp_path / "sky")
    assert inspect_checkpoint(tmp_path / "sky").match.layout.name == "skyreels_v2"


def test_a_time_path_saved_alone_names_the_closest_layouts(tmp_path):
    state = {"t_embedder.mlp.0.weight": torch.randn(8, 256), "t_embedder.mlp.2.weight": torch.randn(8, 8)}
    state["t_embedder.mlp.2.bias"] = torch.full((8,), float("nan"))
    save_file(state, tmp_path / "dit.safetensors")
    found = inspect_checkpoint(tmp_path / "dit.safetensors")
    assert not found.matched and found.match.layout.name == "dit" and not found.finite
    assert found.closest == ["sd3_original", "hunyuan_dit_original"]
    assert found.decided_by[0] == "missing its markers: y_embedder.embedding_table.weight"
    text = found.summary()
    assert "closest layout: dit, family dit" in text and "NOT finite" in text and "layout='dit'" in text
    save_file(keys_of(LAYOUTS["bria"]), tmp_path / "bria.safetensors")  # LongCat-Image's keys too
    twins = inspect_checkpoint(tmp_path / "bria.safetensors")
    assert not twins.matched and (twins.match.layout.name, twins.closest) == ("bria", ["longcat_image"])
    assert LAYOUTS["dit"].required_keys() == ["t_embedder.mlp.0.weight", "t_embedder.mlp.2.weight"]


def write_raw(path, header: dict, data: bytes):
    """A safetensors file written by hand: 8-byte length, the JSON header, the data."""
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def dit_entries(**change) -> tuple[dict, bytes]:
    """The header of DiT's time MLP (256 -> 8 -> 8) and a y_embedder, in float32, with ``change`` applied
    to entries (key -> the fields to replace)."""
    shapes = {"t_embedder.mlp.0.weight": [8, 256], "t_embedder.mlp.0.bias": [8], "t_embedder.mlp.2.weight": [8, 8],
              "t_embedder.mlp.2.bias": [8], "y_embedder.embedding_table.weight": [3, 8]}  # fmt: skip
    header, offset = {}, 0
    for key, shape in shapes.items():
        size = 4 * int(torch.tensor(shape).prod())
        header[key] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    for key, fields in change.items():
        header[key.replace("__", ".")].update(fields)
    return header, bytes(offset)


def hostile(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (the path to inspect, a word its one-line error holds)."""
    cases = {
        "offsets that do not fit the shape": dict(t_embedder__mlp__0__weight={"data_offsets": [0, 16]}),
        "an unknown dtype": dict(y_embedder__embedding_table__weight={"dtype": "Q7"}),
        "negative offsets": dict(t_embedder__mlp__0__bias={"data_offsets": [-8, 0]}),
        "offsets as strings": dict(t_embedder__mlp__0__bias={"data_offsets": ["8192", "8224"]}),
    }
    found = {}
    for name, change in cases.items():
        path = tmp_path / (name.replace(" ", "_") + ".safetensors")
        write_raw(path, *dit_entries(**change))
        found[name] = (str(path), "corrupt safetensors file")
    dit = {"t_embedder.mlp.0.weight": torch.randn(8, 256), "t_embedder.mlp.2.weight": torch.randn(8, 5),
           "y_embedder.embedding_table.weight": torch.randn(3, 8)}  # fmt: skip
    save_file(dit, tmp_path / "chain.safetensors")
    found["linears that do not chain"] = (str(tmp_path / "chain.safetensors"), "not one MLP")
    save_file({**dit, "t_embedder.mlp.2.weight": torch.randn(8, 8), "t_embedder.mlp.0.bias": torch.randn(7)},
              tmp_path / "bias.safetensors")  # fmt: skip
    found["a bias that does not fit its weight"] = (str(tmp_path / "bias.safetensors"), "bias (7,) does not fit")
    (tmp_path / "shards").mkdir()
    good = {**dit, "t_embedder.mlp.2.weight": torch.randn(8, 8)}
    save_file(good, tmp_path / "shards" / "a.safetensors")
    save_file({"t_embedder.mlp.0.weight": torch.randn(16, 64)}, tmp_path / "shards" / "b.safetensors")
    found["files and no index"] = (str(tmp_path / "shards"), "2 .safetensors files (a.safetensors, b.safetensors)")
    (tmp_path / "shards_indexed").mkdir()
    for name in ("a", "b"):
        (tmp_path / "shards_indexed" / f"{name}.safetensors").write_bytes(
            (tmp_path / "shards" / f"{name}.safetensors").read_bytes()
        )
    index = {"weight_map": {**{k: "a.safetensors" for k in good}, "t_embedder.mlp.0.bias": "b.safetensors"}}
    (tmp_path / "shards_indexed" / "model.safetensors.index.json").write_text(json.dumps(index))  # transformers' name
    found["a key in two files"] = (str(tmp_path / "shards_indexed"), "in two files")
    (tmp_path / "named").mkdir()
    save_file(good, tmp_path / "named" / "model.safetensors")
    (tmp_path / "named" / "config.json").write_text(json.dumps({"_class_name": ["DiTTransformer2DModel"]}))
    found["a class name that is a list"] = (str(tmp_path / "named"), "_class_name")
    for name, (listed, word) in {
        "an index that puts a key in another shard": ("b", "in a.safetensors"),
        "an index that lists a key no shard holds": ("c", "in no shard"),
    }.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        save_file({k: v for k, v in good.items() if "mlp.2" not in k}, folder / "a.safetensors")
        save_file({k: v for k, v in good.items() if "mlp.2" in k}, folder / "b.safetensors")
        index = {k: "b.safetensors" if "mlp.2" in k else "a.safetensors" for k in good}
        index["t_embedder.mlp.0.weight"] = f"{listed}.safetensors" if listed == "b" else "a.safetensors"
        if listed == "c":
            index["t_embedder.mlp.4.weight"] = "b.safetensors"
        index_file = folder / "diffusion_pytorch_model.safetensors.index.json"
        index_file.write_text(json.dumps({"weight_map": index}))
        found[name] = (str(folder), word)
    os.mkfifo(tmp_path / "fifo")
    found["a FIFO"] = (str(tmp_path / "fifo"), "not a regular file")
    found["an empty path"] = ("", "path")
    return found


@pytest.mark.parametrize("name", ["offsets that do not fit the shape", "an unknown dtype", "negative offsets",
                                  "offsets as strings", "linears that do not chain",
                                  "a bias that does not fit its weight", "a key in two files", "files and no index",
                                  "a class name that is a list", "an index that puts a key in another shard",
                                  "an index that lists a key no shard holds", "a FIFO", "an empty path"])  # fmt: skip
@pytest.mark.parametrize("as_json", [False, True])
def test_a_hostile_checkpoint_is_one_line_and_exit_2(name, as_json, tmp_path, capsys):
    path, word = hostile(tmp_path)[name]
    assert main(["inspect", path, *["--json"] * as_json]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and word in err and "Traceback" not in err, err


def test_a_prefix_the_detection_does_not_try_is_given_with_prefix(tmp_path, capsys):
    model, _, _ = build("dit")
    save_file({"ema." + k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "ema.safetensors")
    assert main(["inspect", str(tmp_path / "ema.safetensors")]) == 2
    assert "inspect --prefix" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "ema.safetensors"), "--prefix", "ema."]) == 0
    assert "family dit_diffusers, under prefix 'ema.'" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "ema.safetensors"), "--prefix", "model."]) == 2
    assert "under the prefixes ['model.']" in capsys.readouterr().err


def test_float8_and_unsigned_weights_report_their_dtype(tmp_path):
    """A float8 Flux checkpoint (a common download): its precision is bfloat16's, the dtype it computes in.
    Unsigned and complex weights are named as they are, not as bytes."""
    state = {k: v.to(torch.float8_e4m3fn) for k, v in keys_of(LAYOUTS["flux_dev_original"]).items()}
    save_file(state, tmp_path / "flux.safetensors")
    found = inspect_checkpoint(tmp_path / "flux.safetensors")
    assert found.dtype == torch.float8_e4m3fn and found.precision.dtype == torch.bfloat16 and found.finite
    with pytest.raises(ValueError, match="float8 model computes in a wider dtype"):
        schedule_precision("flux_dev", torch.float8_e4m3fn)
    for dtype in [torch.complex64, *[getattr(torch, n) for n in ("uint16", "uint32") if hasattr(torch, n)]]:
        save_file({k: v.to(dtype) for k, v in keys_of(LAYOUTS["dit"]).items()}, tmp_path / "odd.safetensors")
        found = inspect_checkpoint(tmp_path / "odd.safetensors")
        assert found.dtype == dtype and found.precision is None


def test_no_time_path_among_many_keys_compares_a_bounded_number(tmp_path, monkeypatch):
    """The "closest keys" hint compares keys that share a name with a layout's, at most 2000 of them."""
    seen = []
    close = difflib.get_close_matches
    monkeypatch.setattr(
        difflib, "get_close_matches", lambda word, keys, **kw: seen.append(len(keys)) or close(word, keys, **kw)
    )
    state = {f"blocks.{i}.attn.weight": torch.zeros(1) for i in range(3000)}
    state.update({f"blocks.{i}.mlp.fc1.weight": torch.zeros(1) for i in range(3000)})
    save_file(state, tmp_path / "big.safetensors")
    with pytest.raises(ValueError, match="no time path"):
        inspect_checkpoint(tmp_path / "big.safetensors")
    assert seen and max(seen) == 2000


def test_the_packages_own_unet_folder_is_read_under_its_time_embedder(tmp_path):
    UNet(UNetConfig(channels=(8, 16), emb_dim=32)).save_pretrained(tmp_path / "u")  # what timestep-embed export writes
    found = inspect_checkpoint(tmp_path / "u")
    assert found.match.prefix == "time_embedder." and found.match.paths[0].widths[-1] == 32
    assert "config.json: timestep_embed's UNet (timestep_embed.ddpm.load_model" in found.summary()


def test_a_training_checkpoint_is_read_under_its_ema_time_embedder(tmp_path):
    """timestep-embed train's checkpoint.safetensors (model, EMA, optimizer): its metadata's run config names it, and
    the EMA's time path is inspected with no --prefix (it needed --prefix ema.time_embedder.)."""
    cfg = RunConfig().with_overrides(
        ["model.channels=[8,16]", "model.emb_dim=32", "model.time_embedding.convention=vaswani"]
    )
    model, ema = UNet(cfg.model), UNet(cfg.model)
    opt = torch.optim.AdamW(model.parameters())
    save_training_state(tmp_path / "checkpoint.safetensors", cfg.to_dict(), model, ema, opt, torch.Generator(), 0, 0.0)
    found = inspect_checkpoint(tmp_path / "checkpoint.safetensors")
    assert found.match.prefix == "ema.time_embedder." and found.match.paths[0].widths[-1] == 32
    assert "metadata: a timestep_embed run checkpoint" in found.summary() and "layout='interleaved'" in found.sinusoid


def test_a_generic_layout_reports_the_time_projection_its_config_describes(tmp_path):
    """Without a family contract, the sinusoid or Fourier features config.json describes: this package's embedder
    and UNet folders, a diffusers UNet's flags; a file alone has no config to say it."""
    from diffusers import UNet2DModel

    TimestepEmbedder(64, sinusoid_dim=32, convention="ddpm").save_pretrained(tmp_path / "emb")
    found = inspect_checkpoint(tmp_path / "emb")
    assert found.contract is None and found.to_dict()["sinusoid"] == repr(
        SinusoidalEmbedding(32, "ddpm", num_timesteps=1000)
    )
    assert (
        "its time projection: from its saved config: SinusoidalEmbedding(dim=32, layout='concat', first='sin'"
        in found.summary()
    )
    model = UNetConfig(channels=(8, 16), emb_dim=32, time_embedding={"convention": "vaswani", "sinusoid_dim": 16})
    UNet(model).save_pretrained(tmp_path / "u")
    assert "layout='interleaved'" in inspect_checkpoint(tmp_path / "u").sinusoid
    tiny = dict(sample_size=8, block_out_channels=(8, 16), down_block_types=("DownBlock2D",) * 2,
                up_block_types=("UpBlock2D",) * 2, layers_per_block=1, norm_num_groups=8)  # fmt: skip
    UNet2DModel(**tiny, time_embedding_type="fourier").save_pretrained(tmp_path / "fourier")
    assert inspect_checkpoint(tmp_path / "fourier").sinusoid.startswith("FourierEmbedding(dim=16, first='sin'")
    UNet2DModel(**tiny, time_embedding_type="learned", num_train_timesteps=1000).save_pretrained(
        tmp_path / "learned"
    )  # an nn.Embedding
    assert (
        "'learned': a table or module of its own, not a sinusoid" in inspect_checkpoint(tmp_path / "learned").sinusoid
    )
    old = {"emb_dim": 32, "sinusoid_dim": 8, "convention": "ddpm"}  # the format before the flat config.json
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({"class": "TimestepEmbedder", "config": old}))
    save_file(
        TimestepEmbedder(32, sinusoid_dim=8, convention="ddpm").state_dict(), tmp_path / "old" / "model.safetensors"
    )
    assert inspect_checkpoint(tmp_path / "old").sinusoid == repr(
        TimestepEmbedder.from_pretrained(tmp_path / "old").time_proj
    )
    save_file({k: v.contiguous() for k, v in UNet2DModel(**tiny).state_dict().items()}, tmp_path / "alone.safetensors")
    assert "a file alone, no config.json to say it" in inspect_checkpoint(tmp_path / "alone.safetensors").summary()


def test_a_hostile_run_checkpoint_metadata_is_one_line_or_a_report_without_allocation(tmp_path, capsys):
    """timestep_embed metadata nested past Python's recursion limit is refused in one line (a RecursionError
    traceback before); a run config claiming emb_dim 200000 is described on the meta device (40 GB before)."""
    state = {"ema.time_embedder.time_embedding.linear_1.weight": torch.zeros(8, 4),
             "ema.time_embedder.time_embedding.linear_2.weight": torch.zeros(8, 8)}  # fmt: skip
    save_file(state, tmp_path / "deep.safetensors", metadata={"timestep_embed": "[" * 200000 + "]" * 200000})
    assert main(["inspect", str(tmp_path / "deep.safetensors")]) == 2
    assert "metadata is not a run config" in capsys.readouterr().err
    huge = json.dumps({"config": {"model": {"emb_dim": 200000, "time_embedding": {"sinusoid_dim": 4}}}})
    save_file(state, tmp_path / "huge.safetensors", metadata={"timestep_embed": huge})
    assert inspect_checkpoint(tmp_path / "huge.safetensors").sinusoid.startswith("SinusoidalEmbedding(dim=4,")
