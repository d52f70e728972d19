"""Pretrained folders: ``config.json`` (the constructor's arguments, flat, as the Hugging Face Hub's
``PyTorchModelHubMixin`` and diffusers write them) and ``model.safetensors``, each written atomically and read
strictly (the weights against the sha256 the config records); diffusers' folders (a variant's files, a sharded
set); a Hub repository id, downloaded or pushed through ``huggingface_hub``. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import torch

from .checks import check_path
from .files import atomic_write_bytes, make_folder, remove_stale_temp_files, versions
from .weights import DIFFUSERS_WEIGHTS, load_safetensors, locate_keys, read_json, read_shard_index, safetensors_torch

__all__ = [
    "PRETRAINED_CONFIG",
    "PRETRAINED_WEIGHTS",
    "save_pretrained",
    "resolve_pretrained",
    "load_pretrained",
    "read_config",
    "push_folder_to_hub",
]

PRETRAINED_CONFIG, PRETRAINED_WEIGHTS = "config.json", "model.safetensors"
WEIGHTS_SHA256 = "_weights_sha256"  # the key of config.json that pairs it with its model.safetensors


def save_pretrained(folder: str | os.PathLike, kind: str, config: dict, state_dict: dict) -> Path:
    """Write a pretrained folder, each file atomically: ``config.json``, the constructor's arguments as a
    flat JSON object (what ``huggingface_hub.PyTorchModelHubMixin`` and diffusers read) with
    ``_class_name`` (``kind``), ``_timestep_embed`` (the versions that wrote it) and ``_weights_sha256``, then
    ``model.safetensors`` (the tensors, on the CPU, ``{"format": "pt"}`` in its metadata). `load_pretrained` checks
    the weights against that sha256, so a save killed between its two files (the new config beside the old weights)
    is refused, not loaded; what an interrupted save left (``.model.safetensors.*.tmp``) is removed. Returns the
    folder."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a class name, got {kind!r}")
    reserved = sorted(k for k in config if k in ("_class_name", "_timestep_embed", WEIGHTS_SHA256))
    if reserved:
        raise ValueError(f"config: {reserved} are written by save_pretrained itself")
    folder = make_folder(Path(check_path(folder, "folder")), "folder")
    remove_stale_temp_files(folder, (PRETRAINED_WEIGHTS, PRETRAINED_CONFIG))
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    weights = safetensors_torch().save(tensors, metadata={"format": "pt"})
    document = {**config, "_class_name": kind, "_timestep_embed": versions()}
    document[WEIGHTS_SHA256] = hashlib.sha256(weights).hexdigest()
    atomic_write_bytes(folder / PRETRAINED_CONFIG, (json.dumps(document, indent=2) + "\n").encode())
    atomic_write_bytes(folder / PRETRAINED_WEIGHTS, weights)
    return folder


def resolve_pretrained(
    name_or_path: str | os.PathLike, subfolder: str | None = None, revision: str | None = None
) -> Path:
    """The local folder of ``name_or_path``: a folder on disk (``subfolder`` inside it), else a Hugging Face
    Hub repository id, downloaded (config and safetensors files only) through ``huggingface_hub``."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(
            f"name_or_path must be a folder or a Hub repository id (str), got {type(name_or_path).__name__}"
        )
    if subfolder is not None and (
        not isinstance(subfolder, str) or Path(subfolder).is_absolute() or ".." in Path(subfolder).parts
    ):
        raise ValueError(f"subfolder must be a relative folder name inside the repository, got {subfolder!r}")
    local = Path(name_or_path)
    if local.is_dir():
        folder = local / subfolder if subfolder else local
        if not folder.is_dir():
            raise FileNotFoundError(
                f"{local}: no subfolder {subfolder!r} (it has {sorted(p.name for p in local.iterdir())})"
            )
        return folder
    name = os.fspath(name_or_path)
    if local.exists() or name.count("/") != 1 or name.startswith((".", "/")):
        raise FileNotFoundError(f"name_or_path {name!r} is neither a folder nor a Hub repository id (owner/name)")
    try:
        import huggingface_hub
    except ImportError as exc:  # optional dependency
        raise ImportError(
            f"{name!r} is not a folder here; downloading it from the Hub needs huggingface_hub: "
            "pip install huggingface_hub"
        ) from exc
    patterns = (
        ["*.json", "*.safetensors"] if subfolder is None else [f"{subfolder}/*.json", f"{subfolder}/*.safetensors"]
    )
    try:
        root = huggingface_hub.snapshot_download(name, revision=revision, allow_patterns=patterns)
    except Exception as exc:  # offline, unknown repository, gated ...: say which and why
        raise FileNotFoundError(f"{name!r}: not a local folder, and the Hub download failed ({exc})") from exc
    return Path(root) / subfolder if subfolder else Path(root)


def _variant(name: str, variant: str | None) -> str:
    """diffusers' name of a variant's file: the variant before the last suffix (``diffusion_pytorch_model.fp16
    .safetensors``, ``diffusion_pytorch_model.safetensors.index.fp16.json``)."""
    if variant is None:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def _read_weights(folder: Path, sha256: str | None = None, variant: str | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of a pretrained folder: ``model.safetensors`` (refused unless its sha256 is ``sha256``, when
    given), diffusers' ``diffusion_pytorch_model.safetensors``, or the shards an ``*.safetensors.index.json`` lists
    (each key in the shard it names, `locate_keys`);
    with ``variant`` (``"fp16"``), diffusers' files of that variant."""
    for name in (PRETRAINED_WEIGHTS, DIFFUSERS_WEIGHTS):
        file = folder / _variant(name, variant)
        if file.is_file():
            return load_safetensors(file, sha256)[0]
    for name in (PRETRAINED_WEIGHTS, DIFFUSERS_WEIGHTS):
        index = folder / _variant(f"{name}.index.json", variant)
        if index.is_file():
            shards = read_shard_index(index)
            loaded = {folder / s: load_safetensors(folder / s)[0] for s in sorted(set(shards.values()))}
            locate_keys(loaded, index, shards)
            return {k: v for tensors in loaded.values() for k, v in tensors.items()}
    found = sorted(p.name for p in folder.glob("*.safetensors"))
    hint = f"; it holds {found}" + ("" if variant else ": a diffusers variant's files load with variant='fp16' ...")
    raise FileNotFoundError(
        f"{folder}: no {_variant(PRETRAINED_WEIGHTS, variant)} or {_variant(DIFFUSERS_WEIGHTS, variant)} (nor a "
        f"sharded index){hint if found else ''}"
    )


def load_pretrained(
    folder: str | os.PathLike,
    kind: str | None = None,
    *,
    subfolder: str | None = None,
    revision: str | None = None,
    variant: str | None = None,
) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, state_dict)`` of a pretrained folder (or Hub repository, see `resolve_pretrained`); ``variant``:
    diffusers' variant of the weights (``"fp16"``: ``diffusion_pytorch_model.fp16.safetensors``).

    ``config`` is the flat ``config.json`` (``_class_name`` included). Folders written before the flat
    format (``{"class": kind, "config": {...}}``) still load: their config is returned flat (a UNet's
    ``{"model": ..., "run": ...}`` as the model's fields plus ``"run"``). With ``kind``, a folder of another
    class is refused by name. Raises FileNotFoundError or ValueError naming the folder and what is wrong (a
    ``CheckpointError`` for the weights: a corrupt file, a key in two shards or not in the shard the index names).
    """
    if variant is not None and not (isinstance(variant, str) and re.fullmatch(r"[A-Za-z0-9_-]+", variant)):
        raise ValueError(f"variant must be a name such as 'fp16', got {variant!r}")
    path = resolve_pretrained(folder, subfolder, revision)
    config_file = path / PRETRAINED_CONFIG
    if not config_file.is_file():
        models = sorted(p.parent.name for p in path.glob(f"*/{PRETRAINED_CONFIG}"))
        pipeline = f": a pipeline's folder; its models are in subfolder= {models}" if models else ""
        raise FileNotFoundError(f"{path}: not a pretrained folder (missing {PRETRAINED_CONFIG}){pipeline}")
    config = read_config(config_file)
    found = config.get("_class_name")
    if kind is not None and found != kind:
        what = f"a diffusers {found}" if "_diffusers_version" in config else f"a {found}"
        raise ValueError(f"{path} holds {what}, not a {kind}")
    return config, _read_weights(path, config.get(WEIGHTS_SHA256), variant)


def read_config(config_file: Path) -> dict:
    """A pretrained folder's ``config.json``, flat: the format before it (``{"class": kind, "config": {...}}``, a
    UNet's ``{"model": ..., "run": ...}``) as the flat one holds it (the model's fields, ``"run"``, ``_class_name``)."""
    config = read_json(config_file)
    if "class" in config and isinstance(config.get("config"), dict) and "_class_name" not in config:
        nested = config["config"]
        if "model" in nested and not isinstance(nested["model"], dict):
            raise ValueError(
                f"{config_file}: config.model must be an object of the model's fields (the format before the flat "
                f"config.json), got {type(nested['model']).__name__} {nested['model']!r:.80}"
            )
        flat = {**nested.get("model", {}), "run": nested.get("run")} if "model" in nested else dict(nested)
        config = {**flat, "_class_name": config["class"]}
    return config


def push_folder_to_hub(folder: str | os.PathLike, repo_id: str, *, private: bool | None = None, token=None) -> str:
    """Upload a pretrained folder to the Hugging Face Hub repository ``repo_id`` (created if missing), through
    ``huggingface_hub``; returns the commit's URL."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise ValueError(f"repo_id must be 'owner/name', got {repo_id!r}")
    try:
        import huggingface_hub
    except ImportError as exc:  # optional dependency
        raise ImportError("push_to_hub needs huggingface_hub: pip install huggingface_hub") from exc
    api = huggingface_hub.HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id, folder_path=os.fspath(folder), commit_message="Upload with timestep-embed"
    )
    return str(getattr(commit, "commit_url", commit))
