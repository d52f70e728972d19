"""The strict config loader: YAML / TOML / JSON / dicts onto nested dataclasses, dotted overrides.

``load_config("configs/mnist.yaml", RunConfig, ["train.lr=3e-4", "sample.steps=50"])`` reads
the file, applies the overrides (values parsed as YAML scalars: ``1e-4`` is a float, ``true`` a bool,
``null`` None, ``[32, 64]`` a list) and converts the result onto the dataclass, strictly: an unknown
key or a value of the wrong type raises :class:`ConfigError` naming the dotted key, the value and the
expected type. ``config_to_dict`` gives the resolved config back as JSON-able data for saving.

A key written twice in one mapping is an error (PyYAML would silently keep the last one). The
sections themselves live in :mod:`timestep_embed.ddpm.config`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import reprlib
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from ..files import atomic_write_bytes

T = TypeVar("T")


class ConfigError(ValueError):
    """An invalid config: unknown key, wrong type, unreadable file or malformed override."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 120
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8
_REPR.maxlevel = 3


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters (a YAML alias bomb must not make a 300 MB message)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- loading
def _toml():
    """tomllib (Python >= 3.11) or its backport tomli (a dependency on 3.10)."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli

    return tomli


def _yaml():
    try:
        import yaml
    except ImportError as exc:  # optional dependency
        raise ConfigError("YAML configs need PyYAML: pip install 'timestep-embed[train]'") from exc
    return yaml


_FLOAT_WITHOUT_DOT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


@functools.lru_cache(maxsize=1)
def _yaml_loader():
    """A yaml.SafeLoader that reads ``1e-4`` as a float (YAML 1.2; PyYAML's 1.1 rules want ``1.0e-4``)
    and refuses a key written twice in one mapping."""
    yaml = _yaml()

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise ConfigError(f"the key {key!r} appears twice in one mapping (line {line}); write it once")
                seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_WITHOUT_DOT, list("-+0123456789"))
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, Loader.construct_mapping)
    return Loader


def yaml_load(text: str) -> Any:
    """Parse YAML text with the strict loader (see :func:`_yaml_loader`)."""
    return _yaml().load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass


def load_config(source: str | os.PathLike | Mapping | None, cls: type[T], overrides: Sequence[str] = ()) -> T:
    """Load ``source`` (a .yaml/.yml/.toml/.json path, a mapping, or None for the defaults) onto the
    dataclass ``cls``, after applying ``key.sub=value`` overrides. Strict; see the module docstring."""
    if source is None:
        data: dict = {}
    elif isinstance(source, Mapping):
        data = _deepcopy_dict(source)
    else:
        data = read_config_file(source)
    return from_dict(cls, apply_overrides(data, overrides))


def read_config_file(path: str | os.PathLike) -> dict:
    """Parse a YAML, TOML or JSON file (by suffix) into a dict; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            data = yaml_load(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":
            data = _toml().loads(path.read_text(encoding="utf-8"))
        elif suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
        else:
            raise ConfigError(f"{path}: unknown config format {suffix!r}; use .yaml, .yml, .toml or .json")
    except ConfigError:
        raise
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError, JSONDecodeError
        raise ConfigError(f"{path}: cannot parse: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.lr=3e-4"`` -> (["train", "lr"], 0.0003). The value is parsed as YAML."""
    yaml = _yaml()
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} is not of the form key.sub=value")
    try:
        value = yaml_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: cannot parse the value {raw!r}: {exc}") from exc
    return key.split("."), value


def apply_overrides(data: dict, overrides: Sequence[str]) -> dict:
    """Set each dotted ``key=value`` in the nested dict ``data`` (in place; also returned). Unknown
    keys are caught later by :func:`from_dict`, against the dataclass, not the file."""
    if isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of 'key=value' strings, got the string {overrides!r}")
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                dotted = ".".join(parts[: depth + 1])
                raise ConfigError(f"override {text!r}: {dotted} is a value ({short_repr(child)}), not a section")
            node = child
        node[parts[-1]] = value
    return data


def from_dict(cls: type[T], data: Mapping, prefix: str = "") -> T:  # cls: a dataclass
    """Build dataclass ``cls`` from a mapping, recursively and strictly (see :class:`ConfigError`)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'} = {short_repr(data)}: expected a mapping for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(
            f"unknown key {_join(prefix, str(unknown[0]))!r} in {cls.__name__}; known keys: {', '.join(fields)}"
        )
    kwargs = {name: _convert(data[name], hints[name], _join(prefix, name)) for name in fields if name in data}
    missing = [
        _join(prefix, f.name)
        for f in fields.values()
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"missing required key {missing[0]!r} ({cls.__name__} has no default for it)")
    return cls(**kwargs)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one value against type ``tp``; raise ConfigError naming ``key`` otherwise."""

    def fail(extra: str = "") -> ConfigError:
        return ConfigError(f"{key} = {short_repr(value)} ({type(value).__name__}): expected {_type_name(tp)}{extra}")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError:
                continue
        raise fail()
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        raise fail(f" (one of {', '.join(repr(a) for a in args)})")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise fail()
    if tp is int:  # bool is an int subclass in Python; never accept True as 1
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise fail()
    if tp is str:
        if isinstance(value, str):
            return value
        raise fail()
    if tp in (Path, os.PathLike):
        if isinstance(value, (str, os.PathLike)):
            return Path(value)
        raise fail()
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise fail()
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise fail(f" ({len(args)} items)")
            return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
        item = args[0] if args else Any
        items = [_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise fail()
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, vt, f"{key}.{k}") for k, v in value.items()}
    raise ConfigError(f"{key}: unsupported field type {_type_name(tp)} in the config dataclass")


# ----------------------------------------------------------------------------- saving
def config_to_dict(cfg: Any) -> Any:
    """A dataclass (nested) as JSON-able data: tuples -> lists, Paths -> str."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: config_to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, Mapping):
        return {str(k): config_to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [config_to_dict(v) for v in cfg]
    if isinstance(cfg, os.PathLike):
        return os.fspath(cfg)
    if cfg is None or isinstance(cfg, (bool, int, float, str)):
        return cfg
    raise TypeError(f"config value {cfg!r} of type {type(cfg).__name__} is not JSON-able")


def dump_yaml(data: Any) -> str:
    """JSON-able ``data`` as YAML text, keys in their order."""
    return _yaml().safe_dump(data, sort_keys=False)


def save_config(cfg: Any, path: str | os.PathLike) -> Path:
    """Write the resolved config as YAML (.yaml/.yml) or JSON (anything else), atomically."""
    path = Path(path)
    data = config_to_dict(cfg)
    if path.suffix.lower() in (".yaml", ".yml"):
        text = dump_yaml(data)
    else:
        text = json.dumps(data, indent=2) + "\n"
    return atomic_write_bytes(path, text.encode("utf-8"))


def _deepcopy_dict(data: Mapping) -> dict:
    return {k: _deepcopy_dict(v) if isinstance(v, Mapping) else v for k, v in data.items()}
