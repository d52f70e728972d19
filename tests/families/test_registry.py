"""The registry of model families holds its invariants: unique names, no two detectable layouts that fit
the same keys unless one is the other's parent (or they are declared twins), no cycle of parents, a
family's contract and layouts in one module, and families/ importing nothing above it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from timestep_embed.families import (
    CONTRACTS,
    FAMILIES,
    LAYOUT_BY_CLASS,
    LAYOUTS,
    Family,
    Layout,
    MLPKeys,
    TimestepContract,
    contract_for,
    get_contract,
    get_family,
)
from timestep_embed.families.registry import MODULES, build

FOLDER = Path(__file__).resolve().parents[2] / "timestep_embed" / "families"
CONSTRUCTORS = {"TimestepContract", "diffusers_contract", "_flux_like", "Layout"}


def witness(layout: Layout) -> list[str]:
    """The fewest keys a checkpoint of ``layout`` has: its time path's weights and one key per marker."""
    return [*layout.required_keys(), *layout.markers]


def detected_by(keys: list[str]) -> list[Layout]:
    """The layouts automatic detection considers for ``keys`` (under no prefix)."""
    return [x for x in LAYOUTS.values() if x.auto and all(k in keys for k in x.required_keys()) and x.fits(keys)]


def ancestors(layout: Layout) -> list[str]:
    out, step = [], layout.parent
    while step is not None:
        out.append(step)
        step = LAYOUTS[step].parent
    return out


def test_names_are_unique_and_every_layout_names_a_registered_family():
    names = [f.name for module in MODULES for f in module.FAMILIES]
    layouts = [x.name for f in FAMILIES.values() for x in f.layouts]
    assert len(names) == len(set(names)) == len(FAMILIES) == len(CONTRACTS)
    assert len(layouts) == len(set(layouts)) and set(layouts) <= set(LAYOUTS)
    assert all(x.family is None or x.family in FAMILIES for x in LAYOUTS.values())
    assert all(x.family == f.name and x.source for f in FAMILIES.values() for x in f.layouts)
    for cls, name in LAYOUT_BY_CLASS.items():  # a class picked by its layout is its family's too
        assert cls in get_family(LAYOUTS[name].family).classes


@pytest.mark.parametrize("name", [n for n, x in LAYOUTS.items() if x.auto])
def test_no_two_layouts_fit_the_same_keys_unless_parent_or_twin(name):
    """The layout a checkpoint is detected as is the one with the most markers; every other layout that
    fits its keys is an ancestor (or an ancestor's twin) with fewer markers, or a declared twin (one
    "several fit" error)."""
    layout = LAYOUTS[name]
    keys = witness(layout)
    fitting = detected_by(keys)
    assert layout in fitting, f"{name} does not fit its own keys {keys}"
    above = ancestors(layout)
    above += [t for a in above for t in LAYOUTS[a].twins]
    for other in fitting:
        if other is layout:
            continue
        assert other.name in above or other.name in layout.twins, (
            f"{other.name} fits the keys of {name} ({keys}): name it as the parent or a twin"
        )
        if other.name in layout.twins:
            assert name in other.twins and len(other.markers) == len(layout.markers)
        else:
            assert len(layout.markers) > len(other.markers), f"{name} must win over its parent {other.name}"


def test_parents_and_twins_name_layouts_and_hold_no_cycle():
    for x in LAYOUTS.values():
        assert x.name not in ancestors(x)
        assert all(LAYOUTS[t].twins and x.name in LAYOUTS[t].twins for t in x.twins)
    assert {x.name for x in LAYOUTS.values() if x.twins} == {"bria", "longcat_image"}


def _module(*families: Family, generic: tuple[Layout, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(FAMILIES=families, GENERIC=generic)


def test_the_registry_refuses_what_would_make_a_lookup_ambiguous():
    contract = get_contract("dit")
    one = _module(Family(contract, (Layout("a", (MLPKeys("timestep", "t."),)),)))
    with pytest.raises(ValueError, match=r"names families twice: \['dit'\]"):
        build([one, one])
    twice = Layout("a", (MLPKeys("timestep", "u."),))
    with pytest.raises(ValueError, match=r"names layouts twice: \['a'\]"):
        build([one, _module(generic=(twice,))])
    stray = dataclasses.replace(twice, name="b", family="sd7")
    with pytest.raises(ValueError, match="family 'sd7', which is not registered"):
        build([one, _module(generic=(stray,))])
    orphan = dataclasses.replace(twice, name="b", parent="nowhere")
    with pytest.raises(ValueError, match=r"parent or twins \['nowhere'\]"):
        build([one, _module(generic=(orphan,))])
    loop = (dataclasses.replace(twice, name="b", parent="c"), dataclasses.replace(twice, name="c", parent="b"))
    with pytest.raises(ValueError, match="form a cycle: b -> c -> b"):
        build([_module(generic=loop)])
    claimed = tuple(dataclasses.replace(twice, name=n, classes=("X",)) for n in "bc")
    with pytest.raises(ValueError, match=r"diffusers classes of layouts twice: \['X'\]"):
        build([_module(generic=claimed)])


def test_a_familys_contract_and_layouts_live_in_one_module():
    """Each family's contract and layouts are written in the module that lists it, and nowhere else
    (read from the source: the first argument of every contract and layout constructor)."""
    written: dict[str, list[str]] = {}
    for module in MODULES:
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                if node.func.id in CONSTRUCTORS and isinstance(node.args[0], ast.Constant):
                    written.setdefault(node.args[0].value, []).append(module.__name__)
    for module in MODULES:
        for family in module.FAMILIES:
            for name in (family.name, *(x.name for x in family.layouts)):
                assert set(written[name]) == {module.__name__}, f"{name}: written in {written[name]}"


def test_families_imports_nothing_above_it_and_each_module_is_short():
    allowed = {"__future__", "dataclasses", "collections", "typing", "torch", "timestep_embed.conventions",
               "timestep_embed.checks"}  # fmt: skip
    for path in sorted(FOLDER.glob("*.py")):
        text = path.read_text()
        assert len(text.splitlines()) <= 300, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = "timestep_embed." + (node.module or "") if node.level == 2 else "timestep_embed.families"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                target = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            else:
                continue
            assert target == "timestep_embed.families" or target.split(".")[0] in allowed or target in allowed, (
                f"{path.name}:{node.lineno} imports {target}"
            )


def test_contract_for_reads_class_and_config_and_each_contract_computes():
    class FluxTransformer2DModel:
        config = {"guidance_embeds": True}

    class UNet2DConditionModel:
        config = {"addition_embed_type": "text_time"}

    assert contract_for(FluxTransformer2DModel()) is CONTRACTS["flux_dev"]
    assert contract_for(UNet2DConditionModel()) is CONTRACTS["sdxl"]
    assert contract_for(object()) is None
    for contract in CONTRACTS.values():
        assert isinstance(contract, TimestepContract) and contract.describe().startswith(contract.name)
        assert torch.isfinite(torch.tensor(contract.value_range())).all()
    with pytest.raises(ValueError, match="no timestep contract 'sd4'"):
        get_contract("sd4")
    with pytest.raises(ValueError, match="no model family 'sd4'"):
        get_family("sd4")


def test_a_contract_whose_pipeline_casts_the_timestep_names_that_dtype():
    """What `describe` prints must agree with what `sinusoid_input` computes: a pipeline that casts the timestep to
    the model's or the latents' dtype does not form the sinusoid's input in float32 (AuraFlow's said so)."""
    for name, contract in CONTRACTS.items():
        if contract.pipeline_cast in ("before", "after"):
            assert "dtype" in contract.formed_in, (name, contract.formed_in)
