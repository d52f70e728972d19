"""Writing result files: atomically (temp file in the same folder, fsync, rename) and with the user's umask.

A crash at any moment leaves either the old file or the new one, never a torn one; a temp file
left by a kill is named ``.<name>.<random>.tmp`` beside its target.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["atomic_write_bytes", "save_npy", "save_figure"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_all(f, data: bytes) -> None:
    # One place that writes the bytes, so tests can simulate a crash in the middle of it.
    f.write(data)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, mode ``0o666 & ~umask`` (as ``open()`` would)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:  # includes KeyboardInterrupt: never leave the temp file behind
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable (POSIX); not possible on every platform
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass
    return path


def save_npy(path: str | os.PathLike, array) -> Path:
    """``np.save`` of ``array`` to ``path`` (exactly that name), atomically."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return atomic_write_bytes(path, buffer.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int | None = None) -> Path:
    """A matplotlib Figure as PNG at ``path``, atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())
