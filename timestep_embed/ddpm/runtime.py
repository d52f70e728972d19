"""Where training runs: device, CPU threads, bf16 autocast, and torchrun / DistributedDataParallel.

Single process: nothing to set up. Under ``torchrun --nproc_per_node N`` (RANK / WORLD_SIZE /
LOCAL_RANK in the environment) :func:`setup` joins the process group: gloo on CPU, nccl on CUDA.
Devices: ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.

CPU threads: on a 2-core machine shared with other jobs, two OpenMP threads can run 3-6x slower
than one, because a descheduled thread stalls the other at every barrier. ``threads="auto"``
therefore times a few real steps with 1 and with all cores, keeps the faster, and re-checks every
couple of minutes (:class:`ThreadTuner`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = ["Runtime", "DEVICES", "resolve_device", "resolve_bf16", "setup", "cleanup", "broadcast_float", "ThreadTuner"]

log = logging.getLogger(__name__)
DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass
class Runtime:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    bf16: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        """bf16 autocast on this device when enabled, else a no-op context."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)


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
    if option not in (True, False, "auto"):
        raise ValueError(f"train.bf16 = {option!r}: expected true, false or 'auto'")
    if option is False:
        return False
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
    elif device.type == "mps":
        ok = False  # bf16 autocast on MPS is new and not faster for these convolutions
    else:
        ok = cpu_bf16_supported()
    if option is True and not ok:
        log.warning("train.bf16 = true but %s has no fast bf16; falling back to float32", device.type)
    return ok


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"``, ``"mps"`` or ``"cpu"`` (the first available); an explicit device must exist."""
    if device not in DEVICES:
        raise ValueError(f"device = {device!r}: expected one of {', '.join(DEVICES)}")
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": _mps_available()}
    if device == "auto":
        return next(kind for kind in ("cuda", "mps", "cpu") if available[kind])
    if not available[device]:
        raise ValueError(f"device = {device!r} but this torch build sees no {device} device (use 'auto' or 'cpu')")
    return device


def setup(device: str = "auto", bf16: bool | str = "auto") -> Runtime:
    """Pick the device (:func:`resolve_device`) and join torchrun's process group if any."""
    kind = resolve_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1 and not dist.is_initialized():
        if kind == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if kind == "cuda" else "gloo")
    dev = torch.device(kind, local) if kind == "cuda" else torch.device(kind)
    return Runtime(dev, rank, world, local, resolve_bf16(bf16, dev))


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


class ThreadTuner:
    """Chooses torch's CPU thread count while training. ``threads``: an int (fixed) or "auto".

    "auto" alternates between 1 thread and all cores for ``probe`` steps each at the start and then
    every ``period`` seconds (at once if the steps become 2x slower), keeping whichever ran its probe
    steps faster (median). Call :meth:`step` with
    each training step's duration."""

    def __init__(self, threads: int | str, probe: int = 4, period: float = 120.0):
        if threads != "auto" and not (isinstance(threads, int) and threads >= 1):
            raise ValueError(f"train.threads = {threads!r}: expected a positive int or 'auto'")
        self.auto = threads == "auto"
        cores = os.cpu_count() or 1
        self.choices: list[int] = sorted({1, cores}) if isinstance(threads, str) else [threads]
        self.current = self.choices[-1]
        torch.set_num_threads(self.current)
        self.probe, self.period = probe, period
        self.timings: dict[int, list[float]] = {}
        self.reference = float("inf")  # median step time of the current choice when it was chosen
        self.last_switch = time.perf_counter()
        self.queue = list(self.choices) if self.auto and len(self.choices) > 1 else []
        if self.queue:
            self._use(self.queue.pop(0))

    def _use(self, n: int) -> None:
        self.current = n
        self.timings[n] = []
        torch.set_num_threads(n)

    def _slowed_down(self) -> bool:
        # The last ``probe`` steps all ran 2x slower than when this count was chosen: the load changed.
        last = self.timings.get(self.current, [])[-self.probe :]
        return len(last) == self.probe and min(last) > 2 * self.reference

    def step(self, seconds: float) -> None:
        if not self.auto or len(self.choices) == 1:
            return
        self.timings.setdefault(self.current, []).append(seconds)
        if len(self.timings[self.current]) < self.probe:
            return
        if self.queue:  # still probing: next candidate
            self._use(self.queue.pop(0))
        elif len(self.timings) == len(self.choices) and all(len(v) >= self.probe for v in self.timings.values()):
            medians = {n: sorted(v)[len(v) // 2] for n, v in self.timings.items()}
            best = min(medians, key=lambda n: medians[n])
            torch.set_num_threads(best)
            self.current, self.timings, self.last_switch = best, {}, time.perf_counter()
            self.reference = medians[best]
        elif time.perf_counter() - self.last_switch > self.period or self._slowed_down():  # re-probe
            self.queue = [n for n in self.choices if n != self.current] + [self.current]
            self.timings = {}
            self._use(self.queue.pop(0))
