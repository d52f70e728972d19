"""Fair timing of several contenders on a noisy machine: interleaved rounds, medians.

Each round calls every contender once, in a fresh random order, so slow drifts of the machine
(other processes, frequency scaling) hit all contenders alike; the median over rounds drops
the outliers. Used by the benchmark scripts, never by tests: they run as ``python scripts/NAME.py``,
so this module is importable as ``_timing`` from them.
"""

from __future__ import annotations

import platform
import random
import statistics
import time
from collections.abc import Callable


def interleaved_medians(
    contenders: dict[str, Callable[[], object]],
    *,
    min_rounds: int = 7,
    max_rounds: int = 2000,
    budget_s: float = 0.5,
    warmup: int = 2,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds per call of each contender, measured in interleaved rounds.

    Runs at least ``min_rounds`` and at most ``max_rounds`` rounds, stopping once ``budget_s``
    seconds have been spent (after the minimum). Returns ``{name: median seconds}``.
    """
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    rng = random.Random(seed)
    start = time.perf_counter()
    for round_index in range(max_rounds):
        rng.shuffle(names)
        for name in names:
            fn = contenders[name]
            begin = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - begin)
        if round_index + 1 >= min_rounds and time.perf_counter() - start > budget_s:
            break
    return {name: statistics.median(values) for name, values in samples.items()}


def cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what ``platform`` knows: the device a CPU figure
    was measured on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
