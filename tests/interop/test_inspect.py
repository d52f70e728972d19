"""``timestep-embed inspect`` on tiny local checkpoints: safetensors files and diffusers model folders
(sharded or not) of the tiny random-weight models, and a checkpoint of each registered family's keys."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from timestep_embed.cli import main
from timestep_embed.families import FAMILIES, LAYOUT_BY_CLASS, LAYOUTS, Layout
from timestep_embed.interop.inspect import inspect_checkpoint

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
