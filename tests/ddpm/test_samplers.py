"""The few-step samplers against the installed diffusers, step by step, with one fixed model.

The model is a smooth deterministic function of (x, t) in float64, so any difference comes from the
samplers: our float64 math against diffusers' (which keeps its sigmas, and DPM-Solver its sample, in
float32: hence 1e-6, not 1e-12).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.ddpm import diffusion, samplers, solvers

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy 2 copy= notes from diffusers' schedulers


def fixed_model(scheduler):
    """A fixed 'network' for ``scheduler``'s abar: the exact eps of N(0, 0.5^2) data plus a smooth
    perturbation in x and t that fades with the noise, so that its data predictions stay O(1) at every
    noise level (as a trained network's do; an O(1) eps error at abar = 1e-9 would be x0 errors of 3e4)."""
    abar_all = scheduler.alphas_cumprod.to(torch.float64)

    def model(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = t.to(torch.float64).reshape(-1, 1, 1, 1)
        abar = abar_all[t.round().long().clamp(0, len(abar_all) - 1)]
        exact = x * (1 - abar).sqrt() / (abar * 0.25 + 1 - abar)
        return exact + 0.1 * abar.sqrt() * torch.tanh(0.7 * x + 0.3 * torch.sin(t / 97.0))

    return model


def noise(seed: int = 0) -> torch.Tensor:
    return torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def schedule_of(scheduler) -> diffusion.Schedule:
    """Our schedule on diffusers' numbers: abar from its float32 sigma = sqrt((1 - abar) / abar), so
    that our float64 sigmas are diffusers' float32 ones (it keeps them in float32)."""
    abar = scheduler.alphas_cumprod
    sigma = ((1 - abar) / abar) ** 0.5  # float32, as diffusers computes it
    return diffusion.Schedule.from_alphas_cumprod(1.0 / (1.0 + sigma.double() ** 2))


@pytest.mark.parametrize("beta_schedule", ["linear", "scaled_linear"])
@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction"])
@pytest.mark.parametrize("steps", [5, 20])
def test_dpm_solver_2m_equals_diffusers_step_by_step(beta_schedule, prediction, steps):
    scheduler = diffusers.DPMSolverMultistepScheduler(beta_schedule=beta_schedule, prediction_type=prediction)
    scheduler.set_timesteps(steps)
    schedule, x, model = schedule_of(scheduler), noise(), fixed_model(scheduler)
    theirs, trajectory = x.clone(), []
    for t in scheduler.timesteps:
        theirs = scheduler.step(model(theirs, t.expand(3)), t, theirs).prev_sample
        trajectory.append(theirs)
    ours_prediction = "eps" if prediction == "epsilon" else "v"
    timesteps = scheduler.timesteps.tolist()
    for k in range(1, len(timesteps) + 1):  # every prefix of the loop ends where diffusers' does
        if k < len(timesteps):
            # stop early: the k-th state of diffusers is x after k steps, i.e. at timesteps[k]
            partial = _dpm_prefix(model, x, schedule, timesteps, k, ours_prediction)
            assert (partial - trajectory[k - 1]).abs().max() <= 1e-6
    ours = solvers.dpm_solver_2m(model, x, schedule, timesteps, prediction=ours_prediction)
    assert (ours - theirs).abs().max() <= 1e-6


def _dpm_prefix(model, x, schedule, timesteps, k, prediction):
    """Our solver run for the first k steps of ``timesteps`` (the k-th step lands on timesteps[k])."""
    calls = []

    def stop_after(x_t, t):
        if len(calls) == k:
            raise _Stop(x_t)
        calls.append(t)
        return model(x_t, t)

    try:
        solvers.dpm_solver_2m(stop_after, x, schedule, timesteps, prediction=prediction)
    except _Stop as stop:
        return stop.x
    raise AssertionError("the solver made fewer model calls than steps")


class _Stop(Exception):
    def __init__(self, x):
        self.x = x


@pytest.mark.parametrize("beta_schedule", ["linear", "scaled_linear"])
@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction"])
@pytest.mark.parametrize("steps", [4, 12])
def test_heun_equals_diffusers(beta_schedule, prediction, steps):
    scheduler = diffusers.HeunDiscreteScheduler(beta_schedule=beta_schedule, prediction_type=prediction)
    scheduler.set_timesteps(steps)
    schedule, x, model = schedule_of(scheduler), noise(1), fixed_model(scheduler)
    theirs = x * scheduler.init_noise_sigma
    model_times = []
    for t in scheduler.timesteps:
        model_input = scheduler.scale_model_input(theirs, t)
        model_times.append(float(t))
        theirs = scheduler.step(model(model_input, t.expand(3)), t, theirs).prev_sample
    seen = []

    def recording(x_t, t):
        seen.append(float(t[0]))
        return model(x_t, t)

    times = scheduler.timesteps[::2].tolist()  # diffusers lists each interior step twice (its two evaluations)
    ours = solvers.heun(recording, x, schedule, times, prediction="eps" if prediction == "epsilon" else "v")
    assert seen == pytest.approx(model_times, abs=1e-4)  # the same model calls at the same times
    assert len(seen) == 2 * steps - 1
    assert (ours - theirs).abs().max() <= 1e-6
    pred = "eps" if prediction == "epsilon" else "v"  # sample() picks diffusers' times itself (unrounded)
    drawn = samplers.sample(
        model, x.shape, schedule, sampler="heun", steps=steps, x_T=x, clip_x0=False, prediction=pred
    )
    assert torch.equal(drawn, solvers.heun(model, x.float(), schedule, times, prediction=pred))  # (in float32)


@pytest.mark.parametrize("beta_schedule", ["linear", "squaredcos_cap_v2"])
@pytest.mark.parametrize("sigma_max", [None, 80.0])
@pytest.mark.parametrize("steps", [2, 5, 20])  # one step: diffusers' levels are [sigma_min], ours [sigma_max]
def test_karras_levels_equals_diffusers(beta_schedule, sigma_max, steps):
    """Noise levels and model times of diffusers' ``use_karras_sigmas=True`` (EulerDiscreteScheduler, whose
    config has the ``sigma_max`` cap; its Heun and DPM-Solver schedulers share ``_convert_to_karras``)."""
    scheduler = diffusers.EulerDiscreteScheduler(
        beta_schedule=beta_schedule, use_karras_sigmas=True, sigma_max=sigma_max
    )
    scheduler.set_timesteps(steps)
    sigmas, indices = solvers.karras_levels(schedule_of(scheduler), steps, sigma_max=sigma_max)
    theirs = scheduler.sigmas[:-1].double()
    assert float(scheduler.sigmas[-1]) == 0.0
    assert torch.allclose(torch.tensor(sigmas, dtype=torch.float64), theirs, rtol=1e-6, atol=0)
    assert indices == pytest.approx(scheduler.timesteps.tolist(), abs=2e-3)  # theirs: float32 numpy interpolation
    if sigma_max is not None:
        assert sigmas[0] == sigma_max


@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction"])
@pytest.mark.parametrize("steps", [4, 12])
def test_heun_on_the_karras_levels_equals_diffusers(prediction, steps):
    scheduler = diffusers.HeunDiscreteScheduler(prediction_type=prediction, use_karras_sigmas=True)
    scheduler.set_timesteps(steps)
    schedule, x, model = schedule_of(scheduler), noise(2), fixed_model(scheduler)
    theirs = x * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        theirs = scheduler.step(model(scheduler.scale_model_input(theirs, t), t.expand(3)), t, theirs).prev_sample
    sigmas, indices = solvers.karras_levels(schedule, steps, sigma_max=None)  # diffusers' Heun has no cap
    ours = solvers.heun(
        model, x, schedule, indices, sigmas=sigmas, prediction="eps" if prediction == "epsilon" else "v"
    )
    assert (ours - theirs).abs().max() <= 1e-6


@pytest.mark.parametrize("beta_schedule", ["linear", "scaled_linear"])
@pytest.mark.parametrize("steps", [10, 20])
def test_dpm_solver_2m_on_the_karras_levels_equals_diffusers(beta_schedule, steps):
    """The solver on diffusers' Karras noise levels. diffusers' DPM-Solver feeds the model integer times there
    (rounded; truncated for squaredcos_cap_v2, where many coincide and its step counter then overruns
    its sigmas), while :func:`sample` keeps each sigma's fractional index; so the solver gets its times.
    (At 5 steps its float32 sample alone is 2e-6 from float64, hence 10 and 20.)"""
    scheduler = diffusers.DPMSolverMultistepScheduler(beta_schedule=beta_schedule, use_karras_sigmas=True)
    scheduler.set_timesteps(steps)
    schedule, x, model = schedule_of(scheduler), noise(3), fixed_model(scheduler)
    theirs = x.clone()
    for t in scheduler.timesteps:
        theirs = scheduler.step(model(theirs, t.expand(3)), t, theirs).prev_sample
    sigmas, _ = solvers.karras_levels(schedule, steps, sigma_max=None)
    assert torch.allclose(torch.tensor(sigmas, dtype=torch.float64), scheduler.sigmas[:-1].double(), rtol=1e-6)
    ours = solvers.dpm_solver_2m(
        model, x, schedule, scheduler.timesteps.tolist(), sigmas=scheduler.sigmas[:-1].tolist()
    )
    assert (ours - theirs).abs().max() <= 1e-6


@given(
    steps=st.integers(1, 60),
    sigma_max=st.one_of(st.none(), st.floats(0.5, 1e5)),
    schedule_name=st.sampled_from(["linear", "cosine"]),
)
@settings(max_examples=40, deadline=None)
def test_karras_levels_descends_within_the_schedule(steps, sigma_max, schedule_name):
    schedule = diffusion.make_schedule(schedule_name, 1000)
    sigmas, indices = solvers.karras_levels(schedule, steps, sigma_max=sigma_max)
    top, bottom = solvers._sigma_ve(schedule, 999), solvers._sigma_ve(schedule, 0)
    assert len(sigmas) == len(indices) == steps
    assert sigmas[0] == pytest.approx(top if sigma_max is None else min(sigma_max, top), rel=1e-9)
    if steps > 1:
        assert sigmas[-1] == pytest.approx(bottom, rel=1e-9)
        assert all(a > b for a, b in zip(sigmas, sigmas[1:], strict=False))
    assert all(0 <= i <= 999 for i in indices) and all(a >= b for a, b in zip(indices, indices[1:], strict=False))


def test_karras_spacing_is_for_the_solvers_and_starts_heun_at_sigma_max():
    schedule = diffusion.make_schedule("cosine", 1000)  # sigma ~2e4 at the last index: the cap matters
    stds = []

    def recording(x, t):
        stds.append(x.std().item())
        return torch.zeros_like(x)

    g = torch.Generator().manual_seed(0)
    x = samplers.sample(recording, (2000, 1, 1, 1), schedule, sampler="heun", steps=5, spacing="karras", generator=g)
    assert stds[0] == pytest.approx(80 / (1 + 80**2) ** 0.5, rel=0.05)  # the model sees x_T / sqrt(1 + 80^2)
    assert torch.isfinite(x).all()
    with pytest.raises(ValueError, match="spacing='karras' with sampler='ddpm'"):
        samplers.sample(recording, (1, 1, 1, 1), schedule, sampler="ddpm", steps=5, spacing="karras")
    with pytest.raises(ValueError, match="sigmas: 2 noise levels for 1 timesteps"):
        solvers.heun(recording, torch.zeros(1, 1, 1, 1), schedule, [999], sigmas=[80.0, 1.0])
    with pytest.raises(ValueError, match="sigma_max=0"):
        solvers.karras_levels(schedule, 5, sigma_max=0)
    with pytest.raises(ValueError, match=r"sigma_max=0.001: .* above the schedule's smallest sigma"):
        solvers.karras_levels(schedule, 5, sigma_max=1e-3)


@pytest.mark.parametrize("sampler", ["dpm++2m", "heun"])
def test_few_step_samplers_recover_gaussian_data_with_the_exact_model(sampler):
    """Data x0 ~ N(0, s^2): the exact eps predictor is known in closed form; 20 steps land on std s."""
    schedule, s = diffusion.make_schedule("linear", 1000), 0.5

    def exact_eps(x, t):
        abar = schedule.alphas_cumprod[t.long().cpu()].reshape(-1, 1, 1, 1).to(x.dtype)
        return x * (1 - abar).sqrt() / (abar * s**2 + 1 - abar)

    g = torch.Generator().manual_seed(0)
    x = samplers.sample(exact_eps, (4000, 1, 1, 1), schedule, sampler=sampler, steps=20, generator=g, clip_x0=False)
    assert abs(float(x.std()) - s) < 0.03


def test_sample_dispatches_to_the_solvers_with_the_configured_subsequence():
    schedule = diffusion.make_schedule("linear", 1000)
    times = []

    def recording(x, t):
        times.append(int(t[0]))
        return torch.zeros_like(x)

    samplers.sample(
        recording, (1, 1, 2, 2), schedule, sampler="dpm++2m", steps=5, generator=torch.Generator().manual_seed(0)
    )
    assert times == [999, 799, 599, 400, 200]  # diffusers' DPMSolverMultistepScheduler.set_timesteps(5) too
    times.clear()

    def recording_floats(x, t):
        times.append(float(t[0]))
        return torch.zeros_like(x)

    samplers.sample(
        recording_floats, (1, 1, 2, 2), schedule, sampler="heun", steps=5, generator=torch.Generator().manual_seed(0)
    )
    # linspace(0, 999, 5) unrounded, as diffusers' HeunDiscreteScheduler: two calls a step, one for the last
    assert times == [999, 749.25, 749.25, 499.5, 499.5, 249.75, 249.75, 0, 0]


@pytest.mark.parametrize("spacing, theirs", [("evenly", "linspace"), ("leading", "leading"), ("trailing", "trailing")])
@pytest.mark.parametrize("steps", [5, 10])
def test_dpm_solver_2m_through_sample_visits_diffusers_timesteps_for_every_spacing(spacing, theirs, steps):
    scheduler = diffusers.DPMSolverMultistepScheduler(timestep_spacing=theirs)
    scheduler.set_timesteps(steps)
    schedule, x, model = schedule_of(scheduler), noise(), fixed_model(scheduler)
    expected = x.clone()
    for t in scheduler.timesteps:
        expected = scheduler.step(model(expected, t.expand(3)), t, expected).prev_sample
    times = []

    def recording(x_t, t):
        times.append(int(t[0]))
        return model(x_t, t)

    ours = samplers.sample(recording, x.shape, schedule, sampler="dpm++2m", steps=steps, spacing=spacing, x_T=x,
                           clip_x0=False)  # fmt: skip
    assert times == scheduler.timesteps.tolist()
    assert (ours.double() - expected).abs().max() <= 1e-5 * expected.abs().max()


def flow_model(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A smooth fixed velocity field u(x, t) (t as the scheduler's sigma * 1000)."""
    s = t.to(x.dtype).reshape(-1, 1, 1, 1) / 1000
    return x * (1 - 0.3 * s) + torch.tanh(0.5 * x + s)


@pytest.mark.parametrize("steps", [1, 4, 28])
def test_flow_euler_equals_diffusers_flow_match_euler_step_by_step(steps):
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler()  # shift 1
    scheduler.set_timesteps(steps)
    x = noise()
    theirs = x.clone()
    for t in scheduler.timesteps:
        theirs = scheduler.step(flow_model(theirs, t.expand(3)), t, theirs).prev_sample
    ours = solvers.flow_euler(flow_model, x.clone(), steps)
    torch.testing.assert_close(ours, theirs.to(torch.float64), rtol=0, atol=1e-6)


def test_flow_matching_loss_mixes_data_and_noise_and_targets_the_velocity():
    x0, eps = torch.randn(4, 1, 2, 2), torch.randn(4, 1, 2, 2)
    t = torch.tensor([0.1, 0.5, 0.9, 0.25], dtype=torch.float64)
    seen = {}

    def oracle(x_t, t_model):  # knows x0 and eps: predicts the velocity exactly
        seen["x_t"], seen["t"] = x_t, t_model
        return eps - x0

    assert diffusion.training_loss(oracle, x0, None, prediction="flow", t=t, noise=eps).item() == pytest.approx(
        0.0, abs=1e-10
    )
    weight = t.float().reshape(-1, 1, 1, 1)
    torch.testing.assert_close(seen["x_t"], (1 - weight) * x0 + weight * eps)
    assert seen["t"].dtype == torch.float32 and seen["t"].tolist() == pytest.approx([100.0, 500.0, 900.0, 250.0])
    drawn = diffusion.flow_matching_loss(
        lambda x, t: torch.zeros_like(x), x0, generator=torch.Generator().manual_seed(0)
    )
    assert drawn.item() > 0


def test_euler_only_for_flow_models():
    model = flow_model
    with pytest.raises(ValueError, match="the euler sampler is for rectified-flow models"):
        samplers.sample(model, (2, 1, 4, 4), diffusion.make_schedule(), sampler="euler", steps=4, prediction="eps")
    with pytest.raises(ValueError, match="the euler sampler is for rectified-flow models"):
        samplers.sample(model, (2, 1, 4, 4), diffusion.make_schedule(), sampler="ddpm", steps=4, prediction="flow")
    out = samplers.sample(model, (2, 1, 4, 4), diffusion.make_schedule(), sampler="euler", steps=4, prediction="flow")
    assert out.shape == (2, 1, 4, 4) and out.dtype == torch.float32
