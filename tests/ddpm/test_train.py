"""The training run end to end on the smoke config: run folder, exact --resume that redoes what is
missing, Ctrl-C, the callback, the budget, bad input, DDP."""

import copy
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from timestep_embed.cli import main
from timestep_embed.ddpm import (
    CheckpointError,
    ConfigError,
    DataError,
    RunConfig,
    UNet,
    adamw,
    describe_sampling,
    distill_run,
    load_model,
    run_training,
    train_loop,
    update_ema,
)
from timestep_embed.ddpm import checkpoint as checkpoint_file
from timestep_embed.ddpm import runtime as runtime_module
from timestep_embed.ddpm import train as train_module
from timestep_embed.ddpm.runlog import TrainingLog
from timestep_embed.ddpm.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
FAST = [
    "eval.enabled=false",
    "sample.num_samples=4",
    "sample.batch_size=4",
    "sample.steps=3",
    "train.bf16=false",
    "train.threads=1",
]


def fast(*extra: str) -> list[str]:
    """FAST with ``extra`` overrides in place of its own for the same keys (a key may be given once)."""
    keys = {e.partition("=")[0] for e in extra}
    return [o for o in FAST if o.partition("=")[0] not in keys] + list(extra)


def test_configs_load_and_the_default_one_is_the_defaults():
    default = RunConfig.load(ROOT / "configs" / "mnist.yaml")
    assert default.train.minutes is not None and default.sample.num_samples == 500
    assert RunConfig.load(None) == default == RunConfig()  # the dataclass defaults are the default run
    assert RunConfig.load(SMOKE).train.steps == 20


def test_the_caption_names_the_noise_scale_where_a_sampler_adds_noise():
    assert "noise x0.95, seed 0" in describe_sampling(RunConfig.load(None))  # the default run's ancestral steps
    assert "noise x" not in describe_sampling(RunConfig.load(None, ["sample.noise_scale=1"]))
    ode = ["sample.sampler=dpm++2m", "sample.spacing=karras"]  # adds no noise: the scale does not apply
    assert "noise x" not in describe_sampling(RunConfig.load(None, ode))
    assert "noise x0.9," in describe_sampling(
        RunConfig.load(None, ["sample.sampler=ddim", "sample.eta=1", "sample.noise_scale=0.9"])
    )


def test_smoke_pipeline_writes_the_run_folder(tmp_path):
    metrics = run_training(SMOKE, tmp_path / "run", progress=False)
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {
        "config.yaml",
        "checkpoint.safetensors",
        "log.jsonl",
        "loss_curve.png",
        "samples.npy",
        "samples.png",
        "metrics.json",
        "snapshot_000010.png",
        "snapshot_000020.png",
    } <= names
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for key in ("fd", "entropy", "confidence", "real_fd", "noise_fd", "train_steps", "steps_per_s"):
        assert key in metrics and key in on_disk
    assert metrics["train_steps"] == 20
    samples = np.load(tmp_path / "run" / "samples.npy")
    assert samples.shape == (20, 1, 28, 28) and samples.min() >= -1 and samples.max() <= 1
    # the `sample` CLI reads the run back, without touching the run's scored samples
    out = tmp_path / "more"
    assert main(["sample", str(tmp_path / "run"), "sample.num_samples=3", "sample.steps=2", "--out", str(out)]) == 0
    assert np.load(tmp_path / "more.npy").shape == (3, 1, 28, 28) and (tmp_path / "more.png").is_file()
    assert np.array_equal(np.load(tmp_path / "run" / "samples.npy"), samples)


def _weights(run: Path) -> dict:
    tensors, meta = checkpoint_file.load_checkpoint(run / "checkpoint.safetensors")
    return {k: v for k, v in tensors.items() if k.startswith(("model.", "ema.", "optim."))}, meta


def test_resume_is_exact(tmp_path):
    straight = run_training(SMOKE, tmp_path / "a", overrides=FAST, progress=False)
    first = run_training(SMOKE, tmp_path / "b", overrides=FAST, progress=False, callback=lambda step, *_: step >= 10)
    assert first["train_steps"] == 10 and not first["finished"]
    resumed = run_training(SMOKE, tmp_path / "b", overrides=FAST, progress=False, resume=True)
    assert straight["train_steps"] == resumed["train_steps"] == 20
    (wa, ma), (wb, mb) = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert ma["step"] == mb["step"] == 20 and wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert np.array_equal(np.load(tmp_path / "a" / "samples.npy"), np.load(tmp_path / "b" / "samples.npy"))


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    class InterruptAt(nn.Module):  # a time embedder that "presses Ctrl-C" at its 6th call
        def __init__(self):
            super().__init__()
            self.lin, self.calls = nn.Linear(1, 32), 0

        def forward(self, t):
            self.calls += 1
            if self.calls == 6:
                raise KeyboardInterrupt
            return self.lin(t.float()[:, None] / 1000)

    metrics = run_training(SMOKE, tmp_path / "r", InterruptAt(), FAST, progress=False)
    assert metrics["interrupted"] and metrics["train_steps"] == 5
    assert checkpoint_file.read_metadata(tmp_path / "r" / "checkpoint.safetensors")["step"] == 5
    assert not (tmp_path / "r" / "samples.npy").exists()


def test_bad_config_is_a_clear_error_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match="train.lrr"):
        run_training(SMOKE, tmp_path / "x", overrides=["train.lrr=1"], progress=False)
    with pytest.raises(ConfigError, match="train.steps"):
        run_training(SMOKE, tmp_path / "x", overrides=["train.steps=ten"], progress=False)
    with pytest.raises(ValueError, match="model.channels"):
        run_training(SMOKE, tmp_path / "x", overrides=["model.channels=[8,16,32]"], progress=False)
    with pytest.raises(ValueError, match="train.minutes"):
        run_training(SMOKE, tmp_path / "x", overrides=["train.minutes=1", "train.steps=5"], progress=False)
    with pytest.raises(DataError, match="nowhere"):
        run_training(SMOKE, tmp_path / "x", overrides=["data.source=/nowhere"], progress=False)
    assert not (tmp_path / "x").exists()
    assert main(["train", "--config", SMOKE, "--out-dir", str(tmp_path / "x"), "train.nope=1", "--quiet"]) == 2


def test_existing_run_and_corrupt_checkpoint_are_not_overwritten(tmp_path):
    run = tmp_path / "r"
    run_training(SMOKE, run, overrides=fast("train.steps=2"), progress=False)
    file = run / "checkpoint.safetensors"
    good = file.read_bytes()
    with pytest.raises(FileExistsError, match="--resume"):
        run_training(SMOKE, run, overrides=FAST, progress=False)
    file.write_bytes(good[: len(good) // 2])  # truncated, as by a crash outside our atomic writer
    with pytest.raises(CheckpointError, match="truncated"):
        run_training(SMOKE, run, overrides=FAST, progress=False, resume=True)
    assert file.read_bytes() == good[: len(good) // 2]
    assert main(["sample", str(file)]) == 2


WORKER = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from safetensors.torch import save_file
    from timestep_embed.ddpm import RunConfig, UNet, distill_config, train_loop
    from timestep_embed.ddpm.runtime import setup, cleanup
    out, overrides = Path(sys.argv[2]), sys.argv[4:]
    if sys.argv[3] == "distill":  # a teacher of the model.* overrides (the student starts from its random init)
        model = [o for o in overrides if o.startswith("model.")]
        cfg = distill_config(RunConfig.load(sys.argv[1], model), [o for o in overrides if o not in model])
    else:
        cfg = RunConfig.load(sys.argv[1], overrides)
    rt = setup("cpu", False)
    torch.manual_seed(0)
    model = UNet(cfg.model)
    ema, stats = train_loop(cfg, rt, model, out, progress=False)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / f"rank{rt.rank}.safetensors"))
    cleanup()
""")


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
@pytest.mark.parametrize("objective", ["train", "distill"])
def test_ddp_two_cpu_processes_keep_identical_weights(tmp_path, objective):
    """Distilling a run trained with model.augment: its UNet's shift_embed gets no gradient, which DDP refuses
    unless the loop freezes it."""
    from safetensors.torch import load_file

    (tmp_path / "worker.py").write_text(WORKER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        str(tmp_path / "worker.py"),
        SMOKE,
        str(tmp_path),
        objective,
        *(["model.augment=0.5"] if objective == "distill" else []),  # the teacher's
        "train.steps=4",
        "train.threads=1",
        "train.bf16=false",
        "train.batch_size=8",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    a, b = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert checkpoint_file.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 4  # written by rank 0
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in a.items() if "conv2" in k)  # it trained


def test_resumed_ranks_other_than_0_draw_from_their_own_generators(tmp_path, monkeypatch):
    """Rank 0 writes the checkpoint, so it holds rank 0's generators: resumed, every other rank reseeds its own (the
    loop's and the global one, dropout's) from its rank and the step, so no two ranks draw the same batches, t, noise
    and dropout masks."""
    overrides = fast("train.steps=4", "train.log_every=2", "train.snapshot_every=0")
    run_training(SMOKE, tmp_path, overrides=overrides, progress=False, callback=lambda step, *_: step >= 2)
    cfg, loops, globals_ = RunConfig.load(SMOKE, overrides), [], []

    def remember(path, model, ema, opt, generator, **kwargs):
        loops.append(generator)
        return checkpoint_file.load_training_state(path, model, ema, opt, generator, **kwargs)

    monkeypatch.setattr(train_module, "load_training_state", remember)
    for rank in (1, 2, 0):  # the others write nothing; rank 0 last, as it writes the folder
        torch.manual_seed(cfg.train.seed)
        rt, model = Runtime(torch.device("cpu"), rank=rank), UNet(cfg.model)
        seen = lambda step, *_: step == 3 and globals_.append(torch.get_rng_state())  # noqa: E731
        train_module.train_loop(cfg, rt, model, tmp_path, resume=True, progress=False, callback=seen)
    for states in ([g.get_state() for g in loops], globals_):
        assert len(states) == 3 and not any(torch.equal(states[i], states[j]) for i, j in ((0, 1), (0, 2), (1, 2)))
    fresh = []  # started afresh too, each rank's global RNG (dropout's) is its own
    for rank in (0, 1):
        first = lambda *_: fresh.append(torch.get_rng_state()) or True  # noqa: E731 - then stop
        rt, model, out = Runtime(torch.device("cpu"), rank=rank), UNet(cfg.model), tmp_path / f"r{rank}"
        out.mkdir()
        train_module.train_loop(cfg, rt, model, out, progress=False, callback=first)
    assert len(fresh) == 2 and not torch.equal(*fresh)


def test_a_time_budget_runs_on_the_wall_clock(monkeypatch):
    """``train.minutes`` counts the wall clock since training began (plus what a resumed run had used),
    so a paused machine or time spent outside the steps (snapshots, checkpoints) is counted too."""
    cfg = RunConfig.load(SMOKE, ["train.minutes=10"])
    now = [1000.0]
    monkeypatch.setattr(train_module.time, "time", lambda: now[0])
    budget = train_module.Budget(cfg.train, Runtime.create("cpu", False), elapsed=120.0)
    assert budget.progress(0) == pytest.approx(0.2)
    now[0] += 240
    assert budget.progress(5) == pytest.approx(0.6) and budget.elapsed == pytest.approx(360)
    now[0] += 240
    assert budget.progress(6) >= 1
    steps = train_module.Budget(RunConfig.load(SMOKE).train, Runtime.create("cpu", False), 0.0)
    assert steps.progress(10) == 0.5 and steps.progress(20) == 1.0


def test_with_several_processes_the_clock_is_broadcast_every_log_line_only(monkeypatch):
    """Rank 0's clock reaches the other ranks by a broadcast, a host sync: at log lines, not at every step."""
    cfg = RunConfig.load(SMOKE, ["train.minutes=10", "train.log_every=25"])
    now, sent = [1000.0], []

    def broadcast(value, rt):
        sent.append(value)
        return value

    monkeypatch.setattr(train_module.time, "time", lambda: now[0])
    monkeypatch.setattr(train_module, "broadcast_float", broadcast)
    budget = train_module.Budget(cfg.train, Runtime(torch.device("cpu"), world_size=2), elapsed=0.0)
    seen = []
    for step in range(100):  # the loop asks before and after each step
        now[0] += 3.0
        seen += [budget.progress(step), budget.progress(step + 1)]
    assert sent == pytest.approx([0.005, 0.125, 0.25, 0.375, 0.5])  # steps 0, 25, 50, 75, 100 and seen[-1] == sent[-1]
    assert sorted(seen) == seen  # it holds between broadcasts and never goes back


def test_a_checkpoints_finiteness_check_keeps_the_log_lines_window(tmp_path):
    """The check before a periodic checkpoint reads the loss but starts no new window: the next log line is
    still the mean of every step since the last line."""
    t = RunConfig.load(SMOKE, ["train.log_every=4"]).train
    logbook = TrainingLog(tmp_path, t, 0, 0.0, show=False)
    for step, loss in enumerate([1.0, 2.0, 4.0, 6.0, 8.0, 10.0], 1):
        logbook.step(step, torch.tensor(loss), 1e-3, torch.tensor(0.5), float(step))
        if step == 3:
            assert logbook.read(step, torch.tensor(0.5), new_window=False) == (3.0, 0.5)  # steps 2-3
    logbook.close()
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in lines] == [(1, 1.0), (4, 4.0)]  # steps 2-4: (2 + 4 + 6) / 3


def test_the_training_optimizer_is_fused_and_takes_the_same_steps():
    """On this torch the CPU gets AdamW's fused kernel; ten steps of it equal the per-tensor loop's."""
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Linear(6, 5), nn.SiLU(), nn.Linear(5, 3)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    start = nets[0][0].weight.detach().clone()
    fused = adamw(nets[0].parameters(), 1e-2, weight_decay=0.1, betas=(0.9, 0.99))
    plain = torch.optim.AdamW(nets[1].parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.99))
    assert fused.defaults["fused"] and not plain.defaults["fused"]
    for _ in range(10):
        x = torch.randn(8, 6)
        for net, opt in zip(nets, (fused, plain), strict=True):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert (nets[0][0].weight - start).abs().max() > 1e-2  # the steps moved the weights
    ema = copy.deepcopy(nets[0]).requires_grad_(False)
    update_ema(ema, nets[0], 5, 0.999)  # outside autograd: no graph grows across steps
    assert not any(p.requires_grad or p.grad_fn for p in ema.parameters())


def test_export_writes_the_ema_weights_and_they_sample_the_same(tmp_path):
    run = tmp_path / "run"
    run_training(SMOKE, run, overrides=fast("train.steps=3"), progress=False)
    assert main(["export", str(run), "--out", str(tmp_path / "ema"), "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "ema").iterdir()) == ["config.json", "model.safetensors"]
    assert (tmp_path / "ema" / "model.safetensors").stat().st_size < (run / "checkpoint.safetensors").stat().st_size / 3
    ema, cfg = load_model(run)
    exported = UNet.from_pretrained(tmp_path / "ema")
    x, t = torch.randn(2, 1, 28, 28), torch.tensor([3, 900])
    with torch.no_grad():
        assert torch.equal(exported(x, t), ema(x, t))
    again, cfg2 = load_model(tmp_path / "ema")
    assert cfg2 == cfg
    assert main(["export", str(run), "--out", str(tmp_path / "ema")]) == 2  # no silent overwrite
    out = tmp_path / "from_export"
    assert main(["sample", str(tmp_path / "ema"), "sample.num_samples=2", "sample.steps=2", "--out", str(out)]) == 0
    assert np.load(tmp_path / "from_export.npy").shape == (2, 1, 28, 28)


def test_tensorboard_gets_the_logged_scalars_and_the_snapshots(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "run"
    args = ["train", "--config", SMOKE, "--out-dir", str(out), "--quiet"]
    assert (
        main([*args, *fast("train.steps=4", "train.log_every=2", "train.snapshot_every=2", "train.tensorboard=true")])
        == 0
    )
    board = event_accumulator.EventAccumulator(str(out / "tensorboard"))
    board.Reload()
    assert {"train/loss", "train/lr", "train/grad_norm"} <= set(board.Tags()["scalars"])
    assert [e.step for e in board.Scalars("train/loss")] == [
        json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()
    ]
    assert board.Tags()["images"], "the progress snapshots reach TensorBoard"


def test_bf16_is_used_where_the_device_is_fast_at_it_and_a_request_elsewhere_says_so(monkeypatch, caplog):
    for fast in (True, False):
        monkeypatch.setattr(runtime_module, "cpu_bf16_supported", lambda fast=fast: fast)
        assert runtime_module.resolve_bf16("auto", torch.device("cpu")) is fast
        assert runtime_module.resolve_bf16(False, torch.device("cpu")) is False
    with caplog.at_level("WARNING", logger=runtime_module.__name__):
        assert runtime_module.resolve_bf16(True, torch.device("cpu")) is False
        assert runtime_module.resolve_bf16(True, torch.device("mps")) is False
    assert [r.getMessage() for r in caplog.records] == [
        f"bf16 = true but {kind} has no fast bf16; falling back to float32" for kind in ("cpu", "mps")
    ]


def test_model_augment_tells_the_unet_the_shifts_and_distilling_such_a_run_shifts_nothing(tmp_path):
    """Training passes random_shifts' shift to the UNet (the only way its shift_embed gets a gradient); the run
    loads and samples without one; consistency tuning of it keeps shift_embed and trains it on no shift."""
    grads, frozen = [], []

    def look(step, model, ema, loss):
        weight = model.shift_embed.weight
        grads.append(None if weight.grad is None else weight.grad.abs().sum())
        frozen.append(not weight.requires_grad)

    steps = ["train.steps=3", "train.snapshot_every=0"]
    run_training(SMOKE, tmp_path / "run", overrides=fast("model.augment=1", *steps), progress=False, callback=look)
    assert grads[-1] is not None and grads[-1] > 0  # step 1's is 0: the zero-initialised output conv blocks it
    assert main(["sample", str(tmp_path / "run"), "sample.num_samples=2", "--out", str(tmp_path / "s"), "--quiet"]) == 0
    assert not any(frozen)
    grads.clear(), frozen.clear()
    distill_run(tmp_path / "run", tmp_path / "student", fast(*steps), progress=False, callback=look)
    assert grads == [None, None, None] and frozen[-1]  # frozen: DDP refuses a parameter without a gradient
    assert load_model(tmp_path / "student")[0].shift_embed is not None


def test_train_loop_trains_any_denoiser_module(tmp_path):
    """train_loop's model is any nn.Module (x [B, 1, 28, 28], t [B]) -> [B, 1, 28, 28], not only the UNet."""

    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3, padding=1)

        def forward(self, x, t):
            return self.conv(x) * (1 + t.float()[:, None, None, None] / 1000)

    cfg = RunConfig.load(SMOKE, fast("train.steps=2", "train.snapshot_every=0"))
    model = Denoiser()
    before = model.conv.weight.detach().clone()
    ema, stats = train_loop(cfg, Runtime.create("cpu", False), model, tmp_path, progress=False)
    assert stats["train_steps"] == 2 and not torch.equal(model.conv.weight, before)
    with pytest.raises(ConfigError, match="model.augment = 0.5 tells the model each image's shift: Denoiser has no"):
        train_loop(cfg.replace("model", augment=0.5), Runtime.create("cpu", False), model, tmp_path, progress=False)
