"""The few-step samplers against the installed diffusers, step by step, with one fixed model.

The model is a smooth deterministic function of (x, t) in float64, so any difference comes from the
samplers: our float64 math against diffusers' (which keeps its sigmas, and DPM-Solver its sample, in
float32: hence 1e-6, not 1e-12).
"""

from __future__ import annotations

import pytest
import torch

from timestep_embed.ddpm import diffusion as D
from timestep_embed.ddpm import samplers as S

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


def schedule_of(scheduler) -> D.Schedule:
    """Our schedule on diffusers' numbers: abar from its float32 sigma = sqrt((1 - abar) / abar), so
    that our float64 sigmas are diffusers' float32 ones (it keeps them in float32)."""
    abar = scheduler.alphas_cumprod
    sigma = ((1 - abar) / abar) ** 0.5  # float32, as diffusers computes it
    return D.Schedule.from_alphas_cumprod(1.0 / (1.0 + sigma.double() ** 2))


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
    ours = S.dpm_solver_2m(model, x, schedule, timesteps, prediction=ours_prediction)
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
        S.dpm_solver_2m(stop_after, x, schedule, timesteps, prediction=prediction)
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

    grid = scheduler.timesteps[::2].tolist()  # diffusers lists each interior step twice (its two evaluations)
    ours = S.heun(recording, x, schedule, grid, prediction="eps" if prediction == "epsilon" else "v")
    assert seen == pytest.approx(model_times, abs=1e-4)  # the same model calls at the same times
    assert len(seen) == 2 * steps - 1
    assert (ours - theirs).abs().max() <= 1e-6


@pytest.mark.parametrize("sampler", ["dpm++2m", "heun"])
def test_few_step_samplers_recover_gaussian_data_with_the_exact_model(sampler):
    """Data x0 ~ N(0, s^2): the exact eps predictor is known in closed form; 20 steps land on std s."""
    schedule, s = D.make_schedule("linear", 1000), 0.5

    def exact_eps(x, t):
        abar = schedule.alphas_cumprod[t.long().cpu()].reshape(-1, 1, 1, 1).to(x.dtype)
        return x * (1 - abar).sqrt() / (abar * s**2 + 1 - abar)

    g = torch.Generator().manual_seed(0)
    x = S.sample(exact_eps, (4000, 1, 1, 1), schedule, sampler=sampler, steps=20, generator=g, clip_x0=False)
    assert abs(float(x.std()) - s) < 0.03


def test_sample_dispatches_to_the_solvers_with_the_configured_subsequence():
    schedule = D.make_schedule("linear", 1000)
    times = []

    def recording(x, t):
        times.append(int(t[0]))
        return torch.zeros_like(x)

    S.sample(recording, (1, 1, 2, 2), schedule, sampler="dpm++2m", steps=5, generator=torch.Generator().manual_seed(0))
    assert times == [999, 799, 599, 400, 200]  # diffusers' DPMSolverMultistepScheduler.set_timesteps(5) too
    times.clear()
    S.sample(recording, (1, 1, 2, 2), schedule, sampler="heun", steps=5, generator=torch.Generator().manual_seed(0))
    assert times == [999, 749, 749, 500, 500, 250, 250, 0, 0]  # the evenly spaced grid, two calls a step


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
    ours = S.flow_euler(flow_model, x.clone(), steps)
    torch.testing.assert_close(ours, theirs.to(torch.float64), rtol=0, atol=1e-6)


def test_flow_matching_loss_mixes_data_and_noise_and_targets_the_velocity():
    x0, eps = torch.randn(4, 1, 2, 2), torch.randn(4, 1, 2, 2)
    t = torch.tensor([0.1, 0.5, 0.9, 0.25], dtype=torch.float64)
    seen = {}

    def oracle(x_t, t_model):  # knows x0 and eps: predicts the velocity exactly
        seen["x_t"], seen["t"] = x_t, t_model
        return eps - x0

    assert D.training_loss(oracle, x0, None, prediction="flow", t=t, noise=eps).item() == pytest.approx(0.0, abs=1e-10)
    weight = t.float().reshape(-1, 1, 1, 1)
    torch.testing.assert_close(seen["x_t"], (1 - weight) * x0 + weight * eps)
    assert seen["t"].dtype == torch.float32 and seen["t"].tolist() == pytest.approx([100.0, 500.0, 900.0, 250.0])
    drawn = D.flow_matching_loss(lambda x, t: torch.zeros_like(x), x0, generator=torch.Generator().manual_seed(0))
    assert drawn.item() > 0


def test_euler_only_for_flow_models():
    model = flow_model
    with pytest.raises(ValueError, match="the euler sampler is for rectified-flow models"):
        S.sample(model, (2, 1, 4, 4), D.make_schedule(), sampler="euler", steps=4, prediction="eps")
    with pytest.raises(ValueError, match="the euler sampler is for rectified-flow models"):
        S.sample(model, (2, 1, 4, 4), D.make_schedule(), sampler="ddpm", steps=4, prediction="flow")
    out = S.sample(model, (2, 1, 4, 4), D.make_schedule(), sampler="euler", steps=4, prediction="flow")
    assert out.shape == (2, 1, 4, 4) and out.dtype == torch.float32
