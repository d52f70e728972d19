"""A run folder is owned by one process at a time, and a new owner first sweeps away what a killed one left.

:func:`owned` takes ``RUN/.lock`` (created exclusively, holding the owner's pid and host); a lock whose
process is gone is stale and taken over. While held, no other ``timestep-embed train`` can write into
the folder. :func:`clear_run` removes a previous run's files for ``--overwrite``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from .checkpoint import RUN_CHECKPOINT

__all__ = ["LOCK", "RUN_FILES", "RunFolderBusy", "owned", "clear_run", "remove_stale_temp_files"]

log = logging.getLogger(__name__)
LOCK = ".lock"
# What a training run writes (grid_<step>.png too); `timestep-embed sample` adds samples-*.{npy,png}.
RUN_FILES = ("config.yaml", RUN_CHECKPOINT, "log.jsonl", "loss_curve.png", "samples.npy", "samples.png", "metrics.json")


class RunFolderBusy(FileExistsError):
    """Another live process holds the run folder."""


def _alive(pid: int, host: str) -> bool:
    if host != socket.gethostname():
        return True  # another machine's process: we cannot tell, so we do not take its folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _take(lock: Path) -> None:
    me = f"{os.getpid()} {socket.gethostname()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid, _, host = lock.read_text(errors="replace").strip().partition(" ")
            if pid.isdigit() and _alive(int(pid), host):
                raise RunFolderBusy(
                    f"{lock.parent} is in use by process {pid} on {host} ({lock}); wait for it to finish, "
                    "or choose another --out-dir"
                ) from None
            lock.unlink(missing_ok=True)
            log.warning("%s: took over the stale lock of process %s, which is gone", lock.parent, pid or "?")
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return
    raise RunFolderBusy(f"{lock.parent}: could not take the lock {lock}")


def remove_stale_temp_files(folder: Path) -> None:
    """Delete the ``.<name>.<random>.tmp`` files an interrupted atomic write left behind."""
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted write", path)


@contextlib.contextmanager
def owned(folder: Path) -> Iterator[Path]:
    """Hold ``folder`` (created if needed) for the duration of the ``with`` block."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    _take(lock)
    try:
        remove_stale_temp_files(folder)
        yield folder
    finally:
        lock.unlink(missing_ok=True)


def clear_run(folder: Path) -> None:
    """Remove a previous run's files from ``folder`` (``--overwrite``), its grids and extra samples too."""
    doomed = [folder / name for name in RUN_FILES]
    doomed += [*folder.glob("grid_*.png"), *folder.glob("samples-*.npy"), *folder.glob("samples-*.png")]
    for path in doomed:
        path.unlink(missing_ok=True)
