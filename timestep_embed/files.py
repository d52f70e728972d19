"""Writing result files: atomically (temp file in the same folder, fsync, rename), with the user's
umask, and with the versions that wrote them.

A crash at any moment leaves either the old file or the new one, never a torn one; a temp file
left by a kill is named ``.<name>.<random>.tmp`` beside its target. Pretrained folders
(:func:`save_pretrained`) hold ``config.json`` and ``model.safetensors``: no pickle anywhere.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

import numpy as np
import torch

__all__ = [
    "PRETRAINED_CONFIG",
    "PRETRAINED_WEIGHTS",
    "package_version",
    "versions",
    "atomic_write_bytes",
    "save_npy",
    "load_npy",
    "save_figure",
    "safetensors_torch",
    "save_pretrained",
    "load_pretrained",
]

PRETRAINED_CONFIG, PRETRAINED_WEIGHTS = "config.json", "model.safetensors"


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


def load_npy(path: str | os.PathLike, mmap_mode: Literal["r", "c"] | None = None) -> np.ndarray:
    """A plain ``.npy`` array (never a pickle); ValueError naming the file otherwise. ``mmap_mode="r"``
    maps the file instead of reading it: only the rows used are read (the detector's large dumps)."""
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{path} is not a plain .npy array ({exc})") from None


def save_figure(fig, path: str | os.PathLike, dpi: int | None = None) -> Path:
    """A matplotlib Figure as PNG at ``path``, atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())


def safetensors_torch():
    """``safetensors.torch``, or an ImportError with the install hint (an optional dependency)."""
    try:
        import safetensors.torch
    except ImportError as exc:  # optional dependency
        raise ImportError("weights files need safetensors: pip install 'timestep-embed[train]'") from exc
    return safetensors.torch


def save_pretrained(folder: str | os.PathLike, kind: str, config: dict, state_dict: dict) -> Path:
    """Write ``folder/config.json`` (``{"class": kind, "config": config, "versions": ...}``) and
    ``folder/model.safetensors`` (the tensors, on the CPU), each atomically. Returns the folder."""
    folder = Path(folder)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    atomic_write_bytes(folder / PRETRAINED_WEIGHTS, safetensors_torch().save(tensors))
    document = {"class": kind, "config": config, "versions": versions()}
    atomic_write_bytes(folder / PRETRAINED_CONFIG, (json.dumps(document, indent=2) + "\n").encode())
    return folder


def load_pretrained(folder: str | os.PathLike, kind: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, state_dict)`` of a folder written by :func:`save_pretrained` for class ``kind``.

    Raises FileNotFoundError or ValueError naming the folder and what is wrong with it.
    """
    folder = Path(folder)
    paths = [folder / PRETRAINED_CONFIG, folder / PRETRAINED_WEIGHTS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{folder}: not a pretrained folder (missing {', '.join(missing)})")
    try:
        document = json.loads(paths[0].read_text())
        found = document["class"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{paths[0]}: not a config written by save_pretrained ({exc})") from exc
    if found != kind:
        raise ValueError(f"{folder} holds a {found}, not a {kind}")
    try:
        tensors = safetensors_torch().load(paths[1].read_bytes())
    except Exception as exc:  # safetensors' SafetensorError is not exported in a stable place
        raise ValueError(f"{paths[1]}: not a readable safetensors file ({exc})") from exc
    return document["config"], tensors
