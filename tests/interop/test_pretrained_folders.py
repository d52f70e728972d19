"""TimestepEmbedder.from_pretrained on diffusers model folders (written by diffusers' own save_pretrained):
the config says what the weights do not (a UNet's sinusoid flags, activation, Fourier features; the class
where two share their keys); subfolder=, torch_dtype=, sharded checkpoints."""

from __future__ import annotations

import pytest
import torch

from timestep_embed import TimestepEmbedder
from timestep_embed.nn import to_layout

from ..fixtures.tiny import BY_CLASS, TINY
from .conftest import build, run
from .test_layouts import module_output

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.filterwarnings("ignore")

# tiny model -> (the module of its main time MLP, timesteps as its pipeline feeds them)
FOLDERS = {
    "stable_diffusion": "time_embedding",
    "ddpm": "time_embedding",  # flip_sin_to_cos=False, freq_shift=1 in its config
    "unet2d_fourier": "time_embedding",  # GaussianFourierProjection(log=True, [sin | cos])
    "unet1d": "time_mlp",  # act_fn="mish" in its config
    "sdxl": "time_embedding",
    "flux_dev": "time_text_embed.timestep_embedder",
    "wan": "condition_embedder.time_embedder",
}


@pytest.mark.parametrize("name", list(FOLDERS))
def test_a_diffusers_folder_loads_through_subfolder(name, tmp_path):
    model, inputs, t = build(name)
    model.save_pretrained(tmp_path / "pipeline" / "part")
    embedder = TimestepEmbedder.from_pretrained(tmp_path / "pipeline", subfolder="part")
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, FOLDERS[name]))


def test_torch_dtype_and_the_other_mlps(tmp_path):
    model, inputs, t = build("flux_dev")
    model.save_pretrained(tmp_path / "flux")
    guidance = TimestepEmbedder.from_pretrained(tmp_path / "flux", which="guidance")
    assert torch.equal(guidance.time_embedding.linear_1.weight, model.time_text_embed.guidance_embedder.linear_1.weight)
    embedder = TimestepEmbedder.from_pretrained(tmp_path / "flux", torch_dtype=torch.bfloat16)
    model = model.to(torch.bfloat16)
    inputs = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in inputs.items()}
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, "time_text_embed.timestep_embedder"))


def test_a_class_that_shares_its_keys_is_told_by_its_config(tmp_path):
    """SkyReels-V2's weights are Wan's; its sinusoid is float64 (the config's _class_name says so)."""
    model, inputs, t = build(BY_CLASS["SkyReelsV2Transformer3DModel"])
    model.save_pretrained(tmp_path / "sky")
    embedder = TimestepEmbedder.from_pretrained(tmp_path / "sky")
    assert embedder.time_proj.precise
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, "condition_embedder.time_embedder"))
    loose = TimestepEmbedder.from_state_dict(model.state_dict())  # the weights alone: Wan's float32 sinusoid
    assert not loose.time_proj.precise


def test_a_sharded_checkpoint_loads(tmp_path):
    model, inputs, t = build("sd3")
    model.save_pretrained(tmp_path / "sd3", max_shard_size="20KB")
    assert list((tmp_path / "sd3").glob("*.index.json"))
    embedder = TimestepEmbedder.from_pretrained(tmp_path / "sd3")
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, "time_text_embed.timestep_embedder"))
    run(model, inputs, t)


def test_an_lcm_unet_keeps_its_condition_projection_in_every_loader(tmp_path):
    """LCM's UNets (time_cond_proj_dim) add a projected guidance embedding before the time MLP: cond_proj."""
    spec = TINY["stable_diffusion"]
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(**spec.config, time_cond_proj_dim=5).eval()
    unet.save_pretrained(tmp_path / "lcm")
    t, w = torch.tensor([10, 999]), torch.randn(2, 5)
    with torch.no_grad():
        expected = unet.time_embedding(unet.time_proj(t), w)
        for embedder in (TimestepEmbedder.from_pretrained(tmp_path / "lcm"), TimestepEmbedder.from_state_dict(
                unet.state_dict(), "adm")):  # fmt: skip
            assert torch.equal(embedder(t, w), expected)
    ours = TimestepEmbedder.from_state_dict(unet.state_dict(), "adm").state_dict()
    assert torch.equal(
        to_layout(ours, "diffusers")["time_embedding.cond_proj.weight"], unet.time_embedding.cond_proj.weight
    )
    with pytest.raises(ValueError, match="the adm layout has no key for the condition projection"):
        to_layout(ours, "adm")


def test_a_variant_a_pipeline_folder_and_a_nested_checkpoint_are_named(tmp_path):
    model, inputs, t = build("stable_diffusion")
    model.half().save_pretrained(tmp_path / "pipe" / "unet", variant="fp16")  # diffusion_pytorch_model.fp16.safetensors
    (tmp_path / "pipe" / "model_index.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"variant='fp16'"):
        TimestepEmbedder.from_pretrained(tmp_path / "pipe" / "unet")
    with pytest.raises(FileNotFoundError, match=r"a pipeline's folder; its models are in subfolder= \['unet'\]"):
        TimestepEmbedder.from_pretrained(tmp_path / "pipe")
    embedder = TimestepEmbedder.from_pretrained(tmp_path / "pipe", subfolder="unet", variant="fp16")
    assert embedder.time_embedding.linear_1.weight.dtype == torch.float16
    assert torch.equal(embedder.time_embedding.linear_1.weight, model.time_embedding.linear_1.weight)
    with pytest.raises(ValueError, match="variant must be a name such as 'fp16'"):
        TimestepEmbedder.from_pretrained(tmp_path / "pipe" / "unet", variant="../fp16")
    with pytest.raises(TypeError, match=r"a whole checkpoint\? pass its state_dict\['state_dict'\]"):
        TimestepEmbedder.from_state_dict({"state_dict": model.state_dict()})
