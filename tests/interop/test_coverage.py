"""The coverage of the installed diffusers' model zoo (``tests/fixtures/coverage.py``): every class
whose forward takes a timestep has a tiny model or a reason it has none; a built one passes the four
checks or each failing check names its cause; the full table (minutes) is the slow test."""

from __future__ import annotations

import pytest

from ..fixtures.coverage import CHECKS, check_class, coverage, coverage_table, time_classes
from ..fixtures.coverage_reasons import LIMITS, NOT_BUILT
from ..fixtures.tiny import BY_CLASS

diffusers = pytest.importorskip("diffusers")

# covered on all four checks with diffusers 0.42 (scripts/diffusers_coverage.py: 68 / 99)
COVERED_AT_LEAST = 68


def test_every_time_class_has_a_tiny_model_or_a_reason():
    found = time_classes()
    assert len(found) >= 90 and "FluxTransformer2DModel" in found and "ZImageTransformer2DModel" in found
    unexplained = [n for n in found if n not in BY_CLASS and n not in NOT_BUILT]
    assert not unexplained, f"no tiny model and no reason: {unexplained}"
    stale = [n for n in (*NOT_BUILT, *LIMITS) if n not in found]
    assert not stale, f"reasons for classes this diffusers does not have: {stale}"
    assert not set(NOT_BUILT) & set(BY_CLASS), "a class with a tiny model is listed as not built"
    assert all(set(v) <= set(CHECKS) for v in LIMITS.values())


@pytest.mark.parametrize(
    "name",
    ["Flux2Transformer2DModel", "ZImageTransformer2DModel", "BriaTransformer2DModel", "HeliosTransformer3DModel",
     "QwenImageControlNetModel", "Transformer2DModel"],
)  # fmt: skip
def test_a_sample_is_covered_on_all_four_checks(name):
    row = check_class(name, time_classes()[name])
    assert row.covered, row.results


@pytest.mark.parametrize(
    "name", ["ChromaTransformer2DModel", "TransformerTemporalModel", "MultiControlNetModel", "Flux3Transformer2DModel"]
)
def test_what_is_not_covered_says_why(name):
    row = check_class(name, time_classes()[name])
    assert not row.covered
    reasons = {**dict.fromkeys(CHECKS, NOT_BUILT.get(name)), **LIMITS.get(name, {})}
    for check, result in row.results.items():
        assert result.startswith("ok") or result == reasons[check], (check, result)


@pytest.mark.slow
def test_the_whole_zoo_is_covered_or_explained():
    rows = coverage()
    table = coverage_table(rows)
    covered = sum(r.covered for r in rows)
    assert covered >= COVERED_AT_LEAST, table.splitlines()[0]
    assert table.startswith(f"{covered} / {len(rows)} diffusers model classes")
    for row in rows:
        if row.covered:
            continue
        reasons = {**dict.fromkeys(CHECKS, NOT_BUILT.get(row.name)), **LIMITS.get(row.name, {})}
        for check, result in row.results.items():
            assert result.startswith("ok") or result == reasons[check], (row.name, check, result)
