"""Every device the package runs on: the accelerator path (no value read, no host sync) tested on the CPU by making
tensors report that they are not on the CPU, and the real thing on CUDA (skipped without it)."""

import collections
import contextlib
import functools
import warnings
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from timestep_embed import (
    FourierEmbedding,
    LowPrecisionTimestepWarning,
    SinusoidalEmbedding,
    TimestepEmbedder,
    get_timestep_embedding,
    set_value_checks,
    sinusoidal_embedding,
)
from timestep_embed.cli import main
from timestep_embed.ddpm import (
    ConsistencyConfig,
    RunConfig,
    TrainingDiverged,
    UNet,
    consistency,
    diffusion,
    run_training,
)
from timestep_embed.ddpm.consistency import consistency_loss
from timestep_embed.ddpm.data import random_shifts
from timestep_embed.ddpm.diffusion import schedule_from_config, to_device, training_loss
from timestep_embed.ddpm.samplers import sample
from timestep_embed.nn import time_input

from .fixtures.devices import accelerator_path, counted_reads

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
QUIET = ["eval.enabled=false", "sample.num_samples=4", "sample.batch_size=4", "sample.steps=2", "train.bf16=false"]


@pytest.fixture
def on_accelerator():
    with accelerator_path():
        yield


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
@pytest.mark.parametrize("n", [1, 64, 4096, 20000])
def test_the_accelerator_path_reads_nothing_and_gives_the_same_bits(n, dtype):
    t = (torch.arange(n) % 7 * 100).to(dtype)  # few distinct values: the CPU would reuse them
    embedder = TimestepEmbedder(64, num_timesteps=1000)
    with accelerator_path(), counted_reads() as reads:
        got = get_timestep_embedding(t, 320, True, 0)
        embedded = embedder(t)
        cached = SinusoidalEmbedding(32, num_timesteps=1000)(t)
    assert sum(reads.values()) == 0, reads
    # the same numbers as the host path (its reuse of distinct values and its row blocks are bit-exact)
    assert torch.equal(got, sinusoidal_embedding(t, 320, "adm"))
    assert torch.equal(cached, SinusoidalEmbedding(32, num_timesteps=1000)(t))
    assert torch.allclose(embedded, embedder(t), atol=1e-6)  # the matrix multiply rounds by its row count


def test_the_accelerator_path_of_the_fourier_features_and_the_time_input_reads_nothing(on_accelerator):
    with counted_reads() as reads:
        FourierEmbedding(16, log=True)(torch.rand(100) + 0.1)
        time_input(torch.rand(100) + 0.1, "quarter_log")
    assert sum(reads.values()) == 0, reads


def test_value_checks_all_reads_accelerator_tensors_and_refuses_bad_values(on_accelerator):
    assert get_timestep_embedding(torch.tensor([float("nan")]), 8).isnan().any()  # as diffusers: not read
    previous = set_value_checks("all")
    try:
        with pytest.raises(ValueError, match="finite"):
            get_timestep_embedding(torch.tensor([float("nan")]), 8)
        with pytest.raises(ValueError, match=r"t must be > 0"):
            time_input(torch.tensor([0.0, 1.0]), "quarter_log")
    finally:
        set_value_checks(previous)
    with pytest.raises(ValueError, match="mode must be one of"):
        set_value_checks("sometimes")


@pytest.mark.parametrize("n", [8, 5000])
def test_value_checks_all_reads_an_accelerator_tensor_once_a_call_and_reuses_nothing(n, on_accelerator):
    t = torch.arange(n) % 7 * 100  # few distinct values: on the host they would be embedded once and gathered
    calls = {
        "function": lambda: get_timestep_embedding(t.float(), 320, True, 0),
        "function, float16": lambda: get_timestep_embedding(t.half(), 320, True, 0),  # also the rounding test
        "function, bfloat16": lambda: get_timestep_embedding(t.bfloat16() / 64, 320, True, 0),
        "module": lambda: SinusoidalEmbedding(32, num_timesteps=1000)(t),
        "fourier": lambda: FourierEmbedding(16, log=True)(t.float() + 1),
    }
    previous = set_value_checks("all")
    try:
        for name, call in calls.items():
            with counted_reads() as reads, warnings.catch_warnings():
                warnings.simplefilter("ignore", LowPrecisionTimestepWarning)
                call()
            assert dict(reads) == {"tolist": 1}, (name, reads)  # min and max in one read, no distinct values
        with pytest.raises(ValueError, match="x must be > 0 with log=True"):
            FourierEmbedding(16, log=True)(t.float())
        with pytest.warns(LowPrecisionTimestepWarning, match="with fractional values"):  # from the one read
            get_timestep_embedding(t.half() + 0.5, 8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            get_timestep_embedding(t.half(), 8)  # whole numbers up to 600: float16 holds them exactly
    finally:
        set_value_checks(previous)


def test_the_integer_step_cache_keeps_no_rows_for_accelerator_tensors(on_accelerator):
    module = SinusoidalEmbedding(16, num_timesteps=100)
    assert torch.equal(module(torch.tensor([0, 5, 99])), sinusoidal_embedding(torch.tensor([0, 5, 99]), 16))
    assert module._rows is None  # its rows live on the CPU: a GPU tensor would gather from another device


def test_half_precision_timesteps_on_an_accelerator_warn_by_their_dtype(on_accelerator):
    with pytest.warns(LowPrecisionTimestepWarning, match="on an accelerator"):
        sinusoidal_embedding(torch.tensor([10.0]).bfloat16(), 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sinusoidal_embedding(torch.tensor([10.0]), 8)  # float32: no warning


def test_the_cpu_module_cache_reads_no_value_and_leaves_out_of_range_steps_to_the_core():
    module = SinusoidalEmbedding(16, num_timesteps=100)
    inside, outside = torch.tensor([0, 5, 99]), torch.tensor([5, 100, -1])
    module(inside)  # the first call computes the rows of 0 .. 99 (and checks those, once)
    with counted_reads() as reads:
        got = module(inside)
    assert sum(reads.values()) == 0, reads
    assert torch.equal(got, sinusoidal_embedding(inside, 16))
    assert torch.equal(module(outside), sinusoidal_embedding(outside, 16))
    assert torch.equal(module(inside[None]), sinusoidal_embedding(inside[None], 16))


@contextlib.contextmanager
def counted_host_copies():
    """Count the copies of a CPU tensor to another device (``Tensor.to``): in a step replayed as a CUDA graph
    (``train.compile=step-graph``) such a copy would be captured once, with the values of the capture."""
    counts: collections.Counter = collections.Counter()
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        counts["cpu -> device"] += self.device.type == "cpu" and out.device.type != "cpu"
        return out

    torch.Tensor.to = to
    try:
        yield counts
    finally:
        torch.Tensor.to = original


OBJECTIVES = {
    "eps, Min-SNR": ["diffusion.min_snr_gamma=5"],
    "log-normal steps": ["diffusion.lognormal_mean=-1.2"],
    "v": ["diffusion.prediction=v"],
    "continuous time": ["diffusion.continuous=true"],
    "flow": ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"],
    "consistency, ect": ["ect"],
    "consistency, cd": ["cd"],
}


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_every_training_objective_runs_on_meta_tensors_with_nothing_from_the_host(objective):
    """A training step's loss and backward with the model, the data and the schedule on the meta device (no
    values: a read raises): what a step needs is on the device before it, so it can be captured whole."""
    overrides, consistency = OBJECTIVES[objective], objective.startswith("consistency")
    d = RunConfig.load(SMOKE, [] if consistency else overrides).diffusion
    model, x0 = UNet(RunConfig.load(SMOKE).model).to("meta"), torch.empty(4, 1, 28, 28, device="meta")
    schedule = schedule_from_config(d).to("meta")
    with counted_host_copies() as copies:
        if consistency:
            loss = consistency_loss(model, x0, schedule, ConsistencyConfig(method=overrides[0]), 1, teacher=model)
        else:
            loss = training_loss(model, x0, schedule, prediction=d.prediction, min_snr_gamma=d.min_snr_gamma,
                                 lognormal=d.lognormal)  # fmt: skip
        loss.backward()
    assert loss.device.type == "meta" and copies["cpu -> device"] == 0


def test_the_shift_augmentation_runs_on_meta_tensors_with_nothing_from_the_host():
    """model.augment's part of a step, random_shifts and the UNet told the shift, on the meta device as above."""
    cfg = RunConfig.load(SMOKE, ["model.augment=0.5"])
    model, x0 = UNet(cfg.model).to("meta"), torch.empty(4, 1, 28, 28, device="meta")
    schedule = schedule_from_config(cfg.diffusion).to("meta")
    with counted_host_copies() as copies:
        moved, shift = random_shifts(x0, cfg.model.augment)
        loss = training_loss(functools.partial(model, shift=shift), moved, schedule)
        loss.backward()
    assert loss.device.type == "meta" and copies["cpu -> device"] == 0


SAMPLERS = {  # name: (config overrides, sample()'s arguments)
    "ddpm": ([], dict(sampler="ddpm")),
    "ddpm, v, continuous time": (["diffusion.prediction=v", "diffusion.continuous=true"], dict(prediction="v")),
    "ddim, eta 0": ([], dict(sampler="ddim")),
    "ddim, eta 1": ([], dict(sampler="ddim", eta=1.0)),
    "dpm++2m, karras": ([], dict(sampler="dpm++2m", spacing="karras")),
    "heun": ([], dict(sampler="heun")),
    "consistency": ([], dict(sampler="consistency")),
    "euler": ([], dict(sampler="euler", prediction="flow")),  # it reads no schedule
}


def sampling(name: str, device: str = "meta"):
    """(model, schedule, sample()'s arguments) of a SAMPLERS row: the smoke UNet (seed 0, its weights moved off their
    init: the output layer starts at zero, and a model that outputs zeros compares nothing) on ``device``."""
    overrides, kwargs = SAMPLERS[name]
    schedule = schedule_from_config(RunConfig.load(SMOKE, ["diffusion.num_timesteps=20", *overrides]).diffusion)
    torch.manual_seed(0)
    model = UNet(RunConfig.load(SMOKE).model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape))
    return model.to(device).eval(), schedule, dict(kwargs, device=device)


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_every_sampler_runs_on_meta_tensors_with_nothing_from_the_host_per_step(sampler):
    """A sampling loop with the model and the noise on the meta device (no values: a read raises): 3 steps and 6 make
    the same copies from the host, so a step makes none (the schedule's five tables may go to the device once)."""
    (model, schedule, kwargs), copies = sampling(sampler), []
    for steps in (3, 6):
        with counted_host_copies() as counts:
            assert sample(model, (2, 1, 28, 28), schedule, steps=steps, **kwargs).device.type == "meta"
        copies.append(counts["cpu -> device"])
    assert copies[0] == copies[1] <= 5, copies


class Float64OnDevices(TorchFunctionMode):
    """Records the operations whose output is a float64 tensor off the CPU."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and o.dtype == torch.float64 and o.device.type != "cpu":
                self.seen.append(getattr(func, "__name__", str(func)))
        return out


@pytest.mark.parametrize("what", [*(f"training, {o}" for o in OBJECTIVES), *(f"sampling, {s}" for s in SAMPLERS)])
def test_on_a_device_without_float64_no_float64_tensor_is_made_there(what, monkeypatch):
    """Apple's MPS has no float64: where `wide_dtype` says float32 for the device (here the meta device stands in),
    the training objectives and the samplers make no float64 tensor on it."""
    for module in (diffusion, consistency):
        monkeypatch.setattr(
            module, "wide_dtype", lambda device: torch.float32 if device.type != "cpu" else torch.float64
        )
    kind, name = what.split(", ", 1)
    model, schedule, kwargs = sampling(name) if kind == "sampling" else (None, None, {})
    with Float64OnDevices() as mode:
        if kind == "sampling":
            sample(model, (2, 1, 28, 28), schedule, steps=3, **kwargs)
        else:
            test_every_training_objective_runs_on_meta_tensors_with_nothing_from_the_host(name)
    assert mode.seen == []


def test_only_a_copy_from_the_cpu_to_cuda_skips_the_wait(monkeypatch):
    """`to_device`: non-blocking from the CPU to CUDA only (to the host it may return before the data is there; to MPS
    it may read freed memory, pytorch/pytorch#139550)."""
    calls = []

    def record(self, device, dtype=None, non_blocking=False):
        calls.append((self.device.type, torch.device(device).type, non_blocking))
        return self

    monkeypatch.setattr(torch.Tensor, "to", record)
    for source in (torch.zeros(1), torch.zeros(1, device="meta")):
        for target in ("cpu", "cuda", "mps", "meta"):
            to_device(source, target)
    assert len(calls) == 8 and [c[:2] for c in calls if c[2]] == [("cpu", "cuda")]


@pytest.mark.parametrize("device_path", [False, True])
def test_the_training_loop_reads_the_device_at_log_lines_only(tmp_path, device_path):
    """Between two log lines (steps 2-24 of log_every=25) a step reads nothing, on either path (images shifted too)."""
    reads_per_step = []
    state = {"before": None}

    def watch(step, *_):
        total = sum(counts.values())
        if state["before"] is not None:
            reads_per_step.append(total - state["before"])
        state["before"] = total

    with accelerator_path() if device_path else contextlib.nullcontext(), counted_reads() as counts:
        overrides = [*QUIET, "train.steps=24", "train.log_every=25", "train.snapshot_every=0", "model.augment=0.5"]
        run_training(SMOKE, tmp_path / "run", overrides=overrides, progress=False, callback=watch)
    assert len(reads_per_step) == 23 and sum(reads_per_step) == 0, reads_per_step


def test_a_diverging_run_stops_at_a_log_line_naming_the_step_and_the_setting(tmp_path):
    diverged = r"gradient norm (nan|inf) at step \d+: the run diverged.*train\.lr"
    with pytest.raises(TrainingDiverged, match=diverged):
        run_training(SMOKE, tmp_path / "run", overrides=[*QUIET, "train.lr=1e10", "train.log_every=1"], progress=False)
    assert not (tmp_path / "run" / "metrics.json").exists()


# ---------------------------------------------------------------------------------------------- CUDA itself
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@contextlib.contextmanager
def syncs_are_errors():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
@cuda
def test_on_cuda_the_function_and_the_module_make_no_host_sync():
    embedder = TimestepEmbedder(1280, sinusoid_dim=320, num_timesteps=1000).cuda()  # with the CPU's step cache
    for dtype in (torch.int64, torch.float32, torch.bfloat16):
        t = torch.arange(4096, device="cuda").to(dtype)
        get_timestep_embedding(t, 320, True, 0), embedder(t)  # warm-up: the cached frequencies
        with syncs_are_errors(), warnings.catch_warnings():
            warnings.simplefilter("ignore", LowPrecisionTimestepWarning)
            get_timestep_embedding(t, 320, True, 0)
            embedder(t)


@pytest.mark.cuda
@cuda
def test_on_cuda_fifty_training_steps_between_log_lines_make_no_host_sync(tmp_path):
    def watch(step, *_):
        if step == 20:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        if step == 70:
            torch.cuda.set_sync_debug_mode("default")

    try:
        run_training(SMOKE, tmp_path / "run", overrides=[*QUIET, "train.steps=80", "train.log_every=100",
                     "train.snapshot_every=0", "train.device=cuda", "model.augment=0.5"],
                     progress=False, callback=watch)  # fmt: skip
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_gpu_config_asks_for_cuda_by_name_and_writes_nothing_without_it(tmp_path, capsys):
    assert main(["train", "--config", "mnist-gpu", "--out-dir", str(tmp_path / "run")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1, errors
    assert "device 'cuda' (train.device, or --device): this torch build sees no cuda" in errors[0], errors
    assert not (tmp_path / "run").exists()


def test_the_gpu_config_is_the_run_the_docs_describe():
    cfg = RunConfig.load("mnist-gpu")
    model = (cfg.model.channels, cfg.model.num_res_blocks, cfg.model.dropout, cfg.model.augment)
    assert model == ((64, 128), 2, 0.1, 0.5) and cfg.train.batch_size == 512
    assert (cfg.train.minutes, cfg.train.device, cfg.sample.num_samples, cfg.eval.samplings) == (3, "cuda", 10000, 3)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_on_cuda_every_sampler_makes_no_host_sync_and_the_deterministic_ones_give_the_cpu_result(sampler):
    model, schedule, kwargs = sampling(sampler, "cuda")
    x_T, generator = torch.randn(2, 1, 28, 28, device="cuda"), torch.Generator("cuda").manual_seed(0)
    sample(model, (2, 1, 28, 28), schedule, steps=3, x_T=x_T, generator=generator, **kwargs)  # cuDNN's set-up
    with syncs_are_errors():
        x = sample(model, (2, 1, 28, 28), schedule, steps=3, x_T=x_T, generator=generator, **kwargs)
    assert x.is_cuda and bool(x.isfinite().all())
    if "eta" not in kwargs and kwargs.get("sampler") in ("ddim", "dpm++2m", "heun", "euler"):  # no noise drawn
        cpu_model, _, cpu_kwargs = sampling(sampler, "cpu")
        on_cpu = sample(cpu_model, (2, 1, 28, 28), schedule, steps=3, x_T=x_T.cpu(), **cpu_kwargs)
        assert torch.allclose(x.cpu(), on_cpu, atol=1e-2), (x.cpu() - on_cpu).abs().max()
