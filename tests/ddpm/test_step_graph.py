"""``train.compile: step-graph``: the training step replayed as one CUDA graph.

On a CPU the loop runs with a stand-in for ``torch.cuda``'s graph API whose capture runs the step once and whose
replays run it again, writing into the captured outputs as a real replay does: the loop's part (the learning rate
filled on the device, the EMA outside the graph, outputs that the next step overwrites, a capture per consistency
stage) must then train exactly as the eager loop. On CUDA the real capture is compared with the eager loop."""

import contextlib
import json

import pytest
import torch

from timestep_embed.cli import main
from timestep_embed.ddpm import ConfigError, RunConfig, UNet, run_training
from timestep_embed.ddpm import runtime as runtime_module
from timestep_embed.ddpm import train as train_module
from timestep_embed.ddpm.checkpoint import load_checkpoint, load_training_state, read_metadata
from timestep_embed.ddpm.runtime import GraphedStep, Runtime, torch_older_than

from .test_train import SMOKE, _weights, fast

STEPS = ["train.steps=12", "train.log_every=3", "train.snapshot_every=0", "train.warmup_steps=4"]


class StandInGraph:
    """A CUDA graph's bookkeeping on a CPU: the capture ran the step, so the first replay does nothing; each later
    replay runs the step again and copies its results into the captured outputs."""

    made: list = []

    def __init__(self):
        self.fresh, self.generators = True, []
        StandInGraph.made.append(self)

    def register_generator_state(self, generator):
        self.generators.append(generator)

    def replay(self):
        # the learning rates are the 0-d tensors of the capture, filled in place: a float would be baked in
        groups = self.owner.optimizer.param_groups
        assert all(isinstance(lr, torch.Tensor) and g["lr"] is lr for g, lr in zip(groups, self.lrs, strict=True))
        if self.fresh:
            self.fresh = False
            return
        owner = self.owner
        for static, new in zip(owner.out, owner.step(owner.key), strict=True):
            static.copy_(new)


@pytest.fixture
def stand_in_cuda(monkeypatch):
    """torch.cuda's streams and graphs as the stand-ins; each graph learns which GraphedStep captured it."""
    StandInGraph.made = []
    capture = GraphedStep._capture

    def capture_and_remember(self, key):
        capture(self, key)
        self.graph.owner, self.graph.lrs = self, [g["lr"] for g in self.optimizer.param_groups]

    def graph(g, stream=None):  # the capture's stream: the warm-up's
        g.stream = stream
        return contextlib.nullcontext()

    stream = type("Stream", (), {"wait_stream": lambda self, other: None})
    monkeypatch.setattr(torch.cuda, "Stream", stream)
    monkeypatch.setattr(torch.cuda, "current_stream", stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(GraphedStep, "_capture", capture_and_remember)
    return StandInGraph


def train(tmp_path, name, overrides, consistency=False):
    cfg = RunConfig.load(SMOKE, fast(*STEPS, *overrides, "model.augment=0.5"))  # the shifts' draws in the step too
    if consistency:  # distil's config (method ect: no teacher), two stages over the budget; shift_embed frozen
        cfg = train_module.distill_config(cfg, [*fast(*STEPS, *overrides), "consistency.stages=2"])
    torch.manual_seed(cfg.train.seed)
    model = UNet(cfg.model)
    ema, stats = train_module.train_loop(cfg, Runtime(torch.device("cpu")), model, tmp_path / name, progress=False)
    log = [json.loads(line) for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
    return model, ema, [(r["step"], r["loss"], r["lr"]) for r in log if "loss" in r]


OLD_TORCH = torch_older_than(2, 4)


@pytest.mark.skipif(OLD_TORCH, reason="step-graph needs torch >= 2.4 (and this test AdamW's fused CPU kernel)")
@pytest.mark.parametrize("consistency", [False, True], ids=["denoising", "consistency"])
def test_a_replayed_step_trains_as_the_eager_step(tmp_path, stand_in_cuda, consistency):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    eager = train(tmp_path, "a", [], consistency)
    graphed = train(tmp_path, "b", ["train.compile=step-graph"], consistency)
    # equal but for the learning rate's rounding: a float32 tensor in the graphed step, a Python float eagerly
    for a, b in zip(eager[0].state_dict().values(), graphed[0].state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    for a, b in zip(eager[1].parameters(), graphed[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert [s for s, *_ in eager[2]] == [s for s, *_ in graphed[2]] == [1, 3, 6, 9, 12]
    for (_, loss_a, lr_a), (_, loss_b, lr_b) in zip(eager[2], graphed[2], strict=True):
        assert loss_b == pytest.approx(loss_a, rel=1e-5) and lr_b == pytest.approx(lr_a, rel=1e-6)
    graphs = stand_in_cuda.made
    assert len(graphs) == (2 if consistency else 1)  # a capture per consistency stage
    assert all(len(g.generators) == 1 for g in graphs)  # the step's generator is registered with each graph
    assert all(g.stream is not None and g.stream is g.owner.side for g in graphs)  # captured on the warm-up's stream
    # the checkpoint holds the learning rate as a number and capturable off (a capture sets both), and resumes
    groups = read_metadata(tmp_path / "b" / "checkpoint.safetensors")["optimizer"]["param_groups"]
    assert all(type(g["lr"]) is float and g["capturable"] is False for g in groups)
    assert load_training_state(tmp_path / "b" / "checkpoint.safetensors", *_blank(graphed[0]))[0] == 12


def test_a_step_that_cannot_be_captured_names_the_settings_that_train_without_capture(stand_in_cuda, monkeypatch):
    """The error names the operation that broke the capture, not the one CUDA raises when the broken capture ends."""

    class BrokenCapture:  # torch.cuda.graph ends the capture on the way out, and a broken one raises
        def __init__(self, graph, stream=None):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise RuntimeError("operation failed due to a previous error during capture")

    monkeypatch.setattr(torch.cuda, "graph", BrokenCapture)
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    calls = []

    def step(key):
        calls.append(key)
        if len(calls) > 1:  # the capture: what CUDA says of an operation a graph cannot hold
            raise RuntimeError("operation not permitted when stream is capturing")
        return (net(torch.ones(1, 2)).sum().detach(),)

    graphed = GraphedStep(step, opt, torch.Generator(), warmup=1)
    graphed(0)  # the eager warm-up step
    with pytest.raises(RuntimeError, match=r"could not be captured as one CUDA graph \(operation not permitted .*\); "
                                           r"train.compile = false or cudagraphs trains without"):  # fmt: skip
        graphed(0)
    assert graphed.graph is None and graphed.out == ()  # nothing half-captured is replayed


def _blank(model):
    twin = UNet(model.config)
    twin.load_state_dict(model.state_dict())
    ema = UNet(model.config)
    opt = train_module.adamw(twin.parameters(), 1e-3)
    return twin, ema, opt, torch.Generator()


def test_the_learning_rate_is_filled_on_the_device_once_captured():
    net = torch.nn.Linear(3, 2)
    opt = train_module.adamw(net.parameters(), 1e-3)
    runtime_module.set_lr(opt, 2e-3)
    assert opt.param_groups[0]["lr"] == 2e-3
    opt.param_groups[0]["lr"] = torch.tensor(2e-3)
    held = opt.param_groups[0]["lr"]
    runtime_module.set_lr(opt, 5e-4)
    assert opt.param_groups[0]["lr"] is held and held.item() == pytest.approx(5e-4)


def test_step_graph_needs_one_process_on_cuda(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"step-graph.*one process on CUDA and torch >= 2.4, not 1 on cpu with torch"):
        run_training(SMOKE, tmp_path / "x", overrides=fast("train.compile=step-graph"), progress=False)
    assert not (tmp_path / "x").exists()
    code = main(["train", "--config", SMOKE, "--out-dir", str(tmp_path / "y"), "--quiet", "train.compile=step-graph"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "train.compile = 'step-graph'" in err[0]
    assert err[0].endswith("train.compile=false trains here")


def cuda_run(folder, mode, bf16, consistency, callback=None, resume=False):
    overrides = [*fast("train.device=cuda", f"train.bf16={bf16}"), *STEPS, f"train.compile={mode}"]
    if consistency:  # the teacher's model: no dropout
        cfg = train_module.distill_config(RunConfig.load(SMOKE), [*overrides, "consistency.stages=2"])
        return run_training(cfg, folder, progress=False, callback=callback, resume=resume)
    # dropout's masks come from CUDA's default generator, which resuming restores; the shifts from the loop's own
    overrides += ["model.dropout=0.1", "model.augment=0.5"]
    return run_training(SMOKE, folder, overrides=overrides, progress=False, callback=callback, resume=resume)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("bf16", ["false", "true"])
@pytest.mark.parametrize("consistency", [False, True], ids=["denoising", "consistency"])
def test_on_cuda_the_captured_step_trains_as_the_eager_step_and_resumes(tmp_path, bf16, consistency, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)  # benchmark mode then picks among these only
    for mode in ("false", "step-graph"):
        metrics = cuda_run(tmp_path / mode, mode, bf16, consistency)
        assert metrics["finished"] and metrics["train_steps"] == 12
    stopped = cuda_run(tmp_path / "resumed", "step-graph", bf16, consistency, callback=lambda step, *_: step >= 7)
    assert stopped["train_steps"] == 7
    assert cuda_run(tmp_path / "resumed", "step-graph", bf16, consistency, resume=True)["train_steps"] == 12
    eager = _weights(tmp_path / "false")[0]
    tol = {"rtol": 1e-2, "atol": 2e-3} if bf16 == "true" else {"rtol": 1e-3, "atol": 1e-4}
    graphed_runs = ("step-graph", "resumed")
    for run in graphed_runs:  # the same kernels and draws, the same deterministic cuDNN algorithms or close ones
        graphed = _weights(tmp_path / run)[0]
        for key in eager:
            torch.testing.assert_close(graphed[key], eager[key], **tol, msg=f"{run}: {key}")
    states = {run: load_checkpoint(tmp_path / run / "checkpoint.safetensors")[0] for run in ("false", *graphed_runs)}
    for run in graphed_runs:  # replays advance the loop's generator and CUDA's default one as the eager steps do
        for key in ("rng.generator", "rng.device"):
            assert torch.equal(states[run][key], states["false"][key]), f"{run}: {key}"
