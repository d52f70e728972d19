"""Consistency models: the parameterisation against diffusers' data prediction, the boundary condition, ECT's r(t),
the loss against a hand computation, the sampler's levels and calls, and ``distill`` end to end."""

import copy
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.cli import main
from timestep_embed.ddpm import (
    ConfigError,
    ConsistencyConfig,
    RunConfig,
    Runtime,
    SampleConfig,
    distill_config,
    distill_run,
    generate,
    load_model,
    run_training,
)
from timestep_embed.ddpm.consistency import (
    consistency_function,
    consistency_levels,
    consistency_loss,
    consistency_sample,
    model_time_at,
    nearer_sigma,
)
from timestep_embed.ddpm.diffusion import log_sigma_table, make_schedule

from .test_train import SMOKE, fast

COSINE = make_schedule("cosine", 1000)


def wavy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A fixed 'network' whose output depends on the time input, so a wrong time mapping shows."""
    return torch.tanh(0.7 * x + torch.sin(t.to(x.dtype) / 97.0).reshape(-1, 1, 1, 1))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=6), st.floats(0.01, 50))
def test_the_boundary_condition_holds_exactly(zero, level):
    x = torch.randn(len(zero), 1, 4, 4, generator=torch.Generator().manual_seed(len(zero)))
    sigma = torch.tensor([0.0 if z else level for z in zero], dtype=torch.float64)
    out = consistency_function(wavy, x, sigma, COSINE)
    for row, z in enumerate(zero):
        assert torch.equal(out[row], x[row]) == z  # f(x, 0) = x bit for bit; elsewhere the model's prediction


@pytest.mark.parametrize("prediction", ["eps", "v"])
def test_the_consistency_function_is_diffusers_data_prediction_at_the_training_steps(prediction):
    diffusers = pytest.importorskip("diffusers")
    kind = {"eps": "epsilon", "v": "v_prediction"}[prediction]
    scheduler = diffusers.DDPMScheduler(
        num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", prediction_type=kind, clip_sample=False
    )
    schedule = make_schedule("cosine", 1000)
    gen = torch.Generator().manual_seed(0)
    for i in (0, 3, 250, 700, 990):
        x_vp = torch.randn(2, 1, 4, 4, generator=gen, dtype=torch.float64)
        abar = schedule.alphas_cumprod[i]
        sigma = torch.full((2,), float(((1 - abar) / abar).sqrt()), dtype=torch.float64)
        ours = consistency_function(wavy, x_vp / abar.sqrt(), sigma, schedule, prediction)
        out = wavy(x_vp, torch.full((2,), float(i)))
        theirs = scheduler.step(out, i, x_vp, generator=gen).pred_original_sample
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 999), st.floats(0, 1))
def test_the_time_input_is_the_index_at_the_steps_and_between_them(i, w):
    table = log_sigma_table(COSINE)
    assert float(model_time_at(COSINE, table[i : i + 1].exp())) == pytest.approx(i, abs=1e-3)
    j = min(i + 1, 999)
    between = (table[i] + w * (table[j] - table[i])).exp().reshape(1)
    assert i - 1e-3 <= float(model_time_at(COSINE, between)) <= j + 1e-3
    assert float(model_time_at(COSINE, torch.tensor([1e-9, 1e9], dtype=torch.float64))[0]) == 0  # clamped
    assert float(model_time_at(COSINE, torch.tensor([1e9], dtype=torch.float64))) == 999


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 80), st.integers(0, 6))
def test_ect_r_is_below_t_and_its_gap_halves_each_stage(t, stage):
    t = torch.tensor([t], dtype=torch.float64)
    r, r_next = nearer_sigma(t, stage), nearer_sigma(t, stage + 1)
    assert 0 <= float(r) < float(t) and float(r) <= float(r_next) < float(t)
    if float(r) > 0:  # not clamped: t - r halves
        assert float(t - r_next) == pytest.approx(float(t - r) / 2, rel=1e-9)


def test_the_loss_is_the_pseudo_huber_distance_over_t_minus_r():
    """With a model that outputs zeros, f(x, sigma) = x, so f(x_t) - f(x_r) = (t - r) eps: the loss by hand."""
    cfg, x0 = ConsistencyConfig(), torch.rand(8, 1, 4, 4) * 2 - 1
    loss = consistency_loss(
        lambda x, t: torch.zeros_like(x), x0, COSINE, cfg, 1, generator=torch.Generator().manual_seed(3)
    )
    gen = torch.Generator().manual_seed(3)  # the same draws, in the same order
    log_t = cfg.sigma_mean + cfg.sigma_std * torch.randn(8, generator=gen)
    t = log_t.double().clamp(float(log_sigma_table(COSINE)[0]), math.log(cfg.sigma_max)).exp()
    eps = torch.randn(x0.shape, generator=gen)
    r = nearer_sigma(t, 1)
    norm = ((t - r).float().reshape(-1, 1, 1, 1) * eps).pow(2).flatten(1).sum(1)
    distance = (norm + cfg.huber_c**2).sqrt() - cfg.huber_c
    torch.testing.assert_close(loss, (distance / (t - r).float()).mean())
    edm = ConsistencyConfig(weighting="edm", sigma_data=0.5)  # EDM's lambda = 1 / t^2 + 1 / sigma_data^2 instead
    loss = consistency_loss(
        lambda x, t: torch.zeros_like(x), x0, COSINE, edm, 1, generator=torch.Generator().manual_seed(3)
    )
    torch.testing.assert_close(loss, (distance * (1 / t**2 + 4).float()).mean())
    with pytest.raises(ValueError, match="needs the teacher"):
        consistency_loss(lambda x, t: x, x0, COSINE, ConsistencyConfig(method="cd"), 0)


def test_the_loss_trains_only_the_t_branch():
    """The target f(x_r, r) is a constant (the stop-gradient of iCT/ECT): the gradient is the one of a loss whose
    target comes from a frozen copy of the model, which gives the same numbers."""
    torch.manual_seed(0)
    net = torch.nn.Conv2d(1, 1, 3, padding=1)
    frozen = copy.deepcopy(net).requires_grad_(False)
    x0 = torch.randn(4, 1, 6, 6)
    times: list[torch.Tensor] = []

    def gradient(target_net):
        def model(x, t):  # the target's call comes first (at r, below t)
            times.append(t)
            return (target_net if len(times) % 2 else net)(x)

        net.zero_grad()
        loss = consistency_loss(model, x0, COSINE, ConsistencyConfig(), 0, generator=torch.Generator().manual_seed(0))
        loss.backward()
        return loss.detach(), net.weight.grad.clone()

    loss, grad = gradient(net)
    assert bool((times[0] < times[1]).all())  # the first call is the target's
    frozen_loss, frozen_grad = gradient(frozen)
    assert torch.equal(loss, frozen_loss) and grad.abs().sum() > 0
    torch.testing.assert_close(grad, frozen_grad, rtol=1e-6, atol=1e-9)


def test_under_the_runs_bf16_autocast_every_weight_of_the_student_gets_its_gradient():
    """The target pass runs under no_grad first; autocast's cache of bf16 weight copies would hand those copies,
    with no way back to the weights, to the prediction pass (torch 2.2 does): the run's autocast keeps no cache."""
    rt = Runtime(torch.device("cpu"), bf16=True)
    with rt.autocast():
        assert not torch.is_autocast_cache_enabled()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.SiLU(), torch.nn.Conv2d(4, 1, 3, padding=1))
    with rt.autocast():
        loss = consistency_loss(lambda x, t: net(x), torch.rand(4, 1, 6, 6), COSINE, ConsistencyConfig(), 0,
                                generator=torch.Generator().manual_seed(0))  # fmt: skip
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


def test_levels_are_geometric_and_checked():
    levels = consistency_levels(4, 10.0, 0.5)
    assert levels[0] == 10.0 and levels[-1] == pytest.approx(0.5)
    ratios = [b / a for a, b in zip(levels, levels[1:], strict=False)]
    assert max(ratios) == pytest.approx(min(ratios)) and consistency_levels(1, 10.0, 0.5) == [10.0]
    with pytest.raises(ValueError, match="last_sigma"):
        consistency_levels(3, 1.0, 2.0)
    with pytest.raises(ValueError, match="steps"):
        consistency_levels(0, 1.0, 0.5)


def test_the_sampler_calls_the_model_once_a_level_at_those_levels():
    seen = []

    def model(x, t):
        seen.append(float(t[0]))
        return torch.zeros_like(x)

    x = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    out = consistency_sample(model, x, COSINE, [10.0, 2.0, 0.5], generator=torch.Generator().manual_seed(1))
    expected = model_time_at(COSINE, torch.tensor([10.0, 2.0, 0.5], dtype=torch.float64))
    assert seen == pytest.approx(expected.tolist()) and out.abs().max() <= 1


def test_config_rules():
    with pytest.raises(ConfigError, match="sample.sigma_max = 80: above consistency.sigma_max = 10"):
        RunConfig(consistency=ConsistencyConfig(), sample=SampleConfig(sampler="consistency"))
    flow = RunConfig.load(None, ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"])
    with pytest.raises(ConfigError, match="rectified-flow"):
        RunConfig(diffusion=flow.diffusion, sample=flow.sample, consistency=ConsistencyConfig())
    with pytest.raises(ConfigError, match="distill tunes eps- and v-prediction runs only"):
        distill_config(flow)
    with pytest.raises(ConfigError, match="consistency.stages"):
        ConsistencyConfig(stages=0)
    teacher = RunConfig.load(SMOKE)
    for change in ("model.emb_dim=8", "model.dropout_rate=0.1", "diffusion.schedule=linear"):
        with pytest.raises(ConfigError, match="keeps the teacher's model.*consistency.\\* and model.dropout"):
            distill_config(teacher, [change])
    with_dropout = teacher.with_overrides(["model.dropout=0.3"])  # the tuning runs without dropout unless told
    assert distill_config(with_dropout).model.dropout == 0
    assert distill_config(with_dropout, ["model.dropout=0.2"]).model.dropout == 0.2
    cfg = distill_config(teacher, ["train.steps=7", "consistency.method=cd"])
    assert cfg.train.steps == 7 and cfg.train.minutes is None and cfg.consistency.method == "cd"
    assert cfg.sample.sampler == "consistency" and cfg.sample.steps == 4


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    folder = tmp_path_factory.mktemp("teacher") / "run"
    run_training(SMOKE, folder, overrides=fast("train.steps=6", "train.snapshot_every=0"), progress=False)
    return folder


@pytest.mark.parametrize("method", ["ect", "cd"])
def test_distill_writes_a_run_that_samples_in_four_calls(teacher, tmp_path, method):
    out = tmp_path / method
    overrides = fast("train.steps=4", f"consistency.method={method}", "sample.steps=4")  # 4: the default
    metrics = distill_run(teacher, out, overrides, progress=False)
    assert metrics["train_steps"] == 4 and (out / "samples.npy").is_file()
    stored = json.loads((out / "metrics.json").read_text())["config"]
    assert stored["consistency"]["method"] == method and stored["sample"]["sampler"] == "consistency"
    model, cfg = load_model(out)
    assert cfg.sample.steps == 4 and cfg.consistency is not None
    calls = []
    assert main(["sample", str(out), "--out", str(tmp_path / "s"), "--quiet"]) == 0
    wrapped = model.forward

    def counted(x, t):
        calls.append(len(x))
        return wrapped(x, t)

    model.forward = counted
    x = generate(model, cfg.replace("sample", num_samples=5, batch_size=5), Runtime.create("cpu", False))
    assert len(calls) == 4 and x.shape == (5, 1, 28, 28)
    assert np.load(tmp_path / "s.npy").shape[0] == cfg.sample.num_samples


def test_distill_starts_from_the_teacher_and_resumes(teacher, tmp_path):
    still = tmp_path / "still"  # a learning rate of ~0: the student's weights stay the teacher's
    distill_run(teacher, still, fast("train.steps=1", "train.lr=1e-12", "eval.enabled=false"), progress=False)
    theirs, ours = load_model(teacher)[0].state_dict(), load_model(still, ema=False)[0].state_dict()
    assert all(torch.allclose(theirs[k], ours[k], atol=1e-8) for k in theirs)
    out = tmp_path / "d"
    distill_run(teacher, out, fast("train.steps=2"), progress=False)
    more = distill_run(teacher, out, fast("train.steps=3"), resume=True, progress=False)
    assert more["resumed_at"] == 2 and more["train_steps"] == 3
    with pytest.raises(ValueError, match="teacher's folder"):
        distill_run(teacher, teacher, fast("train.steps=2"), progress=False)
    with pytest.raises(FileExistsError):
        distill_run(teacher, out, fast("train.steps=2"), progress=False)


def test_distill_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["distill", str(tmp_path / "missing"), "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "distill: error" in err[0]
