"""Checkpoints as safetensors: tensors only, the config and metadata as JSON, written atomically.

Nothing is ever unpickled: a checkpoint cannot carry code. The layout of one file:

* tensors: any flat ``{name: Tensor}``; by convention model weights under ``model.``, the EMA copy
  under ``ema.``, the optimizer's tensors under ``optim.`` (see :func:`flatten_optimizer_state`),
  RNG states as uint8 tensors under ``rng.``;
* metadata: one JSON document (the resolved config, the step, the optimizer's non-tensor state...)
  stored in the safetensors header under the key ``timestep_embed``.

Writes go to a temporary file in the same folder, are fsync'ed, then ``os.replace``'d over the
target, so a crash at any moment leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import torch

META_KEY = "timestep_embed"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or corrupt; the message names the file."""


def _write_all(f, data: bytes) -> None:
    # One place that writes the bytes, so tests can simulate a crash in the middle of it.
    f.write(data)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
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


def save_checkpoint(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> Path:
    """Save ``tensors`` (any dtypes, moved to CPU) and JSON-able ``metadata`` to ``path`` atomically."""
    from safetensors.torch import save

    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"tensors[{bad[0]!r}] is a {type(tensors[bad[0]]).__name__}, not a Tensor; put it in metadata")
    try:
        meta_json = json.dumps(metadata or {}, allow_nan=True)
    except TypeError as exc:
        raise TypeError(f"checkpoint metadata is not JSON-able: {exc}") from exc
    # clone(): safetensors refuses tensors that share storage (tied weights, views of one buffer)
    flat = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    return atomic_write_bytes(path, save(flat, metadata={META_KEY: meta_json}))


def read_header(path: str | os.PathLike, data: bytes | None = None) -> dict:
    """The parsed safetensors JSON header of ``path``, validated against the file size."""
    path = Path(path)
    if data is None:
        if not path.is_file():
            raise CheckpointError(f"checkpoint not found: {path}")
        data = path.read_bytes()
    if len(data) < 8:
        raise CheckpointError(f"{path}: truncated or not a safetensors file ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise CheckpointError(f"{path}: truncated: the header claims {n} bytes, only {len(data) - 8} follow")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt safetensors header ({exc})") from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != len(data):
        what = "truncated" if 8 + n + end > len(data) else "has trailing bytes"
        raise CheckpointError(f"{path}: {what}: the header describes {8 + n + end} bytes, the file holds {len(data)}")
    return header


def load_checkpoint(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[dict[str, torch.Tensor], dict]:
    """Load ``(tensors, metadata)`` from a file written by :func:`save_checkpoint` (any safetensors
    file works; its metadata is then ``{}``). Raises :class:`CheckpointError` naming the file."""
    from safetensors.torch import load

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    data = path.read_bytes()
    header = read_header(path, data)
    try:
        tensors = load(data)
    except Exception as exc:  # safetensors' SafetensorError is not exported in a stable place
        raise CheckpointError(f"{path}: corrupt safetensors file ({exc})") from exc
    meta_json = (header.get("__metadata__") or {}).get(META_KEY, "{}")
    try:
        metadata = json.loads(meta_json)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: corrupt metadata JSON ({exc})") from exc
    if str(device) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors, metadata


# ----------------------------------------------------------------------------- helpers
def with_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """``{"w": t}`` -> ``{prefix + "w": t}`` (e.g. a model's state_dict under ``"ema."``)."""
    return {prefix + k: v for k, v in state.items()}


def strip_prefix(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``tensors`` whose names start with ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def flatten_optimizer_state(state_dict: dict, prefix: str = "optim.") -> tuple[dict[str, torch.Tensor], dict]:
    """An optimizer ``state_dict()`` (AdamW, Adam, SGD...) as (tensors, JSON-able metadata).

    Tensors go to ``{prefix}state.{param_id}.{name}`` (including AdamW's scalar ``step``); everything
    else (param_groups with lr, betas, weight_decay...; non-tensor state) goes into the JSON part, so
    ``unflatten_optimizer_state`` restores a state dict that resumes bit-exactly.
    """
    tensors: dict[str, torch.Tensor] = {}
    plain_state: dict[str, dict[str, Any]] = {}
    for pid, entry in state_dict["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}state.{pid}.{name}"] = value
            else:
                plain_state.setdefault(str(pid), {})[name] = value
    meta = {
        "param_groups": state_dict["param_groups"],
        "plain_state": plain_state,
        "param_ids": [str(pid) for pid in state_dict["state"]],
    }
    return tensors, json.loads(json.dumps(meta))  # fail here, not at save time, if not JSON-able


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict, prefix: str = "optim.") -> dict:
    """Inverse of :func:`flatten_optimizer_state`: a dict for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {int(pid): {} for pid in meta["param_ids"]}
    for key, value in tensors.items():
        if key.startswith(prefix + "state."):
            pid, name = key[len(prefix) + len("state.") :].split(".", 1)
            state.setdefault(int(pid), {})[name] = value
    for pid, entries in meta.get("plain_state", {}).items():
        state.setdefault(int(pid), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}
