"""A training run's checkpoint: one safetensors file, tensors only, the config and counters as JSON.

Nothing is ever unpickled: a checkpoint cannot carry code. ``RUN/checkpoint.safetensors`` holds

* tensors ``model.*`` (the raw weights), ``ema.*`` (the EMA weights: what sampling uses),
  ``optim.state.<param>.<name>`` (AdamW's moments and step, see
  [`flatten_optimizer_state`][timestep_embed.ddpm.checkpoint.flatten_optimizer_state]), ``rng.generator`` (the generator
  behind batches, t and noise), ``rng.torch`` (the global RNG) and, for a generator on CUDA or MPS, ``rng.device``
  (that device's default generator: dropout's draws there);
* metadata: one JSON document under the header key ``timestep_embed``: ``{"config": <RunConfig as a
  dict>, "step", "elapsed_s", "optimizer": <param groups and non-tensor state>, "generator_device",
  "versions"}``.

Restoring all of it ([`load_training_state`][timestep_embed.ddpm.checkpoint.load_training_state]) makes ``--resume``
continue bit-exactly (with a step budget, on the CPU). Writes are atomic (``timestep_embed.files.atomic_write_bytes``):
a crash at any moment leaves the old file or the new one. Every read goes through the one strict reader,
``timestep_embed.weights.load_safetensors``, which refuses truncated, padded or non-safetensors files
with a [`CheckpointError`][timestep_embed.ddpm.CheckpointError] naming the file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..files import atomic_write_bytes
from ..files import versions as package_versions
from ..weights import CheckpointError, load_safetensors, read_safetensors_header, safetensors_torch

__all__ = [
    "CheckpointError",
    "RUN_CHECKPOINT",
    "save_checkpoint",
    "load_checkpoint",
    "read_metadata",
    "with_prefix",
    "strip_prefix",
    "flatten_optimizer_state",
    "unflatten_optimizer_state",
    "save_training_state",
    "load_training_state",
]

log = logging.getLogger(__name__)

META_KEY = "timestep_embed"
RUN_CHECKPOINT = "checkpoint.safetensors"  # the file a training run keeps in its folder


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


def _metadata(path: Path, header_metadata: dict) -> dict:
    try:
        meta = json.loads(header_metadata.get(META_KEY, "{}"))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(f"{path}: corrupt metadata JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: corrupt metadata JSON (not an object)")
    return meta


def read_metadata(path: str | os.PathLike) -> dict:
    """The metadata of a checkpoint (the JSON part), reading only the file's header."""
    return _metadata(Path(path), read_safetensors_header(path).get("__metadata__") or {})


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """``(tensors, metadata)`` of a file written by [`save_checkpoint`][timestep_embed.ddpm.checkpoint.save_checkpoint]
    (any safetensors file works; its metadata is then ``{}``). Raises
    [`CheckpointError`][timestep_embed.ddpm.CheckpointError] naming the file."""
    tensors, header_metadata = load_safetensors(path)
    return tensors, _metadata(Path(path), header_metadata)


# ----------------------------------------------------------------------------- state dicts
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
    groups = [dict(g) for g in state_dict["param_groups"]]
    for g in groups:  # a step captured as a CUDA graph sets a tensor lr and capturable: how a run steps, not state
        g.update({k: v.item() for k, v in g.items() if isinstance(v, torch.Tensor)})
        if "capturable" in g:
            g["capturable"] = False
    meta = {"param_groups": groups, "plain_state": plain_state, "param_ids": [str(pid) for pid in state_dict["state"]]}
    return tensors, json.loads(json.dumps(meta))  # fail here, not at save time, if not JSON-able


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict, prefix: str = "optim.") -> dict:
    """Inverse of [`flatten_optimizer_state`][timestep_embed.ddpm.checkpoint.flatten_optimizer_state]: a dict for
    ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {int(pid): {} for pid in meta["param_ids"]}
    for key, value in tensors.items():
        if key.startswith(prefix + "state."):
            pid, name = key[len(prefix) + len("state.") :].split(".", 1)
            state.setdefault(int(pid), {})[name] = value
    for pid, entries in meta.get("plain_state", {}).items():
        state.setdefault(int(pid), {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


# ----------------------------------------------------------------------------- training state
def save_training_state(
    path: str | os.PathLike,
    config: dict,
    model: nn.Module,
    ema: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    step: int,
    elapsed: float,
) -> Path:
    """Everything ``--resume`` needs, in one file (the layout is in the module docstring); ``config``:
    the run's config as a dict (``RunConfig.to_dict()``)."""
    opt_tensors, opt_meta = flatten_optimizer_state(optimizer.state_dict())
    tensors = {
        **with_prefix(model.state_dict(), "model."),
        **with_prefix(ema.state_dict(), "ema."),
        **opt_tensors,
        "rng.generator": generator.get_state(),
        "rng.torch": torch.get_rng_state(),
    }
    device_state = device_rng_state(generator.device)
    if device_state is not None:
        tensors["rng.device"] = device_state
    meta = {
        "config": config,
        "step": step,
        "elapsed_s": elapsed,
        "optimizer": opt_meta,
        "generator_device": str(generator.device),
        "versions": package_versions(),
    }
    return save_checkpoint(path, tensors, meta)


def load_training_state(
    path: str | os.PathLike,
    model: nn.Module,
    ema: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    *,
    own_generators: bool = True,
) -> tuple[int, float]:
    """Restore what [`save_training_state`][timestep_embed.ddpm.checkpoint.save_training_state] wrote into these
    objects; returns (step, elapsed seconds). The optimizer's tensors follow its parameters' device. The generators'
    states are restored unless they are not this process's (``own_generators=False``: the checkpoint holds rank 0's)
    or ``generator`` is on another kind of device than the checkpoint's (its state does not fit; a warning says so):
    then ``generator`` and the global RNG go on from
    [`resumed_seed`][timestep_embed.ddpm.checkpoint.resumed_seed] of the generator's own seed and the step."""
    tensors, meta = load_checkpoint(path)
    try:
        model.load_state_dict(strip_prefix(tensors, "model."))
        ema.load_state_dict(strip_prefix(tensors, "ema."))
        optimizer.load_state_dict(unflatten_optimizer_state(tensors, meta["optimizer"]))
        step, elapsed = int(meta["step"]), float(meta["elapsed_s"])
        saved_on = torch.device(meta.get("generator_device", "cpu")).type
        if saved_on != generator.device.type:
            log.warning("%s: resumed on %s, trained on %s: the batches, timesteps and noise go on from a new seed",
                        path, generator.device.type, saved_on)  # fmt: skip
        if not own_generators or saved_on != generator.device.type:
            reseed(generator, resumed_seed(generator.initial_seed(), step))
            return step, elapsed
        generator.set_state(tensors["rng.generator"])
        torch.set_rng_state(tensors["rng.torch"])
        if "rng.device" in tensors:
            set_device_rng_state(generator.device, tensors["rng.device"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: does not match this run's model and config ({exc})") from exc
    return step, elapsed


def resumed_seed(own_seed: int, step: int) -> int:
    """The seed a resumed process draws on from when the checkpoint's generators are not its own (another rank's, or
    another kind of device's): a function of its own seed and the step, so no two ranks or resumes share draws."""
    return own_seed * 1_000_003 + step


def reseed(generator: torch.Generator, seed: int) -> None:
    """``generator`` and the global RNG (every device's default generator: dropout's) seeded with ``seed``."""
    generator.manual_seed(seed)
    torch.manual_seed(seed)


def device_rng_state(device: torch.device) -> torch.Tensor | None:
    """The state of the default generator of a CUDA or MPS ``device`` (what dropout draws from there); None elsewhere
    (the CPU's is ``torch.get_rng_state``)."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.mps.get_rng_state() if device.type == "mps" else None


def set_device_rng_state(device: torch.device, state: torch.Tensor) -> None:
    """Restore what [`device_rng_state`][timestep_embed.ddpm.checkpoint.device_rng_state] returned for ``device``."""
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    elif device.type == "mps":
        torch.mps.set_rng_state(state)
