"""Diffusion math: schedules, forward process, loss, samplers; diffusers as the run-time oracle."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.ddpm import diffusion, samplers

diffusers = pytest.importorskip("diffusers")
DIFFUSERS_SCHEDULE = {"linear": "linear", "cosine": "squaredcos_cap_v2"}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- schedules
def test_linear_schedule_is_hos():
    s = diffusion.make_schedule("linear")
    assert s.T == 1000 and s.betas.dtype == torch.float64
    assert s.betas[0].item() == pytest.approx(1e-4) and s.betas[-1].item() == pytest.approx(0.02)
    assert torch.equal(s.alphas_cumprod, torch.cumprod(1 - s.betas, 0))
    assert s.alphas_cumprod_prev[0] == 1 and torch.equal(s.alphas_cumprod_prev[1:], s.alphas_cumprod[:-1])


def test_cosine_schedule_matches_closed_form_and_cap():
    s = diffusion.make_schedule("cosine", 1000)
    t = torch.arange(1, 1001, dtype=torch.float64) / 1000
    f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2 / math.cos(0.008 / 1.008 * math.pi / 2) ** 2
    assert torch.allclose(s.alphas_cumprod[:900], f[:900], rtol=1e-10)  # before the 0.999 cap bites
    assert s.betas.max().item() == pytest.approx(0.999)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_alphas_cumprod_match_diffusers(kind):
    ours = diffusion.make_schedule(kind)
    theirs = diffusers.DDPMScheduler(beta_schedule=DIFFUSERS_SCHEDULE[kind]).alphas_cumprod.double()
    assert torch.allclose(ours.alphas_cumprod, theirs, atol=1e-6, rtol=0)


def test_q_sample_matches_diffusers_add_noise():
    sched = diffusers.DDPMScheduler()
    x0, noise = torch.randn(6, 1, 8, 8, generator=gen(1)), torch.randn(6, 1, 8, 8, generator=gen(2))
    t = torch.tensor([0, 1, 10, 500, 998, 999])
    theirs = sched.add_noise(x0, noise, t)
    # same formula on the same abar numbers: equal within 1e-6
    shared = diffusion.Schedule.from_alphas_cumprod(sched.alphas_cumprod)
    assert torch.allclose(diffusion.q_sample(x0, t, noise, shared), theirs, atol=1e-6, rtol=0)
    # our float64 schedule: diffusers' float32 cumprod loses ~3e-6 in sqrt(1 - abar) at small t,
    # and ours is the closer one to a float64 reference
    ours = diffusion.q_sample(x0, t, noise, diffusion.make_schedule("linear"))
    ref = diffusion.q_sample(x0.double(), t, noise.double(), diffusion.make_schedule("linear"))
    assert torch.allclose(ours, theirs, atol=5e-6, rtol=0)
    assert (ours.double() - ref).abs().max() <= (theirs.double() - ref).abs().max()


@pytest.mark.parametrize("spacing", ["leading", "trailing", "evenly"])
def test_timestep_subsequence(spacing):
    ts = diffusion.timestep_subsequence(1000, 100, spacing)
    assert len(ts) == 100 and bool((ts[1:] > ts[:-1]).all()) and 0 <= ts[0] and ts[-1] <= 999
    if spacing != "leading":
        assert ts[-1] == 999  # starts from the noisiest step
    if spacing == "leading":
        sched = diffusers.DDPMScheduler()
        sched.set_timesteps(100)
        assert torch.equal(ts, sched.timesteps.flip(0).long())
    with pytest.raises(ValueError, match="steps"):
        diffusion.timestep_subsequence(1000, 0)


def test_trailing_spacing_gives_diffusers_steps_and_exactly_as_many_as_asked():
    """diffusers' float range np.arange(T, 0, -T/steps) holds one value too many for some counts (61, 103, ... of
    T = 1000: the last is index -1); where it holds `steps` values, ours are diffusers' own."""
    sched = diffusers.DDIMScheduler(timestep_spacing="trailing")
    for steps in range(1, 1001):
        ts = diffusion.timestep_subsequence(1000, steps, "trailing")
        assert len(ts) == steps and ts[0] >= 0 and ts[-1] == 999, steps
        sched.set_timesteps(steps)
        if len(sched.timesteps) == steps:
            assert torch.equal(ts, sched.timesteps.flip(0).long()), steps
        else:  # one step too many, the last at index -1
            assert len(sched.timesteps) == steps + 1 and sched.timesteps[-1] == -1, steps


def test_respace_keeps_alphas_cumprod_and_original_times():
    s = diffusion.make_schedule("cosine")
    ts = diffusion.timestep_subsequence(1000, 50)
    r = diffusion.respace(s, ts)
    assert r.T == 50 and torch.allclose(r.alphas_cumprod, s.alphas_cumprod[ts], rtol=1e-12)
    assert torch.equal(r.time_for_model(torch.arange(50)), ts)  # the ORIGINAL indices
    with pytest.raises(ValueError, match="increasing"):
        diffusion.respace(s, torch.tensor([5, 3]))


def test_continuous_schedule_feeds_1000t_and_tracks_discrete():
    c, d = diffusion.make_schedule("linear", continuous=True), diffusion.make_schedule("linear")
    tm = c.time_for_model(torch.tensor([0, 499, 999]))
    assert tm.dtype == torch.float32 and torch.allclose(tm, torch.tensor([1.0, 500.0, 1000.0]))
    # the VP-SDE limit stays within a few percent of the discrete linear schedule
    assert torch.allclose(c.alphas_cumprod[[0, 250, 500]], d.alphas_cumprod[[0, 250, 500]], rtol=0.02)
    cos = diffusion.make_schedule("cosine", continuous=True)
    assert torch.allclose(cos.alpha_bar_at(torch.tensor([0.0])), torch.tensor([1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="continuous"):
        d.alpha_bar_at(torch.tensor([0.5]))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="schedule='quadratic'"):
        diffusion.make_schedule("quadratic")
    with pytest.raises(ValueError, match="prediction='x0'"):
        diffusion.training_loss(lambda x, t: x, torch.zeros(2, 1, 4, 4), diffusion.make_schedule(), prediction="x0")
    with pytest.raises(ValueError, match="sampler='euler'"):
        samplers.sample(lambda x, t: x, (1, 1, 4, 4), diffusion.make_schedule(), sampler="euler")


# --------------------------------------------------------------------------- loss
class Recorder:
    """A fake model: returns a fixed function of its input and records the time values it got."""

    def __init__(self):
        self.times = []

    def __call__(self, x, t):
        self.times.append(t.clone())
        return 0.3 * x + 0.01 * t.float().reshape(-1, 1, 1, 1)


def test_training_loss_is_algorithm_1():
    s = diffusion.make_schedule("linear")
    x0, noise, t = (
        torch.randn(4, 1, 6, 6, generator=gen(3)),
        torch.randn(4, 1, 6, 6, generator=gen(4)),
        torch.tensor([0, 5, 500, 999]),
    )
    model = Recorder()
    loss = diffusion.training_loss(model, x0, s, t=t, noise=noise)
    x_t = diffusion.q_sample(x0, t, noise, s)
    expected = ((model(x_t, t) - noise) ** 2).mean()
    assert torch.allclose(loss, expected, atol=1e-6) and torch.equal(model.times[0], t)
    assert model.times[0].dtype == torch.int64


def test_v_target_and_min_snr_weights():
    s = diffusion.make_schedule("cosine")
    x0, noise, t = (
        torch.randn(3, 1, 4, 4, generator=gen(5)),
        torch.randn(3, 1, 4, 4, generator=gen(6)),
        torch.tensor([10, 400, 900]),
    )
    abar = s.alphas_cumprod[t].float().reshape(-1, 1, 1, 1)
    v = abar.sqrt() * noise - (1 - abar).sqrt() * x0
    zero = lambda x, tt: torch.zeros_like(x)  # noqa: E731
    per = (v**2).flatten(1).mean(1)
    assert torch.allclose(diffusion.training_loss(zero, x0, s, prediction="v", t=t, noise=noise), per.mean(), atol=1e-6)
    snr = abar.flatten() / (1 - abar.flatten())
    w = snr.clamp(max=5) / (snr + 1)
    got = diffusion.training_loss(zero, x0, s, prediction="v", min_snr_gamma=5.0, t=t, noise=noise)
    assert torch.allclose(got, (per * w).mean(), atol=1e-6)


def test_loss_is_seeded_and_continuous_feeds_floats():
    s = diffusion.make_schedule("linear", continuous=True)
    x0 = torch.randn(8, 1, 4, 4, generator=gen(7))
    a, b = Recorder(), Recorder()
    la, lb = diffusion.training_loss(a, x0, s, generator=gen(9)), diffusion.training_loss(b, x0, s, generator=gen(9))
    assert la.item() == lb.item() and a.times[0].dtype == torch.float32
    assert bool(((a.times[0] >= 1.0) & (a.times[0] <= 1000.0)).all())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 999), st.sampled_from(["linear", "cosine"]))
def test_x0_eps_v_roundtrip(t, kind):
    s = diffusion.make_schedule(kind)
    x0, eps = (
        torch.randn(2, 1, 3, 3, generator=gen(t), dtype=torch.float64),
        torch.randn(2, 1, 3, 3, dtype=torch.float64),
    )
    tt = torch.tensor([t, t])
    x_t = diffusion.q_sample(x0, tt, eps, s)
    abar = s.alphas_cumprod[tt]
    x0_hat, eps_hat = diffusion.predict_x0_eps(eps, x_t, abar, "eps")
    assert torch.allclose(eps_hat, eps) and torch.allclose(x0_hat, x0, atol=1e-6 / max(abar[0].item(), 1e-3) ** 0.5)
    v = abar.sqrt().reshape(-1, 1, 1, 1) * eps - (1 - abar).sqrt().reshape(-1, 1, 1, 1) * x0
    x0_v, eps_v = diffusion.predict_x0_eps(v, x_t, abar, "v")
    assert torch.allclose(x0_v, x0, atol=1e-9) and torch.allclose(eps_v, eps, atol=1e-9)


# --------------------------------------------------------------------------- samplers vs diffusers
def float64_scheduler(sched, kind="linear"):
    """diffusers' scheduler running on OUR float64 abar (equal to its own within 1e-6, see above):
    its own step code then runs in float64, without the float32 cancellation in
    1 - abar_t / abar_prev that costs it ~1e-5 at small t."""
    sched.alphas_cumprod = diffusion.make_schedule(kind).alphas_cumprod.clone()
    sched.one = torch.tensor(1.0, dtype=torch.float64)
    if hasattr(sched, "final_alpha_cumprod"):
        sched.final_alpha_cumprod = torch.tensor(1.0, dtype=torch.float64)
    return sched


PRED = {"eps": "epsilon", "v": "v_prediction"}


@pytest.mark.parametrize("kind", ["linear", "cosine"])
@pytest.mark.parametrize("prediction", ["eps", "v"])
def test_ddpm_step_equals_diffusers(kind, prediction):
    make = lambda: diffusers.DDPMScheduler(beta_schedule=DIFFUSERS_SCHEDULE[kind], prediction_type=PRED[prediction])  # noqa: E731
    s32, s64, ours = make(), float64_scheduler(make(), kind), diffusion.make_schedule(kind)
    x, out = torch.randn(3, 1, 5, 5, generator=gen(10)), torch.randn(3, 1, 5, 5, generator=gen(11))
    for t in (999, 998, 500, 100, 10, 1, 0):
        # 1. float64 on both sides: the same formula and the same noise draw from the generator
        theirs = s64.step(out.double(), t, x.double(), generator=gen(12)).prev_sample
        mine, _ = samplers.ddpm_step(out.double(), x.double(), t, ours, generator=gen(12), prediction=prediction)
        assert torch.allclose(mine, theirs, atol=1e-6, rtol=0), (t, (mine - theirs).abs().max())
        # 2. float32 against diffusers as shipped: 1e-6 except near t = 0, where its float32 abar
        #    loses digits (float32 and float64 noise draws differ, so no closer-to comparison here)
        theirs32 = s32.step(out, t, x, generator=gen(12)).prev_sample
        mine32, _ = samplers.ddpm_step(out, x, t, ours, generator=gen(12), prediction=prediction)
        tol = 1e-6 if t >= 500 else 3e-4
        assert torch.allclose(mine32, theirs32, atol=tol, rtol=0), (t, (mine32 - theirs32).abs().max())


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("prediction", ["eps", "v"])
def test_ddim_step_equals_diffusers(eta, prediction):
    s32, s64 = (diffusers.DDIMScheduler(prediction_type=PRED[prediction]) for _ in range(2))
    float64_scheduler(s64)
    for s in (s32, s64):
        s.set_timesteps(50)
    ours = diffusion.respace(diffusion.make_schedule("linear"), s32.timesteps.flip(0))  # diffusers' "leading" 50 steps
    x, out = torch.randn(3, 1, 5, 5, generator=gen(13)), torch.randn(3, 1, 5, 5, generator=gen(14))
    for k in (0, 25, 48, 49):
        t, i = s32.timesteps[k], 49 - k  # position k in diffusers' descending list = our index 49 - k
        theirs = s64.step(out.double(), t, x.double(), eta=eta, generator=gen(15)).prev_sample
        mine, _ = samplers.ddim_step(
            out.double(), x.double(), i, ours, eta=eta, generator=gen(15), prediction=prediction
        )
        assert torch.allclose(mine, theirs, atol=1e-6, rtol=0), (t, (mine - theirs).abs().max())
        theirs32 = s32.step(out, t, x, eta=eta, generator=gen(15)).prev_sample
        mine32, _ = samplers.ddim_step(out, x, i, ours, eta=eta, generator=gen(15), prediction=prediction)
        tol = 1e-6 if t >= 500 else 3e-4
        assert torch.allclose(mine32, theirs32, atol=tol, rtol=0), (t, (mine32 - theirs32).abs().max())


@pytest.mark.parametrize("step", ["ddpm", "ddim"])
def test_noise_scale_multiplies_only_the_added_noise(step):
    """noise_scale s: x_prev = mean + s * sigma z with the same z; s = 0 leaves the mean, s = 1 is the
    diffusers step above; no noise, so no change, at the last step (ancestral) or at eta = 0 (DDIM)."""
    ours = diffusion.make_schedule("cosine")
    x, out = torch.randn(3, 1, 5, 5, generator=gen(20)), torch.randn(3, 1, 5, 5, generator=gen(21))

    def at(i, scale, eta=1.0):
        if step == "ddpm":
            return samplers.ddpm_step(out, x, i, ours, generator=gen(22), noise_scale=scale)[0]
        return samplers.ddim_step(out, x, i, ours, eta=eta, generator=gen(22), noise_scale=scale)[0]

    mean, full, half = at(500, 0.0), at(500, 1.0), at(500, 0.5)
    assert not torch.allclose(full, mean)
    assert torch.allclose(half - mean, 0.5 * (full - mean), atol=1e-6)
    quiet = (lambda s: at(0, s)) if step == "ddpm" else (lambda s: at(500, s, eta=0.0))
    assert torch.equal(quiet(0.5), quiet(1.0))


def test_respaced_ancestral_sampler_equals_diffusers_loop():
    """Whole loop: respaced DDPM (diffusers' "leading" spacing, 20 steps), same model, same generator."""
    sched = diffusers.DDPMScheduler()
    sched.set_timesteps(20)
    model = Recorder()
    ours = samplers.sample(
        model, (2, 1, 4, 4), diffusion.make_schedule(), steps=20, spacing="leading", generator=gen(16)
    )
    g, x = gen(16), None
    x = torch.randn(2, 1, 4, 4, generator=g)
    for t in sched.timesteps:
        x = sched.step(model(x, t.expand(2)), t, x, generator=g).prev_sample
    assert torch.allclose(ours, x, atol=1e-5)
    # the model got the ORIGINAL indices 950, 900, ..., 0, as int64
    assert torch.equal(torch.stack([m[0] for m in model.times[:20]]), sched.timesteps.long())


def test_samplers_are_seeded_and_shaped():
    s, model = diffusion.make_schedule("cosine", 100), (lambda x, t: 0.5 * x)
    for kwargs in ({}, {"steps": 10}, {"sampler": "ddim", "steps": 10}, {"sampler": "ddim", "steps": 10, "eta": 1.0}):
        a = samplers.sample(model, (2, 1, 4, 4), s, generator=gen(1), **kwargs)
        b = samplers.sample(model, (2, 1, 4, 4), s, generator=gen(1), **kwargs)
        assert a.shape == (2, 1, 4, 4) and torch.equal(a, b) and torch.isfinite(a).all()
    c = samplers.sample(model, (2, 1, 4, 4), s, generator=gen(2), steps=10)
    assert not torch.equal(a, c)


def test_sampler_recovers_a_known_gaussian():
    """With the exact eps-predictor for data ~ N(0, 0.25 I), DDIM and DDPM samples have std ~0.5."""
    s = diffusion.make_schedule("linear", 200)

    def exact_eps(x, t):
        abar = s.alphas_cumprod[t.long()].float().reshape(-1, 1, 1, 1)
        return (1 - abar).sqrt() * x / (0.25 * abar + 1 - abar)

    for sampler in ("ddpm", "ddim"):
        x = samplers.sample(exact_eps, (4000, 1, 1, 1), s, sampler=sampler, steps=50, generator=gen(3), clip_x0=False)
        assert abs(x.std().item() - 0.5) < 0.03, (sampler, x.std())


@settings(max_examples=20, deadline=None)
@given(mean=st.floats(-3, 2), std=st.floats(0.3, 1.5), schedule=st.sampled_from(["linear", "cosine"]))
def test_lognormal_draws_follow_their_distribution_in_sigma(mean, std, schedule):
    """EDM's training noise levels on a discrete schedule: ln sigma of the drawn steps has the asked mean and
    std wherever the schedule's range does not clip them."""
    s = diffusion.make_schedule(schedule)
    log_sigma = 0.5 * ((1 - s.alphas_cumprod) / s.alphas_cumprod).log()
    t = diffusion.draw_timesteps(s, 20000, torch.Generator().manual_seed(0), "cpu", (mean, std))
    assert t.dtype == torch.int64 and 0 <= t.min() and t.max() < s.T
    inside = (log_sigma[t] > log_sigma[0] + 0.5) & (log_sigma[t] < log_sigma[-1] - 0.5)
    if inside.float().mean() > 0.99:  # the distribution sits inside the schedule's range
        assert abs(log_sigma[t].mean() - mean) < 0.05 and abs(log_sigma[t].std() - std) < 0.05


def test_uniform_draws_are_the_ones_before_lognormal_existed():
    s = diffusion.make_schedule("cosine")
    drawn = diffusion.draw_timesteps(s, 64, torch.Generator().manual_seed(5), "cpu", None)
    assert torch.equal(drawn, torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(5)))


def test_a_schedule_moved_to_a_device_keeps_its_numbers_and_leaves_the_original_on_the_cpu():
    schedule = diffusion.make_schedule("cosine", 50)
    on_meta = schedule.to("meta")  # the shapes and dtypes a GPU copy gets, without a GPU
    names = ("betas", "model_t", "alphas", "alphas_cumprod", "alphas_cumprod_prev")
    for name in names:
        moved, kept = getattr(on_meta, name), getattr(schedule, name)
        assert moved.device.type == "meta" and moved.dtype == torch.float64 and moved.shape == kept.shape
        assert kept.device.type == "cpu"
        assert torch.equal(getattr(schedule.to("cpu"), name), kept)
    assert on_meta.T == schedule.T and on_meta.integer_time and on_meta.continuous is None
    x0, t, noise = torch.rand(4, 1, 8, 8), torch.tensor([0, 7, 30, 49]), torch.randn(4, 1, 8, 8)
    loss = diffusion.training_loss(lambda x, tm: x * 0.5, x0, schedule, t=t, noise=noise)
    assert torch.equal(diffusion.training_loss(lambda x, tm: x * 0.5, x0, schedule.to("cpu"), t=t, noise=noise), loss)


def test_a_cpu_table_is_gathered_where_the_index_is_in_the_devices_widest_float():
    table = diffusion.make_schedule("cosine", 50).alphas_cumprod
    on_meta = diffusion.gather(table, torch.zeros(6, dtype=torch.long, device="meta"))  # an accelerator's index
    assert on_meta.is_meta and on_meta.dtype == torch.float64 and on_meta.shape == (6,)
    assert diffusion.wide_dtype(torch.device("mps")) == torch.float32  # Apple's MPS has no float64
    assert diffusion.wide_dtype(torch.device("cuda")) == diffusion.wide_dtype(torch.device("cpu")) == torch.float64
