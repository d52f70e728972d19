"""The naive schemes fail where the theory says they do; the sinusoid passes every check."""

from __future__ import annotations

import numpy as np
import pytest

from timestep_embed.analysis import naive


@pytest.fixture(scope="module")
def table():
    return {row["scheme"]: row for row in naive.naive_scheme_table()}


PROPERTIES = ("bounded", "unique", "relative", "shift_linear", "length_free")
EXPECTED = {  # scheme: which of PROPERTIES hold
    "raw": (False, True, False, False, True),
    "divided": (True, True, False, False, False),
    "single_sine": (True, False, False, False, True),
    "sin_cos_pair": (True, False, True, True, True),
    "two_frequencies": (True, True, True, True, True),
    "binary": (True, True, False, False, False),
    "sinusoid": (True, True, True, True, True),
}


def test_table_has_every_scheme_in_order(table):
    assert list(table) == list(naive.NAIVE_SCHEMES) == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_properties(table, name):
    row = table[name]
    assert tuple(bool(row[p]) for p in PROPERTIES) == EXPECTED[name]
    assert (row["fails"] == "-") == all(EXPECTED[name])


def test_where_they_fail(table):
    assert "unbounded: max abs 999 at N=1000, 9999 at N=10000" in table["raw"]["fails"]
    assert "collide: p=0 and p=710" in table["sin_cos_pair"]["fails"]  # 710 = 113 * 2 pi + 6e-5
    assert "collide: p=177 and p=178" in table["single_sine"]["fails"]  # 177 + 178 = 355 ~ 113 pi
    assert "width 10 -> 11" in table["binary"]["fails"]
    assert "E(10) = 0.01 -> 0.005" in table["divided"]["fails"]
    assert table["sinusoid"]["min_distance"] > 1.9 > 0.1 > table["two_frequencies"]["min_distance"] > 0.05


def test_embedding_values():
    p = np.arange(8)
    assert np.array_equal(naive.naive_embedding("binary", p, 8), (p[:, None] >> np.arange(3)) & 1)
    assert np.allclose(naive.naive_embedding("sin_cos_pair", p)[:, 0], np.sin(p))
    assert np.allclose(naive.naive_embedding("two_frequencies", p)[:, 3], np.cos(p / 100))
    assert np.array_equal(naive.naive_embedding("divided", p, 16)[:, 0], p / 16)


def test_format_table(table):
    text = naive.format_table(list(table.values()))
    lines = text.splitlines()
    assert lines[0].startswith("| scheme | dim | bounded") and len(lines) == 2 + len(table)
    assert all(line.count("|") == lines[0].count("|") for line in lines)  # no stray pipes in cells


def test_errors():
    with pytest.raises(ValueError, match="scheme must be one of"):
        naive.naive_embedding("gray", [1])
    with pytest.raises(ValueError, match="non-negative integers"):
        naive.naive_embedding("raw", [0.5])
    with pytest.raises(ValueError, match="length must be an int > every position"):
        naive.naive_embedding("raw", [5], length=3)
