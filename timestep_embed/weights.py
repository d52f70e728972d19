"""Weights files: the one strict safetensors reader, and pretrained folders.

Every weights file the package loads goes through `load_safetensors`, which checks the header against
the file size first (truncated, padded or non-safetensors files get a `CheckpointError` naming the
file). Pretrained folders (`save_pretrained`) hold ``config.json`` (the constructor's arguments, flat,
as the Hugging Face Hub's ``PyTorchModelHubMixin`` and diffusers write them) and ``model.safetensors``:
no pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from .checks import check_path
from .files import atomic_write_bytes, make_folder, remove_stale_temp_files, versions

__all__ = [
    "PRETRAINED_CONFIG",
    "PRETRAINED_WEIGHTS",
    "DIFFUSERS_WEIGHTS",
    "safetensors_torch",
    "CheckpointError",
    "MAX_HEADER_BYTES",
    "read_safetensors_header",
    "load_safetensors",
    "save_pretrained",
    "resolve_pretrained",
    "read_json",
    "read_shard_index",
    "locate_keys",
    "load_pretrained",
    "push_folder_to_hub",
]

PRETRAINED_CONFIG, PRETRAINED_WEIGHTS = "config.json", "model.safetensors"
WEIGHTS_SHA256 = "_weights_sha256"  # the key of config.json that pairs it with its model.safetensors
DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
MAX_JSON_BYTES, MAX_JSON_DEPTH = 1 << 20, 32  # a config is small and flat; bigger or deeper is not one


def safetensors_torch():
    """``safetensors.torch``, or an ImportError with the install hint (an optional dependency)."""
    try:
        import safetensors.torch
    except ImportError as exc:  # optional dependency
        raise ImportError("weights files need safetensors: pip install 'timestep-embed[train]'") from exc
    return safetensors.torch


class CheckpointError(ValueError):
    """A weights file is missing, truncated, corrupt or not safetensors; the message names the file."""


MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header


def _parse_header(path: Path, head: bytes, size: int) -> dict:
    """The JSON header of a safetensors file from its first bytes ``head`` (8-byte length + JSON), checked
    against the file's ``size``: every tensor's data inside the file, no trailing bytes."""
    if size < 8 or len(head) < 8:
        raise CheckpointError(f"{path}: truncated or not a safetensors file ({size} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if head[8:9] != b"{":  # a safetensors header is a JSON object right after its 8-byte length
        raise CheckpointError(f"{path}: not a safetensors file (no JSON header after the first 8 bytes)")
    if n > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{path}: the header claims {n} bytes; a safetensors header holds at most {MAX_HEADER_BYTES}"
        )
    if n > size - 8 or len(head) < 8 + n:
        raise CheckpointError(f"{path}: truncated: the header claims {n} bytes, only {size - 8} follow")
    try:  # a key given twice would silently keep its last entry (safetensors' own reader keeps it)
        header = json.loads(head[8 : 8 + n], object_pairs_hook=_unique_keys)
    except KeyError as exc:
        raise CheckpointError(f"{path}: corrupt safetensors header (the key {exc} is given twice)") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise CheckpointError(f"{path}: corrupt safetensors header ({why})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(
            f"{path}: corrupt safetensors header (__metadata__ must map names to strings, got {meta!r:.80})"
        )
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, IndexError, ValueError, OverflowError) as exc:  # OverflowError: Infinity, 1e400
        what = "a tensor entry without integer data_offsets"
        raise CheckpointError(f"{path}: corrupt safetensors header ({what})") from exc
    if 8 + n + end != size:
        what = "truncated" if 8 + n + end > size else "has trailing bytes"
        raise CheckpointError(f"{path}: {what}: the header describes {8 + n + end} bytes, the file holds {size}")
    return header


def read_safetensors_header(path: str | os.PathLike) -> dict:
    """The checked JSON header of a safetensors file (its ``__metadata__`` included), reading only the header:
    our checks first (their messages are plainer), then safetensors' own of every entry (dtype, shape, offsets
    without gap or overlap)."""
    path = Path(check_path(path, "path"))
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        head += f.read(min(n, MAX_HEADER_BYTES + 1))
    header = _parse_header(path, head, path.stat().st_size)
    try:  # opening maps the file and checks the header; no tensor is read
        with safetensors_torch().safe_open(str(path), "pt"):
            pass
    except Exception as exc:  # its SafetensorError is not exported in a stable place
        raise CheckpointError(f"{path}: corrupt safetensors file ({str(exc).splitlines()[0]})") from None
    return header


def load_safetensors(
    path: str | os.PathLike, sha256: str | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file, on the CPU, after the checks of
    [`read_safetensors_header`][timestep_embed.weights.read_safetensors_header]; with ``sha256`` (what a pretrained
    folder's ``config.json`` records of its weights), refused unless the file's digest is that. The one reader of
    every weights file the package loads."""
    path = Path(check_path(path, "path"))
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    data = path.read_bytes()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError(
            f"{path.parent}: {path.name} is not the file {PRETRAINED_CONFIG} was saved with (a save interrupted "
            "between its two files?): save the folder again"
        )
    n = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
    header = _parse_header(path, data[: 8 + min(n, MAX_HEADER_BYTES + 1)], len(data))
    try:
        tensors = safetensors_torch().load(data)
    except Exception as exc:  # safetensors' SafetensorError is not exported in a stable place
        raise CheckpointError(f"{path}: corrupt safetensors file ({exc})") from exc
    return tensors, dict(header.get("__metadata__") or {})


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


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise KeyError(key)
        seen[key] = value
    return seen


def read_json(path: Path, limit: int = MAX_JSON_BYTES, depth: int = MAX_JSON_DEPTH) -> dict:
    """A JSON object from ``path``: at most ``limit`` bytes and ``depth`` levels of nesting, else a
    ValueError naming the file and the limit (a huge or deeply nested file is refused, not parsed), or the key
    an object gives twice."""
    size = path.stat().st_size
    if size > limit:
        raise ValueError(f"{path}: {size} bytes; a config file is refused above {limit} bytes")
    text = path.read_bytes()
    level = deepest = 0
    in_string = escaped = False
    for byte in text:  # the nesting, counted before json parses (and recurses into) it
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            level += 1
            deepest = max(deepest, level)
        elif byte in (0x5D, 0x7D):
            level -= 1
    if deepest > depth:
        raise ValueError(f"{path}: nested {deepest} levels deep; a config file is refused above {depth} levels")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    except KeyError as exc:
        raise ValueError(
            f"{path}: the key {exc.args[0]!r} is given twice in one object (JSON would keep the last)"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_shard_index(index: Path) -> dict[str, str]:
    """The ``weight_map`` of a shard index (``*.safetensors.index.json``): each key's file, a name in the index's
    folder; ValueError naming the index otherwise."""
    shards = read_json(index).get("weight_map")
    if not isinstance(shards, dict) or not shards:
        raise ValueError(f"{index}: no weight_map of each key's file in this folder, got {shards!r:.80}")
    for key, shard in shards.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard:
            raise ValueError(f"{index}: the shard {shard!r:.80} of {key!r} is not a file name in this folder")
    return shards


def locate_keys(
    files: Mapping[Path, Iterable[str]], index_file: Path | None = None, index: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """The file holding each key of ``files`` (each file's keys). CheckpointError, naming the key, when a key is
    in two files (a reader would keep the last one read), or, with the shard ``index`` read from ``index_file``,
    when the shards do not hold exactly the keys it lists, each in the file it names (a shard of another
    download, or one cut short): the one check of every reader of several weights files."""
    where: dict[str, Path] = {}
    for file, keys in files.items():
        for key in keys:
            if key in where:
                raise CheckpointError(f"{key!r} is in two files, {where[key]} and {file}; a checkpoint holds it once")
            where[key] = file
    if index is None:
        return where
    wrong = [k for k, file in index.items() if k not in where or where[k].name != file]
    wrong += [k for k in where if k not in index]
    if wrong:
        k = wrong[0]
        said = f"in {index[k]}" if k in index else "not listed"
        found = f"in {where[k].name}" if k in where else "in no shard"
        raise CheckpointError(
            f"{index_file} and its shards disagree on {len(wrong)} key(s), e.g. {k!r}: the index has it {said}, "
            f"it is {found}; download the folder again"
        )
    return where


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
    found = config.get("_class_name")
    if kind is not None and found != kind:
        what = f"a diffusers {found}" if "_diffusers_version" in config else f"a {found}"
        raise ValueError(f"{path} holds {what}, not a {kind}")
    return config, _read_weights(path, config.get(WEIGHTS_SHA256), variant)


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
