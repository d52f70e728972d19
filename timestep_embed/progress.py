"""Progress of long work, fit for where it is shown: a tqdm bar on a terminal, and one plain line at
most every `LOG_EVERY_S` seconds when stderr goes to a file or a pipe (a log keeps lines, not
thousands of carriage-return redraws).

``progress(total, "train", unit="step")`` returns an object with tqdm's ``update``, ``set_postfix``
and ``close`` (and ``n`` / ``total``); with ``enabled=False`` it prints nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["LOG_EVERY_S", "progress", "LogProgress"]

LOG_EVERY_S = 30.0


class LogProgress:
    """tqdm's interface as plain lines on stderr: ``desc: n/total unit (p%), k=v ...`` at most every
    ``every`` seconds, and once more at `close` unless that line was just printed (nothing at all when ``enabled``
    is False)."""

    def __init__(self, total=None, desc: str = "", unit: str = "it", initial: float = 0, *, enabled=True, every=None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.enabled, self.every = enabled, LOG_EVERY_S if every is None else every
        self.postfix: dict[str, Any] = {}
        self.start = self.last = time.monotonic()
        self.printed = ""  # the last line, not printed twice (a close right after a line)

    def update(self, n: float = 1) -> None:
        self.n += n
        if self.enabled and time.monotonic() - self.last >= self.every:
            self._line()

    def set_postfix(self, refresh: bool = False, **values) -> None:
        self.postfix = values

    def close(self) -> None:
        if self.enabled and self.n:
            self._line()
        self.enabled = False

    def _line(self) -> None:
        self.last = time.monotonic()
        done = f"{self.n:.0f}/{self.total:.0f}" if self.total else f"{self.n:.0f}"
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        line = f"{self.desc}: {done} {self.unit}{share}{extra}, {self.last - self.start:.0f} s"
        if line != self.printed:
            print(line, file=sys.stderr)
        self.printed = line


def progress(total=None, desc: str = "", unit: str = "it", *, initial: float = 0, enabled: bool = True, **bar):
    """A tqdm bar when stderr is a terminal (``bar``: more tqdm options), else a
    [`LogProgress`][timestep_embed.progress.LogProgress]."""
    if enabled and sys.stderr.isatty():
        try:
            from tqdm.auto import tqdm  # optional dependency (the train extra)
        except ImportError:
            pass
        else:
            return tqdm(total=total, desc=desc, unit=unit, initial=initial, dynamic_ncols=True, **bar)
    return LogProgress(total, desc, unit, initial, enabled=enabled)
