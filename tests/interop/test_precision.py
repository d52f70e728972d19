"""The tracer's precision report along a family's real sampling run (``interop.precision``) and the
schedules it runs over (``interop.schedules``, diffusers' ``set_timesteps`` arithmetic without diffusers)."""

from __future__ import annotations

import pytest
import torch

from timestep_embed import sinusoidal_embedding, sinusoidal_embedding_np
from timestep_embed.conventions import get_convention
from timestep_embed.interop import CONTRACTS, schedule_for, schedule_precision
from timestep_embed.interop.precision import SAFE_FRACTION, sinusoid64
from timestep_embed.interop.schedules import ddim, ddpm, dpm_linspace, euler_leading, flow, karras


def test_the_schedules_are_diffusers_own():
    diffusers = pytest.importorskip("diffusers")

    def made(scheduler, steps, **kwargs):
        scheduler.set_timesteps(steps, **kwargs)
        return scheduler.timesteps

    assert torch.equal(ddpm(), made(diffusers.DDPMScheduler(), 1000))
    assert torch.equal(ddim(50, 1), made(diffusers.DDIMScheduler(steps_offset=1), 50))
    euler = diffusers.EulerDiscreteScheduler(timestep_spacing="leading", steps_offset=1)
    assert torch.equal(euler_leading(30), made(euler, 30))
    assert torch.equal(dpm_linspace(20), made(diffusers.DPMSolverMultistepScheduler(), 20))
    for shift, steps in ((1.0, 4), (3.0, 28), (5.0, 50), (7.0, 50)):
        assert torch.equal(flow(steps, shift), made(diffusers.FlowMatchEulerDiscreteScheduler(shift=shift), steps))
    dynamic = diffusers.FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    assert torch.equal(flow(28, mu=1.15), made(dynamic, 28, mu=1.15))
    sigmas = karras()
    assert sigmas[0] == pytest.approx(80.0) and sigmas[-1] == pytest.approx(0.002) and sigmas.dtype == torch.float64


@pytest.mark.parametrize("name", ["adm", "ddpm", "vaswani", "edm"])
def test_the_float64_sinusoid_is_the_core_one_and_its_jvp_the_derivative(name):
    conv = get_convention(name)
    x = torch.tensor([0.5, 37.25, 981.0], dtype=torch.float64)
    assert torch.allclose(sinusoid64(x, 64, conv), sinusoidal_embedding(x, 64, conv, dtype=torch.float64), atol=1e-12)
    _, tangent = torch.func.jvp(lambda t: sinusoid64(t, 64, conv), (x,), (torch.ones_like(x),))
    h = 1e-6
    numeric = (sinusoid64(x + h, 64, conv) - sinusoid64(x - h, 64, conv)) / (2 * h)
    assert torch.allclose(tangent, numeric, atol=1e-6)


def test_bfloat16_flux_moves_each_step_half_the_way_to_its_neighbour():
    """FluxPipeline casts t to bfloat16 latents before / 1000 and the model multiplies by 1000 in
    bfloat16: over 28 steps nothing collides, but a step's embedding moves ~0.5 of the way to the next."""
    bf16 = schedule_precision("flux_dev", torch.bfloat16)
    assert not bf16.collisions and not bf16.safe
    assert 0.3 < bf16.step_fraction < 0.8 and float(bf16.input_error.max()) > 1
    assert "bfloat16 is not safe" in bf16.summary()
    fp32 = schedule_precision("flux_dev", torch.float32)
    assert fp32.safe and float(fp32.input_error.max()) == 0
    assert schedule_precision("sd3", torch.bfloat16).safe  # SD3 passes float32 sigma * 1000 to the sinusoid


def test_collisions_name_the_steps_that_reach_the_sinusoid_as_one():
    """Hunyuan-DiT's pipeline casts the integer step to the latents' dtype: in bfloat16 (8 bits of
    mantissa) 999 and 998 both become 1000, and most of a 1000-step chain shares values."""
    report = schedule_precision("hunyuan_dit", torch.bfloat16, schedule=ddpm())
    assert ([999.0, 998.0], 1000.0) in report.collisions
    assert sum(len(r) for r, _ in report.collisions) > 500 and not report.safe
    assert not schedule_precision("hunyuan_dit", torch.float16, schedule=ddpm()).collisions  # fp16 keeps 0..2048


def test_every_contract_has_a_run_and_a_report():
    for contract in CONTRACTS.values():
        run = schedule_for(contract)
        values = run.values()
        assert values.numel() >= 4 and torch.isfinite(values.double()).all(), contract.name


def test_the_reports_numbers_are_those_of_the_embeddings():
    """Recomputed from the numpy reference of the sinusoid: the rounding's effect on each step's embedding, the
    slope (a central difference), the distance to the nearest other step, and the fraction they make."""
    contract = CONTRACTS["flux_dev"]  # bfloat16 rounds its sigma * 1000 (990 -> 988)
    report = schedule_precision(contract, torch.bfloat16, dim=64)
    assert report.embedding_error is not None and report.derivative is not None
    assert report.neighbour_distance is not None

    def emb(x):
        return torch.from_numpy(sinusoidal_embedding_np(x.double().numpy(), 64, contract.convention))

    exact, moved = emb(report.reference), emb(report.sinusoid_input)
    torch.testing.assert_close(report.embedding_error, (moved - exact).norm(dim=-1), rtol=1e-9, atol=1e-12)
    h = 1e-6
    slope = (emb(report.reference + h) - emb(report.reference - h)).norm(dim=-1) / (2 * h)
    torch.testing.assert_close(report.derivative, slope, rtol=1e-6, atol=0)
    nearest = [min(float((exact[i] - e).norm()) for j, e in enumerate(exact) if j != i and not torch.equal(e, exact[i]))
               for i in range(len(exact))]  # fmt: skip
    torch.testing.assert_close(report.neighbour_distance, torch.tensor(nearest, dtype=torch.float64), rtol=1e-9, atol=0)
    fraction = float((report.embedding_error / report.neighbour_distance).max())
    assert report.step_fraction == pytest.approx(fraction, rel=1e-12) and report.step_fraction > 0
    assert report.safe == (not report.collisions and fraction <= SAFE_FRACTION)


def test_a_diffusers_model_names_its_contract(tiny_model):
    model, _, _ = tiny_model("sd3")
    assert schedule_precision(model, torch.bfloat16).contract == "sd3"


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="no timestep contract 'sd4'"):
        schedule_precision("sd4")
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        schedule_precision("sd3", torch.int64)
    with pytest.raises(ValueError, match="dim must be an int >= 2"):
        schedule_precision("sd3", dim=1)
    with pytest.raises(ValueError, match="finite"):
        schedule_precision("sd3", schedule=torch.tensor([float("nan")]))
    with pytest.raises(TypeError, match="family must be"):
        schedule_precision(3.5)


def test_a_trace_reports_the_precision_of_its_contract(tiny_model):
    from timestep_embed.interop import trace_time_path

    model, inputs, t = tiny_model("flux_dev")
    trace = trace_time_path(model, t, inputs)
    assert not trace.precision(torch.bfloat16).safe and trace.precision(torch.float32).safe
