"""Real checkpoints' time paths: key layouts, prefixes, widths read from the tensors, strict loading,
save_pretrained / from_pretrained. The state dicts carry the exact key names and shapes of the
codebases (random values: nothing is downloaded)."""

from __future__ import annotations

import json

import pytest
import torch

from timestep_embed import FourierEmbedding, TimestepEmbedder, TimestepMLP, sinusoidal_embedding
from timestep_embed.nn import KEY_LAYOUTS, embedder_state_dict, load_state_dict_checked, to_layout


def linear(out_features: int, in_features: int, name: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(in_features * 7 + out_features)
    return {f"{name}.weight": torch.randn(out_features, in_features, generator=g) * 0.02,
            f"{name}.bias": torch.randn(out_features, generator=g) * 0.02}  # fmt: skip


# The two Linear layers of each codebase's time MLP, spelled as in its source (not from our mapping).
LINEARS = {
    "adm": ("time_embed.0", "time_embed.2"),  # guided-diffusion unet.py, ldm openaimodel.py: nn.Sequential
    "diffusers": ("time_embedding.linear_1", "time_embedding.linear_2"),  # diffusers TimestepEmbedding
    "dit": ("t_embedder.mlp.0", "t_embedder.mlp.2"),  # DiT models.py TimestepEmbedder.mlp
    "edm": ("map_layer0", "map_layer1"),  # EDM networks.py DhariwalUNet
}


def checkpoint(layout: str, prefix: str, sinusoid: int, emb: int) -> dict[str, torch.Tensor]:
    first, second = (prefix + name for name in LINEARS[layout])
    state = {**linear(emb, sinusoid, first), **linear(emb, emb, second)}
    state[prefix + "input_blocks.0.0.weight"] = torch.zeros(8, 4, 3, 3)  # the rest of the model is ignored
    state[prefix + "out.2.bias"] = torch.zeros(4)
    return state


REAL = {
    # original Stable Diffusion 1.x / 2.x (CompVis ldm): model.diffusion_model.time_embed.{0,2}, 320 -> 1280
    "stable diffusion, CompVis layout": ("adm", "model.diffusion_model.", 320, 1280, "adm"),
    # the diffusers UNet2DConditionModel of the same model, as a pipeline's `unet.` dump
    "stable diffusion, diffusers layout": ("diffusers", "unet.", 320, 1280, "adm"),
    # guided-diffusion 256x256 unconditional (model_channels 256): time_embed.{0,2}, 256 -> 1024
    "guided-diffusion": ("adm", "", 256, 1024, "adm"),
    # DiT-XL/2: t_embedder.mlp.{0,2}, frequency_embedding_size 256 -> hidden 1152
    "DiT-XL/2": ("dit", "", 256, 1152, "adm"),
    # EDM DhariwalUNet (ImageNet-64, model_channels 192) inside EDMPrecond: model.map_layer{0,1}, 192 -> 768
    "EDM": ("edm", "model.", 192, 768, "edm"),
}


@pytest.mark.parametrize("name", REAL)
def test_from_state_dict_reads_real_layouts(name, caplog):
    layout, prefix, sinusoid, emb, convention = REAL[name]
    state = checkpoint(layout, prefix, sinusoid, emb)
    extra = {"convention": "adm"} if layout == "diffusers" else {}
    with caplog.at_level("INFO", logger="timestep_embed"):
        embedder = TimestepEmbedder.from_state_dict(state, **extra)
    assert f"prefix {prefix!r} ({layout} layout): {sinusoid} -> {emb} -> {emb}" in caplog.text
    assert embedder.time_embedding.linear_1.in_features == sinusoid and embedder.emb_dim == emb
    assert embedder.time_proj.convention.first == "cos" and embedder.time_proj.dim == sinusoid
    t = torch.tensor([0, 10, 999])
    w1, w2, b1, b2 = (state[f"{prefix}{name}.{p}"] for p in ("weight", "bias") for name in LINEARS[layout])
    hidden = torch.nn.functional.silu(sinusoidal_embedding(t, sinusoid, convention) @ w1.T + b1) @ w2.T + b2
    expected = torch.nn.functional.silu(hidden) if layout == "edm" else hidden  # EDM: silu after map_layer1
    torch.testing.assert_close(embedder(t), expected, rtol=0, atol=1e-6)


def test_from_state_dict_says_what_it_needs():
    with pytest.raises(ValueError, match="does not say which sinusoid.*pass convention="):
        TimestepEmbedder.from_state_dict(checkpoint("diffusers", "", 32, 128))
    with pytest.raises(ValueError, match=r"found \[\('adm', 'net\.'\)\].*pass prefix="):
        TimestepEmbedder.from_state_dict(checkpoint("adm", "net.", 32, 128))
    assert TimestepEmbedder.from_state_dict(checkpoint("adm", "net.", 32, 128), prefix="net.").emb_dim == 128
    with pytest.raises(ValueError, match="no time MLP in this state dict"):
        TimestepEmbedder.from_state_dict({"foo.weight": torch.zeros(1)})
    both = {**checkpoint("adm", "", 32, 128), **checkpoint("dit", "", 32, 128)}
    with pytest.raises(ValueError, match="several time MLPs fit"):
        TimestepEmbedder.from_state_dict(both)


def test_layouts_round_trip_and_the_rest_of_a_model_is_ignored():
    ours = TimestepEmbedder(32, sinusoid_dim=8)
    for layout in KEY_LAYOUTS:
        foreign = to_layout(ours.state_dict(), layout, prefix="model.")
        foreign["model.input_blocks.0.weight"] = torch.zeros(1)
        loaded = TimestepEmbedder(32, sinusoid_dim=8)
        loaded.load_state_dict(embedder_state_dict(foreign), strict=True)
        assert torch.equal(loaded(torch.tensor([5])), ours(torch.tensor([5])))


def test_mismatched_state_dict_error_names_keys_and_layout():
    mlp = TimestepMLP(4, 8)
    bad = {"linear_1.weight": torch.zeros(8, 4), "linear_2.weight": torch.zeros(8, 9), "extra.bias": torch.zeros(1)}
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(mlp, bad, "test")
    for part in ("linear_1.bias", "linear_2.bias", "extra.bias", "expected [8, 8], got [8, 9]", "Expected layout"):
        assert part in str(info.value)


@pytest.mark.parametrize(
    "embedder",
    [
        TimestepEmbedder(64, convention="vaswani", time_input="times_T", post_act="silu"),
        TimestepEmbedder(64, cond_dim=6, precise=True),
        TimestepEmbedder(64, time_proj=FourierEmbedding.edm(24, learnable=True), time_input="quarter_log"),
    ],
    ids=["sinusoid", "conditioned", "fourier"],
)
def test_save_pretrained_round_trip(embedder, tmp_path):
    embedder.save_pretrained(tmp_path / "e")
    document = json.loads((tmp_path / "e" / "config.json").read_text())
    assert document["class"] == "TimestepEmbedder" and set(document["versions"]) == {"timestep_embed", "torch"}
    loaded = TimestepEmbedder.from_pretrained(tmp_path / "e")
    t = torch.tensor([0.25, 0.5, 2.0])
    cond = torch.randn(3, 6) if embedder.time_embedding.cond_proj is not None else None
    assert torch.equal(loaded(t, cond), embedder(t, cond))
    assert loaded.config() == embedder.config()


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a pretrained folder.*config.json"):
        TimestepEmbedder.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"class": "UNet", "config": {}}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="holds a UNet, not a TimestepEmbedder"):
        TimestepEmbedder.from_pretrained(tmp_path)


def test_scalar_timesteps_broadcast_to_the_batch():
    embedder = TimestepEmbedder(32, cond_dim=4)
    batch = embedder(torch.tensor([500, 500, 500]))
    for scalar in (500, torch.tensor(500), 500.0):
        assert torch.equal(embedder(scalar, batch_size=3), batch)
    cond = torch.zeros(3, 4)
    assert embedder(torch.tensor(7), cond).shape == (3, 32)
    assert embedder(7).shape == (32,)  # no batch given: the embedding of one step
