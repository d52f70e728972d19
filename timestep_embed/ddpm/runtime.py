"""Where a model runs: the device, CPU threads, bf16 autocast, and torchrun / DistributedDataParallel.

[`Runtime.create`][timestep_embed.ddpm.runtime.Runtime.create] is one process on one device (sampling, scripts);
[`setup`][timestep_embed.ddpm.runtime.setup] also joins torchrun's process group when ``RANK`` / ``WORLD_SIZE`` /
``LOCAL_RANK`` are set (gloo on CPU, nccl on CUDA). Devices: ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.
[`Runtime.autocast`][timestep_embed.ddpm.runtime.Runtime.autocast] is the one bf16 autocast that training, sampling and
the scripts use. [`GraphedStep`][timestep_embed.ddpm.runtime.GraphedStep] replays a training step as one CUDA graph.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import torch
import torch.distributed as dist

try:  # torchrun's launcher, for `launch` (a torch built without torch.distributed has none)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as elastic_run
except ImportError:  # pragma: no cover - torch without distributed
    elastic_run = None  # type: ignore[assignment]

__all__ = [
    "Device",
    "DEVICES",
    "Runtime",
    "resolve_device",
    "resolve_bf16",
    "setup",
    "cleanup",
    "broadcast_float",
    "GraphedStep",
    "set_lr",
    "signals_held",
    "launch",
    "torch_older_than",
]

log = logging.getLogger(__name__)
Device = Literal["auto", "cpu", "cuda", "mps"]
DEVICES = get_args(Device)


@dataclass
class Runtime:
    """A device, whether bf16 autocast is on, and this process's place among torchrun's processes."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    bf16: bool = False

    @classmethod
    def create(cls, device: str = "auto", bf16: bool | str = "auto", threads: int | None = None) -> Runtime:
        """One process: ``device`` resolved ([`resolve_device`][timestep_embed.ddpm.runtime.resolve_device]), bf16 where
        it is fast (``"auto"``), ``threads`` CPU threads (None: torch's default, one per physical core)."""
        if threads is not None:
            torch.set_num_threads(threads)
        dev = torch.device(resolve_device(device))
        fixed_shapes(dev)
        return cls(dev, bf16=resolve_bf16(bf16, dev))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        """bf16 autocast on this device when enabled, else a no-op context. No cache of bf16 weight copies: older torch
        (2.2) gave one made under no_grad to the next pass, whose weights then got no gradient (pytorch#112583)."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)


def torch_older_than(major: int, minor: int) -> bool:
    """Whether the installed torch is older than ``major.minor`` (the first two numbers of its version)."""
    return tuple(int(x) for x in torch.__version__.split(".")[:2]) < (major, minor)


def cpu_bf16_supported() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX-BF16, read from ``/proc/cpuinfo``,
    so Linux only); without them bf16 autocast on the CPU is slower than float32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_bf16(option: bool | str, device: torch.device) -> bool:
    """``option`` True | False | "auto" -> use bf16 autocast? ("auto": CUDA with bf16, or a bf16 CPU)."""
    if option is False:
        return False
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
    elif device.type == "mps":
        ok = False  # bf16 autocast on MPS is new and not faster for these convolutions
    else:
        ok = cpu_bf16_supported()
    if option is True and not ok:
        log.warning("bf16 = true but %s has no fast bf16; falling back to float32", device.type)
    return ok


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"``, ``"mps"`` or ``"cpu"`` (the first available); an explicit device must exist."""
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": _mps_available()}
    if device == "auto":
        return next(kind for kind in ("cuda", "mps", "cpu") if available[kind])
    if device not in available:
        raise ValueError(f"device = {device!r}: expected one of {', '.join(DEVICES)}")
    if not available[device]:
        raise ValueError(
            f"device {device!r} (train.device, or --device): this torch build sees no {device} device; use 'auto' "
            "or 'cpu'"
        )
    return device


def setup(device: str = "auto", bf16: bool | str = "auto", threads: int | None = None) -> Runtime:
    """[`Runtime.create`][timestep_embed.ddpm.runtime.Runtime.create], joining torchrun's process group if there is one
    (one device per rank)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Runtime.create(device, bf16, threads)
    if threads is not None:
        torch.set_num_threads(threads)
    kind = resolve_device(device)
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        if kind == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if kind == "cuda" else "gloo")
    dev = torch.device(kind, local) if kind == "cuda" else torch.device(kind)
    fixed_shapes(dev)
    return Runtime(dev, rank, world, local, resolve_bf16(bf16, dev))


def fixed_shapes(device: torch.device) -> None:
    """On CUDA, cuDNN's benchmark mode: training and sampling run the same few shapes thousands of times, so
    timing each convolution's algorithms once per shape pays off (PyTorch's performance tuning guide)."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_float(value: float, rt: Runtime) -> float:
    """Rank 0's ``value`` on every rank (so wall-clock decisions, LR and stopping, agree)."""
    if rt.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=rt.device)
    dist.broadcast(t, 0)
    return float(t.item())


class GraphedStep:
    """``step(key)`` replayed as one CUDA graph per ``key`` (``train.compile: step-graph``): a training step's batch
    draw, loss, backward, gradient clipping and optimizer update in one launch, with no Python between its kernels.

    PyTorch's recipe for whole-network capture (CUDA semantics notes): the first ``warmup`` calls run eagerly on a
    side stream (cuDNN's autotuning and the optimizer's state are made there), which the capture uses too (a library
    that sets a stream up on first use does it before the capture); the next call captures the step, and
    it and every later one replay it. A new ``key`` (a consistency stage, a Python number to the step) captures
    again. What changes between steps is on the device: the learning rate, a 0-d tensor the loop fills
    (``capturable`` updates read it there), and ``generator``'s draws. The returned tensors are the graph's outputs,
    which the next step overwrites. ``step`` must make no host sync and read no CPU tensor."""

    def __init__(self, step: Callable[[int], tuple[torch.Tensor, ...]], optimizer: torch.optim.Optimizer,
                 generator: torch.Generator, warmup: int = 3):  # fmt: skip
        self.step, self.optimizer, self.generator, self.warmup = step, optimizer, generator, warmup
        self.graph: torch.cuda.CUDAGraph | None = None
        self.side: torch.cuda.Stream | None = None
        self.key: int | None = None
        self.out: tuple[torch.Tensor, ...] = ()

    def __call__(self, key: int) -> tuple[torch.Tensor, ...]:
        if self.warmup > 0:
            self.warmup -= 1
            self.side = self.side or torch.cuda.Stream()
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                out = self.step(key)
            torch.cuda.current_stream().wait_stream(self.side)
            return out
        if self.graph is None or key != self.key:
            self._capture(key)
        assert self.graph is not None
        self.graph.replay()
        return self.out

    def _capture(self, key: int) -> None:
        self.graph, self.out = None, ()  # the last key's graph and its memory go first
        for group in self.optimizer.param_groups:
            lr = group["lr"]
            device = group["params"][0].device  # float32: what the fused kernels read
            group["lr"] = lr if isinstance(lr, torch.Tensor) else torch.tensor(lr, dtype=torch.float32, device=device)
            group["capturable"] = True
        graph = torch.cuda.CUDAGraph()
        register = getattr(graph, "register_generator_state", None)
        if register is not None:  # the torch versions that need a non-default generator registered have this
            with warnings.catch_warnings():  # and newer ones, which register it themselves, may call it deprecated
                warnings.simplefilter("ignore")
                register(self.generator)
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are made in the graph's memory
        failure: BaseException | None = None
        try:
            with torch.cuda.graph(graph, stream=self.side):
                try:
                    out = self.step(key)
                except BaseException as exc:  # kept: ending the broken capture raises an error of its own
                    failure = exc
        except RuntimeError as exc:
            failure = failure or exc
        if failure is not None and not isinstance(failure, RuntimeError):
            raise failure  # Ctrl-C, a bug in the step: as they are
        if failure is not None:
            raise RuntimeError(
                f"train.compile = 'step-graph': the training step could not be captured as one CUDA graph ({failure}); "
                "train.compile = false or cudagraphs trains without capturing it"
            ) from failure
        self.graph, self.key, self.out = graph, key, out


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group's learning rate: a 0-d tensor (a captured step reads it on the device) is filled."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM that arrive inside the block are held until it ends, then raised again for their handlers
    (the CLI's: KeyboardInterrupt), so the block is done whole or not at all: an optimizer update interrupted
    between its step count and its weights would leave them apart. Each handler is put back and each held signal
    raised again even when another's handler raises. Nothing is held off the main thread (where Python delivers
    signals) or where a handler was not set from Python (``signal.getsignal`` None: it could not be put back).
    Costs about 17 us (2-core Intel Xeon), against a training step of milliseconds."""
    if threading.current_thread() is not threading.main_thread() or any(signal.getsignal(s) is None for s in _HELD):
        yield
        return
    held: list[int] = []
    with contextlib.ExitStack() as stack:  # exits last in, first out; each runs whatever the others raise
        stack.callback(_raise_each, held)  # last: with every handler back in place
        for signum in _HELD:
            stack.callback(signal.signal, signum, signal.signal(signum, lambda number, frame: held.append(number)))
        yield


def _raise_each(signums: list[int]) -> None:
    """Raise each signal once, in the order they came, each whatever the handler of another raises."""
    with contextlib.ExitStack() as stack:
        for signum in reversed(dict.fromkeys(signums)):
            stack.callback(signal.raise_signal, signum)


def launch(nproc: int, argv: Sequence[str]) -> int:
    """``python -m timestep_embed ARGV`` in ``nproc`` processes on this machine, under torch's elastic launcher as
    ``torchrun --standalone --nproc_per_node N`` runs it (each process joins the group in `setup`). Returns the
    exit code of a process that failed (each has said why, in one line), else 0. Ctrl-C or SIGTERM reaches every
    process, and each stops as one process would (rank 0 saves the checkpoint); here it raises KeyboardInterrupt
    instead of the launcher's SignalException, and the launcher's own log lines are kept quiet."""
    if elastic_run is None:
        raise ImportError("--nproc-per-node needs torch.distributed, which this torch build lacks")
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed.elastic")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # each has its own level: the parent's is not enough
    options = ["--standalone", f"--nproc_per_node={nproc}", "--monitor_interval=0.1", "--module", "timestep_embed"]
    try:
        elastic_run(parse_args([*options, *argv]))
    except SignalException:
        raise KeyboardInterrupt from None
    except ChildFailedError as exc:
        codes = [failure.exitcode for failure in exc.failures.values()]
        return max(codes) if max(codes) > 0 else 1
    return 0
