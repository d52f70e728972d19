"""The registry of model families: one ordered tuple of family modules, read once at import.

Each module in `MODULES` holds ``FAMILIES`` (a tuple of [`Family`][timestep_embed.families.Family]) and
may hold ``GENERIC`` (layouts of no one family: a diffusers UNet's keys, whose sinusoid lives in its
``config.json``). The registry refuses what would make a lookup ambiguous: a family or layout name
twice, a layout whose family is not registered, a ``parent`` or ``twins`` that names no layout, a
cycle of parents, a diffusers class that two layouts claim. ``tests/families/test_registry.py`` checks
that no two layouts a checkpoint is detected by fit the same keys unless one is the other's parent or
they are declared twins. Adding a family is one module (or one entry in one) and one name in `MODULES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import cogview, dit, edm, flux, hunyuan, mmdit, unets, video, wan
from .schema import Family, Layout, TimestepContract

__all__ = ["MODULES", "build", "FAMILIES", "CONTRACTS", "LAYOUTS", "LAYOUT_BY_CLASS", "get_contract", "get_family"]
__all__ += ["contract_of", "contract_for", "one_model"]

MODULES = (unets, edm, dit, mmdit, flux, cogview, hunyuan, wan, video)


def _unique(names: list[str], what: str) -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"the family registry names {what} twice: {twice}")


def _check(families: dict[str, Family], layouts: dict[str, Layout]) -> None:
    for lay in layouts.values():
        if lay.family is not None and lay.family not in families:
            raise ValueError(f"layout {lay.name!r} names the family {lay.family!r}, which is not registered")
        unknown = [n for n in (lay.parent, *lay.twins) if n is not None and n not in layouts]
        if unknown:
            raise ValueError(f"layout {lay.name!r} names the parent or twins {unknown}, which are not layouts")
        seen, step = [lay.name], lay.parent
        while step is not None:
            if step in seen:
                raise ValueError(f"the parents of layout {lay.name!r} form a cycle: {' -> '.join([*seen, step])}")
            seen.append(step)
            step = layouts[step].parent


def build(modules) -> tuple[dict[str, Family], dict[str, Layout]]:
    """``(families by name, layouts by name)`` of ``modules``, in their order; ValueError on a name
    twice, a layout of an unknown family, a parent or twin that is no layout, a cycle of parents."""
    families = [f for module in modules for f in module.FAMILIES]
    generic = [x for module in modules for x in getattr(module, "GENERIC", ())]
    layouts = [*generic, *(x for f in families for x in f.layouts)]
    _unique([f.name for f in families], "families")
    _unique([x.name for x in layouts], "layouts")
    _unique([c for x in layouts for c in x.classes], "diffusers classes of layouts")
    by_name, by_layout = {f.name: f for f in families}, {x.name: x for x in layouts}
    _check(by_name, by_layout)
    return by_name, by_layout


FAMILIES, LAYOUTS = build(MODULES)
CONTRACTS: dict[str, TimestepContract] = {name: f.contract for name, f in FAMILIES.items()}
LAYOUT_BY_CLASS: dict[str, str] = {c: x.name for x in LAYOUTS.values() for c in x.classes}
_BY_CLASS = [(cls, f, when) for f in FAMILIES.values() for cls, when in f.classes.items()]


def _lineage(lay: Layout) -> set[str]:
    """``lay``'s name, its parents' and their twins' (the layouts whose keys its keys extend or repeat)."""
    names = {lay.name, *lay.twins}
    while lay.parent is not None:
        lay = LAYOUTS[lay.parent]
        names |= {lay.name, *lay.twins}
    return names


def one_model(a: Layout, b: Layout) -> bool:
    """Whether layouts ``a`` and ``b`` can both fit one model's checkpoint: the same family, or one extends
    (``parent``) or repeats (``twins``) the other."""
    return a.name in _lineage(b) or b.name in _lineage(a) or (a.family is not None and a.family == b.family)


def get_family(name: str) -> Family:
    """The family called ``name`` (see `FAMILIES`)."""
    if name not in FAMILIES:
        raise ValueError(f"no model family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def get_contract(name: str) -> TimestepContract:
    """The contract called ``name`` (see `CONTRACTS`)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a contract's name (a string such as 'flux_dev'), got {name!r}")
    if name not in CONTRACTS:
        raise ValueError(f"no timestep contract {name!r}; known: {', '.join(CONTRACTS)}")
    return CONTRACTS[name]


def contract_of(class_name: str, config: Mapping) -> TimestepContract | None:
    """The contract of the diffusers class ``class_name`` with ``config`` (its ``config.json``): the first
    family that lists the class and whose test passes on the config; None if none does."""
    return next((f.contract for c, f, when in _BY_CLASS if c == class_name and (when is None or when(config))), None)


def contract_for(model) -> TimestepContract | None:
    """The contract of a diffusers model, from its class name and config (`contract_of`); None for other
    models. Reads ``type(model).__name__`` and ``model.config`` only (no diffusers import)."""
    config: Any = getattr(model, "config", None)
    return contract_of(type(model).__name__, config) if hasattr(config, "get") else None
