"""Weights files: the one strict safetensors reader, the JSON beside them, and the index of a sharded set.

Every weights file the package loads goes through `load_safetensors`, which checks the header against
the file size first (truncated, padded or non-safetensors files get a `CheckpointError` naming the
file); `read_json` reads a config or an index with limits on its size and nesting; `locate_keys` is the
one check that each key of several files is in one file, the one its shard index names. Pretrained
folders (``config.json`` + ``model.safetensors``) are in `timestep_embed.folders`. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from .checks import check_path

__all__ = [
    "DIFFUSERS_WEIGHTS",
    "safetensors_torch",
    "CheckpointError",
    "MAX_HEADER_BYTES",
    "read_safetensors_header",
    "load_safetensors",
    "read_json",
    "read_shard_index",
    "locate_keys",
]

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
            f"{path.parent}: {path.name} is not the file config.json was saved with (a save interrupted "
            "between its two files?): save the folder again"
        )
    n = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
    header = _parse_header(path, data[: 8 + min(n, MAX_HEADER_BYTES + 1)], len(data))
    try:
        tensors = safetensors_torch().load(data)
    except Exception as exc:  # safetensors' SafetensorError is not exported in a stable place
        raise CheckpointError(f"{path}: corrupt safetensors file ({exc})") from exc
    return tensors, dict(header.get("__metadata__") or {})


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
            f"{index_file or 'the shard index'} and its shards disagree on {len(wrong)} key(s), e.g. {k!r}: the "
            f"index has it {said}, it is {found}; download the folder again"
        )
    return where
