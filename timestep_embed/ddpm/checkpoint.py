"""Checkpoints as safetensors: tensors only, the config and metadata as JSON, written atomically.

Nothing is ever unpickled: a checkpoint cannot carry code. The layout of one file:

* tensors: any flat ``{name: Tensor}``; by convention model weights under ``model.``, the EMA copy
  under ``ema.``, the optimizer's tensors under ``optim.`` (see :func:`flatten_optimizer_state`),
  RNG states as uint8 tensors under ``rng.``;
* metadata: one JSON document (the resolved config, the step, the optimizer's non-tensor state...)
  stored in the safetensors header under the key ``timestep_embed``.

Writes go through :func:`timestep_embed.files.atomic_write_bytes`: a crash at any moment leaves
either the old file or the new one, never a torn one. :func:`load_model` is the one reader of a
run's weights (sampling, figures, export all use it).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import torch

from ..files import PRETRAINED_CONFIG, atomic_write_bytes, load_pretrained, safetensors_torch
from .config import RunConfig, load_run_config
from .configfile import ConfigError
from .unet import UNet

__all__ = [
    "CheckpointError",
    "RUN_CHECKPOINT",
    "save_checkpoint",
    "read_header",
    "load_checkpoint",
    "read_metadata",
    "load_model",
    "export_run",
    "with_prefix",
    "strip_prefix",
    "flatten_optimizer_state",
    "unflatten_optimizer_state",
]

META_KEY = "timestep_embed"
RUN_CHECKPOINT = "checkpoint.safetensors"  # the file a training run keeps in its folder


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or corrupt; the message names the file."""


def save_checkpoint(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict | None = None) -> Path:
    """Save ``tensors`` (any dtypes, moved to CPU) and JSON-able ``metadata`` to ``path`` atomically."""

    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"tensors[{bad[0]!r}] is a {type(tensors[bad[0]]).__name__}, not a Tensor; put it in metadata")
    try:
        meta_json = json.dumps(metadata or {}, allow_nan=True)
    except TypeError as exc:
        raise TypeError(f"checkpoint metadata is not JSON-able: {exc}") from exc
    # clone(): safetensors refuses tensors that share storage (tied weights, views of one buffer)
    flat = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    return atomic_write_bytes(path, safetensors_torch().save(flat, metadata={META_KEY: meta_json}))


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
    if data[8:9] != b"{":  # a safetensors header is a JSON object right after its 8-byte length
        raise CheckpointError(f"{path}: not a safetensors file (no JSON header after the first 8 bytes)")
    if n > len(data) - 8:
        raise CheckpointError(f"{path}: truncated: the header claims {n} bytes, only {len(data) - 8} follow")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt safetensors header ({exc})") from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise CheckpointError(f"{path}: corrupt safetensors header (a tensor entry without data_offsets)") from exc
    if 8 + n + end != len(data):
        what = "truncated" if 8 + n + end > len(data) else "has trailing bytes"
        raise CheckpointError(f"{path}: {what}: the header describes {8 + n + end} bytes, the file holds {len(data)}")
    return header


def read_metadata(path: str | os.PathLike) -> dict:
    """The metadata of a checkpoint (the JSON part) without reading its tensors into tensors."""
    header = read_header(path)
    try:
        return json.loads((header.get("__metadata__") or {}).get(META_KEY, "{}"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: corrupt metadata JSON ({exc})") from exc


def load_checkpoint(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[dict[str, torch.Tensor], dict]:
    """Load ``(tensors, metadata)`` from a file written by :func:`save_checkpoint` (any safetensors
    file works; its metadata is then ``{}``). Raises :class:`CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    data = path.read_bytes()
    header = read_header(path, data)
    try:
        tensors = safetensors_torch().load(data)
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


def load_model(path: str | os.PathLike, time_embedder=None, ema: bool = True, device="cpu") -> tuple[UNet, RunConfig]:
    """``(UNet in eval mode, RunConfig)`` from a run folder, its ``checkpoint.safetensors``, or a
    folder written by :func:`export_run`.

    ``ema``: the EMA weights (what sampling uses) or the raw ones (run checkpoints only).
    ``time_embedder``: as in :class:`~timestep_embed.ddpm.unet.UNet` (its state must match the checkpoint's).
    """
    path = Path(path)
    if path.is_dir() and (path / PRETRAINED_CONFIG).is_file() and time_embedder is None:
        config, _ = load_pretrained(path, "UNet")
        if not config.get("run"):
            raise CheckpointError(f"{path}: an exported UNet without its run config cannot be sampled from")
        return UNet.from_pretrained(path).to(device), load_run_config(config["run"])
    file = path / RUN_CHECKPOINT if path.is_dir() else path
    tensors, meta = load_checkpoint(file)
    if "config" not in meta:
        raise CheckpointError(f"{file}: no training config in its metadata (not written by timestep-embed train)")
    try:
        cfg = load_run_config(meta["config"])
    except ConfigError as exc:
        raise CheckpointError(f"{file}: its stored config is invalid: {exc}") from exc
    model = UNet(cfg.model, time_embedder)
    prefix = "ema." if ema else "model."
    try:
        model.load_state_dict(strip_prefix(tensors, prefix))
    except RuntimeError as exc:
        raise CheckpointError(f"{file}: the {prefix!r} weights do not fit the stored model config: {exc}") from exc
    return model.to(device).eval(), cfg


def export_run(run: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The EMA weights of a run as a pretrained folder (``config.json`` with the run's config and the
    versions, ``model.safetensors``): a fraction of the run checkpoint, which also holds the raw
    weights, the optimizer and the RNG state. ``UNet.from_pretrained(out)`` and :func:`load_model` read it."""
    model, cfg = load_model(run, ema=True)
    return model.save_pretrained(out, run_config=cfg)
