"""trace_time_path on tiny diffusers models and on ours: the stages it records and the flags it raises."""

from __future__ import annotations

import json

import pytest
import torch

from timestep_embed import TimestepEmbedder
from timestep_embed.ddpm.config import UNetConfig
from timestep_embed.ddpm.unet import UNet
from timestep_embed.interop import STAGE_KINDS, trace_stages, trace_time_path

from ..fixtures.tiny import BY_CLASS
from .conftest import build

diffusers = pytest.importorskip("diffusers")


def flow_timesteps(shift: float = 3.0) -> torch.Tensor:
    """Two of a real 28-step FlowMatchEulerDiscreteScheduler run: sigma * 1000."""
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=shift)
    scheduler.set_timesteps(28)
    return scheduler.timesteps[[0, 18]]


def in_dtype(model, inputs, dtype):
    cast = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    return model.to(dtype), cast


def test_sd3_on_its_scheduler_timesteps_has_every_stage_and_no_flag():
    model, inputs, _ = build("sd3")
    trace = trace_time_path(model, flow_timesteps(), inputs)
    assert trace.contract == "sd3" and trace.flags == []
    kinds = [s.kind for s in trace.stages]
    assert set(kinds) == set(STAGE_KINDS) and kinds[0] == "timestep" and kinds[-1] == "output"
    sinusoid_input = trace.find("sinusoid input")[0]
    assert torch.equal(sinusoid_input.value, flow_timesteps()) and sinusoid_input.module == "time_text_embed.time_proj"
    modulations = [s.module for s in trace.find("modulation")]
    assert "transformer_blocks.0.norm1.linear" in modulations and "norm_out.linear" in modulations


def test_a_timestep_cast_to_bfloat16_is_flagged_as_rounding():
    model, inputs = in_dtype(*build("sd3")[:2], torch.bfloat16)
    clean = trace_time_path(model, flow_timesteps(), inputs)  # the pipeline keeps float32 timesteps
    assert clean.flags == []
    rounded = trace_time_path(model, flow_timesteps().to(torch.bfloat16), inputs)
    assert any(f.startswith("rounding: the timestep reaches the sinusoid as bfloat16") for f in rounded.flags)


def test_flux_scheduler_timesteps_passed_without_the_division_are_flagged_as_scaled_twice():
    model, inputs, _ = build("flux_dev")
    right = trace_time_path(model, flow_timesteps() / 1000, inputs)
    assert right.flags == []
    wrong = trace_time_path(model, flow_timesteps(), inputs)
    assert any("scaled by 1000 twice" in f for f in wrong.flags), wrong.flags
    no_contract = trace_time_path(model, flow_timesteps(), inputs, contract=None)
    assert any(f.startswith("scaled twice") for f in no_contract.flags), no_contract.flags


def test_sigma_where_sigma_times_1000_is_expected_is_flagged():
    model, inputs, _ = build("sd3")
    trace = trace_time_path(model, flow_timesteps() / 1000, inputs)
    assert any("sigma in [0, 1] where sigma * 1000 is expected" in f for f in trace.flags), trace.flags


def test_flux_in_bfloat16_rounds_the_timestep_and_the_guidance():
    model, inputs = in_dtype(*build("flux_dev")[:2], torch.bfloat16)
    trace = trace_time_path(model, flow_timesteps() / 1000, inputs)
    assert trace.find("sinusoid input", "guidance")[0].value.tolist() == [3504.0, 3504.0]  # 3.5 * 1000 in bfloat16
    labels = [f.split(" reaches")[0] for f in trace.flags]
    assert labels == ["rounding: the timestep", "rounding: the guidance"]


def test_labels_follow_the_mlp_each_sinusoid_feeds():
    sdxl, inputs, t = build("sdxl")
    labels = {s.label for s in trace_time_path(sdxl, t, inputs).stages}
    assert {"timestep", "time ids"} <= labels
    flux, inputs, t = build("flux_dev")
    trace = trace_time_path(flux, t, inputs)
    assert [s.label for s in trace.stages if s.kind == "time embedding"] == ["timestep", "guidance"]


def test_the_frame_rate_and_the_frame_index_sinusoids_are_labelled_as_what_they_carry():
    """I2VGen-XL embeds its fps with the timestep's own time_proj and an nn.Sequential MLP (fps_embedding); SVD's
    temporal attention embeds arange(frames) (time_pos_embed): neither is the timestep."""
    i2v, inputs, t = build(BY_CLASS["I2VGenXLUNet"])
    kinds = [(s.kind, s.label, s.module) for s in trace_time_path(i2v, t, inputs).stages]
    assert ("sinusoid input", "fps", "time_proj") in kinds and ("time embedding", "fps", "fps_embedding") in kinds
    svd, inputs, t = build(BY_CLASS["UNetSpatioTemporalConditionModel"])
    frames = [s for s in trace_time_path(svd, t, inputs).stages if s.module.endswith("attentions.0.time_proj")]
    assert frames and {s.label for s in frames} == {"frame index"}


def test_a_wrong_convention_is_flagged_against_the_contract():
    embedder = TimestepEmbedder(64, convention="ddpm")
    trace = trace_time_path(embedder, torch.tensor([1, 500]), contract="stable_diffusion")
    assert any(f.startswith("convention:") for f in trace.flags)
    assert trace_time_path(TimestepEmbedder(64), torch.tensor([1, 500]), contract="stable_diffusion").flags == []


def test_non_finite_timesteps_are_flagged_not_refused_and_the_other_checks_judge_the_finite_ones():
    model, inputs, _ = build("ddpm")
    for t, what in ((torch.tensor([float("nan"), 5.0]), "1 NaN"), (torch.tensor([float("inf"), 5.0]), "1 infinite")):
        trace = trace_time_path(model, t, inputs, contract="ddpm")
        assert trace.flags == [f"non-finite: the timestep is given with {what} of 2 values"], trace.flags
    wrong = trace_time_path(model, torch.tensor([float("nan"), 5.0e6]), inputs, contract="ddpm")
    assert [f.split(":")[0] for f in wrong.flags] == ["non-finite", "range"], wrong.flags
    for dtype in (torch.float16, torch.bfloat16):  # the rounding flag measures the finite values
        for bad in (float("nan"), float("inf")):
            half = trace_time_path(model, torch.tensor([bad, 5.0], dtype=dtype), inputs, contract="ddpm")
            assert [f.split(":")[0] for f in half.flags][:2] == ["non-finite", "rounding"], half.flags


def test_our_unet_and_embedder_are_traced():
    unet = UNet(UNetConfig(image_size=8, channels=(16, 32), emb_dim=32)).eval()
    trace = trace_time_path(unet, torch.tensor([3, 700]), {"x": torch.randn(2, 1, 8, 8)}, timestep_arg="t")
    assert [s.kind for s in trace.stages][:4] == ["timestep", "sinusoid input", "sinusoid", "time embedding"]
    assert any(s.module.endswith("emb_proj") for s in trace.find("modulation"))
    assert trace.stages[-1].kind == "output" and trace.stages[-1].value.shape == (2, 1, 8, 8)


def test_report_and_json():
    model, inputs, _ = build("flux_dev")
    trace = trace_time_path(model, flow_timesteps(), inputs)
    text = trace.report()
    assert "sinusoid input  guidance" in text and "FLAG range" in text and "more block modulations" in text
    data = json.loads(trace.to_json())
    assert data["contract"] == "flux_dev" and data["flags"] == trace.flags
    assert data["stages"][1] == {
        "kind": "sinusoid input",
        "label": "timestep",
        "module": "time_text_embed.time_proj",
        "dtype": "float32",
        "shape": [2],
        "values": pytest.approx(flow_timesteps().double().mul(1000).tolist()),
        "min": pytest.approx(float(flow_timesteps().min()) * 1000),
        "max": pytest.approx(float(flow_timesteps().max()) * 1000),
        "rms": pytest.approx(float(flow_timesteps().double().mul(1000).pow(2).mean().sqrt())),
    }


def test_trace_stages_runs_callables_in_order_and_refuses_unknown_stages():
    trace = trace_stages({"sinusoid": lambda t: torch.stack([t.float().sin(), t.float().cos()], -1)}, [0.0, 1.0])
    assert [s.kind for s in trace.stages] == ["timestep", "sinusoid input", "sinusoid"]
    with pytest.raises(ValueError, match=r"unknown stage\(s\) \['sinusoids'\]; stages are sinusoid input"):
        trace_stages({"sinusoids": abs}, [0.0])


def test_trace_refuses_wrong_arguments_naming_them():
    model, t = TimestepEmbedder(32), torch.tensor([1, 2])
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        trace_time_path("unet", t)
    with pytest.raises(TypeError, match="inputs must be a mapping"):
        trace_time_path(model, t, inputs=[1])
    with pytest.raises(TypeError, match="timestep_arg must be the keyword"):
        trace_time_path(model, t, inputs={}, timestep_arg=3)


def test_an_empty_batch_of_timesteps_is_refused_by_name():
    with pytest.raises(ValueError, match=r"timesteps is empty \(shape \(0,\)\)"):
        trace_time_path(TimestepEmbedder(32), torch.tensor([]))
    with pytest.raises(ValueError, match="timesteps is empty"):
        trace_stages({"sinusoid": lambda t: t}, [])


def test_a_nan_weight_gives_strict_json_with_nulls_and_a_count():
    model = TimestepEmbedder(16, 8).eval()
    with torch.no_grad():
        model.time_embedding.linear_1.weight[0, 0] = float("nan")
    text = trace_time_path(model, torch.tensor([1.0, 500.0])).to_json()

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    stages = json.loads(text, parse_constant=refuse)["stages"]
    embedding = next(s for s in stages if s["kind"] == "time embedding")
    assert embedding["nonfinite"] > 0 and "nonfinite" not in stages[0]


def test_huge_finite_values_give_their_rms_in_strict_json():
    model = TimestepEmbedder(16, 8).double().eval()
    with torch.no_grad():
        model.time_embedding.linear_2.weight.fill_(1e200)  # squares overflow float64; the values do not
    stages = json.loads(trace_time_path(model, torch.tensor([1.0, 500.0], dtype=torch.float64)).to_json())["stages"]
    embedding = next(s for s in stages if s["kind"] == "time embedding")
    assert 1e199 < embedding["rms"] < 1e203 and "nonfinite" not in embedding
