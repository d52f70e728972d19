"""Nested dataclasses to and from plain data (YAML and dicts), strictly, and dotted overrides.

``from_dict(RunConfig, data)`` builds the dataclass: an unknown key or a value of the wrong type
raises [`ConfigError`][timestep_embed.ddpm.ConfigError] naming the dotted key, the value and the expected type; ranges
are the dataclasses' own business (each section checks its fields in ``__post_init__``). Overrides
``"train.lr=3e-4"`` are parsed as YAML scalars (``1e-4`` a float, ``true`` a bool, ``null`` None,
``[32, 64]`` a list). [`to_dict`][timestep_embed.ddpm.schema.to_dict] gives a dataclass back as JSON-able data.

YAML is read with a strict loader: a key written twice in one mapping is an error (PyYAML would keep
the last), aliases are refused (a few hundred bytes of nested aliases expand to gigabytes), and a file
over `MAX_CONFIG_BYTES` is refused unread.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from ..files import atomic_write_bytes

__all__ = [
    "ConfigError",
    "MAX_CONFIG_BYTES",
    "SEEDS",
    "short_repr",
    "yaml_load",
    "read_yaml",
    "dump_yaml",
    "save_yaml",
    "parse_override",
    "apply_overrides",
    "from_dict",
    "to_dict",
    "type_name",
    "check_section",
]

T = TypeVar("T")
MAX_CONFIG_BYTES = 1 << 20  # a config is a few kB; a megabyte is not a config
# The range rule of every seed: [0, 2**32), numpy's. torch takes seeds below 2**64, and the training derives its
# generator's seed as train.seed * 1000 + rank.
SEEDS = "[0, 4294967296)"


class ConfigError(ValueError):
    """An invalid config: unknown key, wrong type or range, unreadable file or malformed override."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 120
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8
_REPR.maxlevel = 3


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters (an error message quotes values, never megabytes)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- YAML
def _yaml():
    try:
        import yaml
    except ImportError as exc:  # optional dependency
        raise ConfigError("YAML configs need PyYAML: pip install 'timestep-embed[train]'") from exc
    return yaml


_FLOAT_WITHOUT_DOT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


@functools.lru_cache(maxsize=1)
def _yaml_loader():
    """A yaml.SafeLoader that reads ``1e-4`` as a float (YAML 1.2; PyYAML's 1.1 rules want ``1.0e-4``),
    refuses a key written twice in one mapping and refuses aliases."""
    yaml = _yaml()

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"line {line}: YAML aliases (*name) are not accepted in a config; write the value")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, (str, int, float, bool)) and key is not None:  # `? [a, b]`: a list as a key
                    line = key_node.start_mark.line + 1
                    raise ConfigError(f"the key on line {line} is a {type(key).__name__}, not a name: keys are words")
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise ConfigError(f"the key {key!r} appears twice in one mapping (line {line}); write it once")
                seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_WITHOUT_DOT, list("-+0123456789"))
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, Loader.construct_mapping)
    return Loader


def yaml_load(text: str) -> Any:
    """Parse YAML text with the strict loader; ConfigError on any YAML error."""
    yaml = _yaml()
    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse the YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError("cannot parse the YAML: it is nested too deeply for a config") from None


def read_yaml(path: str | os.PathLike) -> dict:
    """A YAML config file as a dict of sections; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(f"{path}: a config is a .yaml or .yml file")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {size} bytes; a config file holds at most {MAX_CONFIG_BYTES}")
    try:
        data = yaml_load(path.read_text(encoding="utf-8"))
    except (ConfigError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def dump_yaml(data: Any) -> str:
    """JSON-able ``data`` as YAML text, keys in their order."""
    return _yaml().safe_dump(data, sort_keys=False)


def save_yaml(cfg: Any, path: str | os.PathLike) -> Path:
    """A dataclass (or JSON-able data) as YAML at ``path``, atomically."""
    return atomic_write_bytes(path, dump_yaml(to_dict(cfg)).encode("utf-8"))


# ----------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.lr=3e-4"`` -> (["train", "lr"], 0.0003). The value is parsed as YAML."""
    if not isinstance(text, str):
        raise ConfigError(f"override {short_repr(text)}: expected a 'key.sub=value' string")
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} is not of the form key.sub=value")
    try:
        value = yaml_load(raw) if raw.strip() else ""
    except ConfigError as exc:
        raise ConfigError(f"override {text!r}: {exc}") from exc
    return key.split("."), value


def apply_overrides(data: dict, overrides: Sequence[str]) -> set[str]:
    """Set each dotted ``key=value`` in the nested dict ``data`` (in place); returns the dotted keys set.
    A key given twice is refused. Unknown keys are caught by [`from_dict`][timestep_embed.ddpm.schema.from_dict],
    against the dataclass."""
    if isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of 'key=value' strings, got the string {overrides!r}")
    seen: set[str] = set()
    for text in overrides:
        parts, value = parse_override(text)
        dotted = ".".join(parts)
        if dotted in seen:
            raise ConfigError(f"override {dotted} is given twice; give it once")
        seen.add(dotted)
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"override {text!r}: {where} is a value ({short_repr(child)}), not a section")
            node = child
        node[parts[-1]] = value
    return seen


# ----------------------------------------------------------------------------- data -> dataclass
def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:  # cls: a dataclass
    """Build dataclass ``cls`` from a mapping, recursively and strictly (see
    [`ConfigError`][timestep_embed.ddpm.ConfigError])."""
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


def type_name(tp: Any) -> str:
    """A type as a user reads it: ``int``, ``float or null``, ``one of 'eps', 'v'``, ``list of int``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin in (list, tuple, Sequence):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, Mapping):
        return "mapping"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one value against type ``tp``; raise ConfigError naming ``key`` otherwise."""

    def fail() -> ConfigError:
        return ConfigError(f"{key} = {short_repr(value)} ({type(value).__name__}): expected {type_name(tp)}")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else from_dict(tp, value, key)
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
        raise fail()
    if tp is bool or tp is str:
        if isinstance(value, tp):
            return value
        raise fail()
    if tp is int:  # bool is an int subclass in Python; never accept True as 1
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an int beyond every float: as 1e400 reads
                return math.inf if value > 0 else -math.inf
        raise fail()
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise fail()
        item = args[0] if args else Any
        items = [_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise fail()
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, vt, f"{key}.{k}") for k, v in value.items()}
    raise ConfigError(f"{key}: unsupported field type {type_name(tp)} in the config dataclass")


# ----------------------------------------------------------------------------- a section's own check
_RULE = re.compile(r"^\s*(?:(>=|>)\s*(-?[\d.e+-]+)|([\[(])\s*(-?[\d.e+-]+)\s*,\s*(-?[\d.e+-]+)\s*([\])]))\s*$")


def _in_range(value: float, rule: str) -> bool:
    m = _RULE.match(rule)
    if m is None:
        raise ValueError(f"range rule {rule!r}: expected '> a', '>= a' or an interval like '[a, b)'")
    if m[1]:
        return value > float(m[2]) if m[1] == ">" else value >= float(m[2])
    low, high = float(m[4]), float(m[5])
    return (value >= low if m[3] == "[" else value > low) and (value <= high if m[6] == "]" else value < high)


def check_section(section: Any) -> None:
    """What a config section's ``__post_init__`` calls: every field converted and checked against its
    type (as [`from_dict`][timestep_embed.ddpm.schema.from_dict] does), then each number against its rule in the class's
    ``RANGES`` (``{"lr": "> 0", "ema_decay": "[0, 1)"}``; None passes where the type allows it, NaN and inf never).
    Errors name ``section.KEY + "." + field``."""
    cls = type(section)
    hints, prefix = typing.get_type_hints(cls), cls.KEY
    for f in dataclasses.fields(section):
        key = _join(prefix, f.name)
        value = _convert(getattr(section, f.name), hints[f.name], key)
        object.__setattr__(section, f.name, value)  # frozen sections too
        rule = cls.RANGES.get(f.name)
        if rule is None or value is None:
            continue
        for i, v in enumerate(value if isinstance(value, (list, tuple)) else [value]):
            where = f"{key}[{i}]" if isinstance(value, (list, tuple)) else key
            if not (v == v and abs(v) != float("inf") and _in_range(v, rule)):
                raise ConfigError(f"{where} = {short_repr(v)}: expected {rule.strip()}")


# ----------------------------------------------------------------------------- dataclass -> data
def to_dict(cfg: Any) -> Any:
    """A dataclass (nested) as JSON-able data: tuples -> lists, Paths -> str."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, Mapping):
        return {str(k): to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, os.PathLike):
        return os.fspath(cfg)
    if cfg is None or isinstance(cfg, (bool, int, float, str)):
        return cfg
    raise TypeError(f"config value {cfg!r} of type {type(cfg).__name__} is not JSON-able")
