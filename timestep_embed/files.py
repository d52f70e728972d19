"""Writing result files: atomically (temp file in the same folder, fsync, rename), with the user's
umask, and with the versions that wrote them; file locks; plain ``.npy`` arrays.

A crash at any moment leaves either the old file or the new one, never a torn one; a temp file
left by a kill is named ``.<name>.<random>.tmp`` beside its target. Weights files are read in
`timestep_embed.weights`, pretrained folders written and read in `timestep_embed.folders`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from .checks import check_memory

try:  # POSIX; Windows locks through msvcrt
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

__all__ = [
    "package_version",
    "versions",
    "make_folder",
    "check_writable",
    "remove_stale_temp_files",
    "atomic_write_bytes",
    "Busy",
    "hold",
    "save_npy",
    "load_npy",
    "save_figure",
]

log = logging.getLogger(__name__)


def package_version() -> str:
    """This package's installed version ("0+unknown" in a source tree that was never installed)."""
    try:
        return version("timestep-embed")
    except PackageNotFoundError:
        return "0+unknown"


def versions() -> dict:
    """The package and torch versions, recorded in every checkpoint, metrics and pretrained file."""
    return {"timestep_embed": package_version(), "torch": torch.__version__}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_all(f, data: bytes) -> None:
    # One place that writes the bytes, so tests can simulate a crash in the middle of it.
    f.write(data)


def make_folder(folder: Path, name: str = "folder") -> Path:
    """Create ``folder`` (and the folders above it) unless it exists; an OSError naming ``name`` and the cause when it
    cannot be one (it or a folder above it is a file, a read-only file system, no permission)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), folder)
        raise FileExistsError(f"{name} {str(folder)!r}: {file} is a file, not a folder") from None
    except OSError as exc:
        raise OSError(f"{name} {str(folder)!r} cannot be made ({exc.strerror or exc})") from None
    return folder


def check_writable(folder: Path, name: str = "folder") -> Path:
    """`make_folder`, then check that a file can be created in ``folder`` (a probe, removed at once): a read-only
    file system or a missing permission is an OSError naming ``name`` before the work whose results go there."""
    make_folder(folder, name)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check.", suffix=".tmp")
    except OSError as exc:
        raise OSError(f"{name} {str(folder)!r} cannot be written ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return folder


def remove_stale_temp_files(folder: Path, names: tuple[str, ...] | None = None) -> None:
    """Delete the ``.<name>.<random>.tmp`` files (and folders) an interrupted atomic write left in ``folder``: of the
    file ``names``, or of any name."""
    patterns = [f".{name}.*.tmp" for name in names] if names is not None else [".*.tmp"]
    for path in (p for pattern in patterns for p in folder.glob(pattern)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted write", path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically, mode ``0o666 & ~umask`` (as ``open()`` would).

    ``exclusive``: never replace an existing file; FileExistsError if ``path`` exists when the data is
    ready (the temp file is linked to its name, which fails atomically where ``os.replace`` would not),
    so of two writers racing for one name exactly one succeeds."""
    path = Path(path)
    make_folder(path.parent, f"the folder of {path.name}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(f"{path} exists: another process wrote it first") from None
            Path(tmp).unlink()
        else:
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


class Busy(FileExistsError):
    """Another live process holds the lock."""


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


@contextlib.contextmanager
def hold(lock: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` for the ``with`` block, or raise [`Busy`][timestep_embed.ddpm.Busy]
    naming ``what`` and the process that holds it. The lock file is left in place."""
    make_folder(lock.parent, "folder")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)  # the umask applies
    try:
        try:
            _lock(fd)
        except OSError:
            owner = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise Busy(f"{what} is in use by {owner} ({lock}); wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def save_npy(path: str | os.PathLike, array, *, exclusive: bool = False) -> Path:
    """``np.save`` of ``array`` to ``path`` (exactly that name), atomically (``exclusive``: as in
    [`atomic_write_bytes`][timestep_embed.files.atomic_write_bytes])."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return atomic_write_bytes(path, buffer.getvalue(), exclusive=exclusive)


def load_npy(path: str | os.PathLike, mmap_mode: Literal["r", "c"] | None = None) -> np.ndarray:
    """A plain ``.npy`` array (never a pickle); ValueError naming the file otherwise. ``mmap_mode="r"``
    maps the file instead of reading it: only the rows used are read (the detector's large dumps). The header's
    shape and dtype are checked against the file's size first, so a small file that claims a huge array is refused
    before anything is allocated."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(f)
            claimed = f.tell() + math.prod(shape) * dtype.itemsize
        size = os.path.getsize(path)
        if dtype.hasobject or claimed != size:
            why = "Python objects" if dtype.hasobject else f"{shape} {dtype} in {claimed} bytes, the file holds {size}"
            raise ValueError(f"its header describes {why}")
    except ValueError as exc:
        raise ValueError(f"{path} is not a plain .npy array ({exc})") from None
    if mmap_mode is None:  # read whole: an array the memory cannot hold (a sparse file) is refused by its size
        check_memory(str(path), math.prod(shape), f"values of {dtype}", dtype.itemsize)
    array = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    # big-endian arrays (saved on another machine) in the native order: torch takes no other
    return array if array.dtype.isnative or mmap_mode is not None else array.astype(array.dtype.newbyteorder("="))


def save_figure(fig, path: str | os.PathLike, dpi: int | None = None) -> Path:
    """A matplotlib Figure as PNG at ``path``, atomically; a ``dpi`` whose RGBA canvas could not fit in memory is
    refused before it is drawn."""
    width, height = fig.get_size_inches()
    pixels = round(width * (dpi or fig.dpi)) * round(height * (dpi or fig.dpi))
    check_memory(f"dpi={dpi or fig.dpi:g}", pixels, f"RGBA pixels of the {width:g}x{height:g}-inch figure", 4)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())
