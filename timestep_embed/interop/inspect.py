"""``timestep-embed inspect``: the model family, layout, time MLPs, timestep contract and precision of
a checkpoint, read from its header.

PATH is a ``.safetensors`` file or a diffusers model folder (``config.json`` with
``diffusion_pytorch_model.safetensors``, or the shards its one ``*.safetensors.index.json`` lists; several files
and no index are refused, as they need not be one model). Only the headers are
parsed and only the main time path's tensors are read (``safe_open``), so a 20 GB checkpoint answers in
the time its header takes. The layout is [`find_time_paths`][timestep_embed.nn.find_time_paths]' on meta
tensors of the header's shapes; a folder's ``_class_name`` decides between layouts with the same keys.
Where no layout fits, those whose time path is there are the closest, with the markers they miss.
Then the family's contract and the precision of its time path along its usual sampling run in the
checkpoint's dtype ([`schedule_precision`][timestep_embed.interop.precision.schedule_precision]).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..families import KNOWN_PREFIXES, LAYOUT_BY_CLASS, LAYOUTS, Layout, TimestepContract, get_contract
from ..families.registry import contract_of
from ..folders import read_config
from ..nn import LayoutMatch, TimestepEmbedder, find_time_paths
from ..nn.pretrained import diffusers_options, embedder_arguments
from ..weights import (
    DIFFUSERS_WEIGHTS,
    CheckpointError,
    locate_keys,
    read_safetensors_header,
    read_shard_index,
    safetensors_torch,
)
from .precision import SchedulePrecision, schedule_precision

__all__ = ["Inspection", "inspect_checkpoint"]

# safetensors' dtype names (its format's header) that this torch has; a tensor of another (F4, F6_*) is read as
# bytes, and refused as the time MLP's weight
_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
          "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
          "BOOL": "bool"}  # fmt: skip
_DTYPES = {name: getattr(torch, attr) for name, attr in _NAMES.items() if hasattr(torch, attr)}


@dataclass
class Inspection:
    """What `inspect_checkpoint` found: the files, the layout (``matched`` False: the closest, with the
    others that were as close in ``closest``), the keys that decided it, the time MLPs, the dtype and
    finiteness of the main one, the family's contract and its precision in that dtype; without a contract,
    the sinusoid (or Fourier features) its ``config.json`` describes (``sinusoid``, None where it says none)."""

    path: str
    files: list[str]
    tensors: int
    match: LayoutMatch
    matched: bool
    decided_by: list[str]
    closest: list[str]
    dtype: torch.dtype
    finite: bool
    contract: TimestepContract | None
    precision: SchedulePrecision | None
    sinusoid: str | None = None

    def summary(self) -> str:
        """The report as text, a few lines per part."""
        lay = self.match.layout
        what = "layout" if self.matched else "closest layout"
        also = f" (as close: {', '.join(self.closest)})" if self.closest else ""
        lines = [
            f"{self.path}: {self.tensors} tensors in {len(self.files)} file(s)",
            f"{what}: {lay.name}, family {lay.family or '(generic)'}, under prefix {self.match.prefix!r}{also}",
            *[f"  decided by: {d}" for d in self.decided_by],
            *[f"  not told apart by these keys: from_state_dict(..., layout={lay.name!r}) loads it as {lay.name}"]
            * (not self.matched),
            "time MLPs:",
            *[f"  {p.describe()}" for p in self.match.paths],
            f"  weights of the main one: {str(self.dtype).removeprefix('torch.')}, "
            + ("finite" if self.finite else "NOT finite (NaN or inf)"),
        ]
        if self.contract is None:
            if self.sinusoid is not None:
                said = f"from its saved config: {self.sinusoid}"
            else:
                said = "a file alone, no config.json to say it" if Path(self.path).is_file() else "not in config.json"
            return "\n".join([*lines, "contract: none (a generic layout)", f"  its time projection: {said}"])
        lines += ["contract:", *[f"  {line}" for line in self.contract.describe().splitlines()]]
        if self.precision is not None:
            lines += ["precision:", *[f"  {line}" for line in self.precision.summary().splitlines()]]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The report as JSON-able data (``--json``)."""
        c, p = self.contract, self.precision
        return {
            "path": self.path, "files": self.files, "tensors": self.tensors, "matched": self.matched,
            "layout": self.match.layout.name, "family": self.match.layout.family, "prefix": self.match.prefix,
            "decided_by": self.decided_by, "closest": self.closest, "dtype": str(self.dtype).removeprefix("torch."),
            "finite": self.finite, "time_paths": [dataclasses.asdict(t) for t in self.match.paths],
            "sinusoid": self.sinusoid,
            "contract": None if c is None else {
                "name": c.name, "family": c.family, "raw": c.raw, "raw_range": list(c.raw_range),
                "pipeline": c.pipeline, "inside": c.inside, "formed_in": c.formed_in, "convention": str(c.convention),
                "sinusoid_dim": c.sinusoid_dim, "mlp": c.mlp, "diffusers": c.diffusers, "sources": list(c.sources)},
            "precision": None if p is None else {
                "schedule": p.schedule, "steps": p.raw.numel(), "collisions": len(p.collisions),
                "step_fraction": p.step_fraction, "safe": p.safe},
        }  # fmt: skip


def _files(path: Path) -> tuple[list[Path], dict, Path | None, dict[str, str]]:
    """The safetensors files of PATH, its folder's ``config.json`` ({} for a file alone), and the shard index
    with its ``weight_map`` (None and {} without one)."""
    if path.is_file():
        return [path], {}, None, {}
    if not path.is_dir():
        what = "not a regular file or a folder" if path.exists() else "no such file or folder"
        raise FileNotFoundError(f"{path}: {what}")
    config = read_config(path / "config.json") if (path / "config.json").is_file() else {}
    if not isinstance(config.get("_class_name", ""), str):
        raise ValueError(f"{path / 'config.json'}: _class_name must be a class name, got {config['_class_name']!r:.80}")
    if (path / DIFFUSERS_WEIGHTS).is_file():
        return [path / DIFFUSERS_WEIGHTS], config, None, {}
    # a shard index: diffusers' or transformers' name, else a diffusers variant's (``.index.fp16.json``)
    found = [sorted(f for f in path.glob(f"*.safetensors.index{end}") if f.is_file()) for end in (".json", ".*.json")]
    indexes = found[0] or found[1]
    if len(indexes) == 1:
        shards = read_shard_index(indexes[0])
        return [path / s for s in sorted(set(shards.values()))], config, indexes[0], shards
    if indexes:
        names = ", ".join(f.name for f in indexes)
        raise ValueError(f"{path}: {len(indexes)} shard indexes ({names}): inspect one of their models' files")
    files = sorted(f for f in path.glob("*.safetensors") if f.is_file())
    if not files:
        raise FileNotFoundError(f"{path}: no .safetensors file (nor {DIFFUSERS_WEIGHTS}.index.json)")
    if len(files) > 1:  # unrelated files would be read as one model
        names = ", ".join(f.name for f in files[:4]) + (", ..." if len(files) > 4 else "")
        raise ValueError(
            f"{path}: {len(files)} .safetensors files ({names}) and no shard index to say which belong together: "
            "inspect one file"
        )
    return files, config, None, {}


def _closest(keys: list[str], prefixes: tuple[str, ...]) -> list[tuple[Layout, str, list[str]]]:
    """The layouts whose main time path is in ``keys`` (under one of ``prefixes``) with the markers they
    miss: the most markers found first, then the fewest missed, then the registry's order."""
    have, found = set(keys), []
    for lay in LAYOUTS.values():
        p = next((p for p in prefixes if all(p + k in have for k in lay.required_keys())), None)
        if p is not None:
            missing = [m for m in lay.markers if not any(k.startswith(p) and m in k[len(p) :] for k in keys)]
            found.append((lay, p, missing))
    return sorted(found, key=lambda f: (len(f[2]) - len(f[0].markers), len(f[2])))


_OURS = "time_embedder."  # the time path's prefix in timestep_embed's own UNet


def _match(
    state: dict[str, torch.Tensor], config: dict, prefix: str | None
) -> tuple[LayoutMatch, bool, list[str], list[str]]:
    """``(match, matched, what decided it, the other layouts as close)``."""
    name, told = config.get("_class_name"), []
    if _ours(config) and name == "UNet" and prefix is None:  # this package's own MNIST UNet
        if "_run" in config:  # a training checkpoint: its EMA weights (the model's beside them)
            told, prefix = [f"metadata: a timestep_embed run checkpoint ({config['_run']})"], "ema." + _OURS
        else:
            told = ["config.json: timestep_embed's UNet (timestep_embed.ddpm.load_model loads all of it)"]
            prefix = _OURS
    if name in LAYOUT_BY_CLASS:  # the class says which of the layouts with the same keys
        return find_time_paths(state, layout=LAYOUT_BY_CLASS[name], prefix=prefix), True, [f"config.json: {name}"], []
    contract = contract_of(name, config) if isinstance(name, str) else None
    if contract is not None and any(x.family == contract.name for x in LAYOUTS.values()):
        try:
            return find_time_paths(state, family=contract.name, prefix=prefix), True, [f"config.json: {name}"], []
        except ValueError:  # a layout of the family's does not fit: detect from the keys alone, and say so
            told = [f"config.json: {name}, whose family's layouts ({contract.name}) do not fit these keys"]
    try:
        return find_time_paths(state, prefix=prefix), True, told, []
    except ValueError as exc:
        closest = _closest(list(state), KNOWN_PREFIXES if prefix is None else (prefix,))
        if not closest:
            raise ValueError(str(exc).splitlines()[0]) from None
    lay, prefix, missing = closest[0]
    match = find_time_paths(state, layout=lay.name, prefix=prefix)
    ties = [x.name for x, _, m in closest[1:] if (len(m), len(x.markers)) == (len(missing), len(lay.markers))]
    why = f"missing its markers: {', '.join(missing)}" if missing else "the same keys as the others, all here"
    return match, False, [*told, why], ties


def _evidence(match: LayoutMatch, keys: list[str]) -> list[str]:
    """The keys that made the layout fit: its time path's weights, a key holding each marker it found, and
    the substrings no key may hold."""
    p, lay = match.prefix, match.layout
    holding = {m: next((k for k in keys if k.startswith(p) and m in k[len(p) :]), None) for m in lay.markers}
    return [
        *[p + k for k in lay.required_keys()],
        *[f"{key} (holds the marker {m!r})" for m, key in holding.items() if key is not None],
        *[f"no key holds {a!r}" for a in lay.absent],
    ]


def _run_checkpoint(file: Path, document: str) -> dict:
    """The UNet config of a training checkpoint (``timestep-embed train``'s ``checkpoint.safetensors``: its run
    config under the metadata key ``timestep_embed``), as its exported folder's config.json holds it."""
    try:
        return {**json.loads(document)["config"]["model"], "_class_name": "UNet", "_run": "timestep-embed train",
                "_timestep_embed": {}}  # fmt: skip
    except (ValueError, KeyError, TypeError, RecursionError):  # not JSON, no config.model, not an object, too deep
        raise CheckpointError(f"{file}: its timestep_embed metadata is not a run config") from None


def _ours(config: dict) -> bool:
    """Whether a folder's config.json is this package's (flat, or the format before it): not a diffusers model's."""
    return (
        isinstance(config.get("_class_name"), str)
        and "_diffusers_version" not in config
        and ("_timestep_embed" in config or config["_class_name"] in ("UNet", "TimestepEmbedder"))
    )


def _sinusoid(config: dict, state: dict[str, torch.Tensor], match: LayoutMatch) -> str | None:
    """The time projection ``config.json`` describes, as its module prints: this package's embedder or UNet
    (their constructor arguments), a diffusers model's flags (``flip_sin_to_cos``, ``freq_shift``,
    ``time_embedding_type``); None where it says nothing of it."""
    name, kind = config.get("_class_name"), config.get("time_embedding_type")
    try:
        with torch.device("meta"):  # the modules' repr only: no weights allocated, whatever the widths say
            if _ours(config) and name == "UNet":  # this package's MNIST UNet: model.time_embedding
                return repr(TimestepEmbedder(config["emb_dim"], **config.get("time_embedding", {})).time_proj)
            if _ours(config) and "emb_dim" in config:  # a TimestepEmbedder folder (or a class extending it)
                return repr(TimestepEmbedder(**embedder_arguments(config)[0]).time_proj)
        options = diffusers_options(config, {k.removeprefix(match.prefix): v for k, v in state.items()})
    except (TypeError, ValueError, KeyError) as exc:  # a config this version does not read: say so, inspect the rest
        return f"not read ({type(exc).__name__}: {exc})"
    if kind not in (None, "positional", "fourier"):  # diffusers' "learned": an nn.Embedding table, no sinusoid
        return f"time_embedding_type {kind!r}: a table or module of its own, not a sinusoid"
    if "time_proj" in options:
        return repr(options["time_proj"])
    if "convention" in options:
        dim = state[match.paths[0].linears[0] + ".weight"].shape[-1]  # the first Linear's input: the sinusoid's
        return f"SinusoidalEmbedding(dim={dim}, {repr(options['convention']).removeprefix('Convention(')}"
    return None


def inspect_checkpoint(path: str | Path, prefix: str | None = None) -> Inspection:
    """What a checkpoint's time path is (see the module docstring). ``prefix``: the one in front of the
    model's keys (``"first_stage."``, ...); None tries the usual ones (``""``, ``"model.diffusion_model."``,
    ``"transformer."``, ...).

    Raises:
        FileNotFoundError: PATH is neither a file nor a folder holding safetensors files.
        ValueError: a corrupt header (``CheckpointError``), or no layout's time path in the file.
    """
    if str(path) == "":  # Path("") is the current folder
        raise ValueError("path: expected a .safetensors file or a model folder, got ''")
    files, config, index_file, index = _files(Path(path))
    raw = {file: read_safetensors_header(file) for file in files}
    headers = {file: {k: v for k, v in header.items() if k != "__metadata__"} for file, header in raw.items()}
    meta = raw[files[0]].get("__metadata__") or {}
    if not config and len(files) == 1 and isinstance(meta, dict) and "timestep_embed" in meta:
        config = _run_checkpoint(files[0], meta["timestep_embed"])
    where = locate_keys(headers, index_file, index or None)
    state: dict[str, torch.Tensor] = {}
    foreign: dict[str, str] = {}  # the keys whose dtype torch lacks: their dtype's name
    for file, header in headers.items():
        for key, entry in header.items():
            try:  # meta tensors: the header's shapes and dtypes, nothing allocated
                state[key] = torch.empty(entry["shape"], dtype=_DTYPES.get(entry["dtype"], torch.uint8), device="meta")
            except RuntimeError:  # safetensors' sizes are unsigned 64-bit, torch's signed
                raise CheckpointError(f"{file}: {key!r} has a shape torch cannot hold: {entry['shape']}") from None
            if entry["dtype"] not in _DTYPES:
                foreign[key] = entry["dtype"]
    match, matched, decided, closest = _match(state, config, prefix)
    main = [k for k in state if any(k.startswith(lin + ".") for lin in match.paths[0].linears)]
    weight = match.paths[0].linears[0] + ".weight"
    if weight in foreign:
        raise CheckpointError(f"{where[weight]}: {weight} is {foreign[weight]}, a dtype this torch lacks")
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted({where[k] for k in main}):
        with safetensors_torch().safe_open(str(file), "pt") as f:
            tensors.update({k: f.get_tensor(k) for k in main if where[k] == file})
    dtype = state[weight].dtype
    family, name = match.layout.family, config.get("_class_name")
    contract = get_contract(family) if family else contract_of(name, config) if isinstance(name, str) else None
    # float8 weights compute upcast (diffusers' enable_layerwise_casting: in bfloat16, its usual compute dtype)
    compute = torch.bfloat16 if dtype.is_floating_point and dtype.itemsize == 1 else dtype
    precision = schedule_precision(contract, compute) if contract is not None and dtype.is_floating_point else None
    return Inspection(
        str(path), [str(f) for f in files], len(state), match, matched, [*decided, *_evidence(match, list(state))],
        closest, dtype,
        all(bool(torch.isfinite(t.float() if t.is_floating_point() else t).all()) for t in tensors.values()),
        contract, precision, None if contract is not None else _sinusoid(config, state, match),
    )  # fmt: skip
