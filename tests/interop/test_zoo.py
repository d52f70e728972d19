"""The port-bug zoo: every bug class reported in public threads, planted into every family it applies to,
on random weights and random timesteps; verify_port must part at the expected stage and name the cause,
and raise nothing on correct pairs (a copy, another float32 rounding, a model against its embedder)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from timestep_embed.grid import grid_embedding, grid_positions
from timestep_embed.interop import verify_port

from ..fixtures.zoo import ZOO, false_alarms, run_one, zoo_table
from ..fixtures.zoo_ports import ZOO_FAMILIES, family_embedder, family_timesteps

pytest.importorskip("diffusers")
pytestmark = pytest.mark.filterwarnings("ignore")  # the planted bugs round timesteps on purpose

CASES = [(bug, family) for bug in ZOO for family in bug.families]


@pytest.mark.parametrize(("bug", "family"), CASES, ids=[f"{b.name}-{f}" for b, f in CASES])
def test_every_bug_is_detected_at_its_stage_with_its_cause(bug, family):
    result = run_one(bug, family)
    assert result.detected, f"{bug.name} on {family}: no difference found"
    assert result.expected, f"{bug.name} on {family}: parted at {result.stage}: {result.cause}"


@pytest.mark.parametrize("family", list(ZOO_FAMILIES))
def test_correct_pairs_raise_no_alarm(family):
    for name, pair, verdict in false_alarms([family]):
        assert verdict.agree, f"{name}, {pair}: {verdict.summary()}"


def lucidrains_sinusoid(t, dim, theta=10000):
    """lucidrains/denoising-diffusion-pytorch ``SinusoidalPosEmb.forward``: exp(k * -(ln theta / (h - 1)))."""
    half = dim // 2
    emb = torch.exp(torch.arange(half) * -(math.log(theta) / (half - 1)))
    emb = t.float()[:, None] * emb[None, :]
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


def edm_positional(x, num_channels, max_positions=10000):
    """NVlabs/edm training/networks.py ``PositionalEmbedding.forward`` (endpoint=False): (1 / P) ** (k / h)."""
    freqs = torch.arange(num_channels // 2, dtype=torch.float32) / (num_channels // 2)
    x = x.float().ger(((1 / max_positions) ** freqs).to(torch.float32))
    return torch.cat([x.cos(), x.sin()], dim=1)


@pytest.mark.parametrize(
    ("family", "transcription"),
    [("lucidrains_ddpm", lucidrains_sinusoid), ("edm", edm_positional), ("ddpm", lucidrains_sinusoid)],
)
def test_another_float32_operation_order_is_no_difference(family, transcription):
    """The codebase's own frequencies (one ulp or two from ours) and our MLP: judged against the float32
    rounding of the phase at each t, the pair agrees; the sinusoids differ by more than 1e-5 at t = 999."""
    ours = family_embedder(family)
    t = family_timesteps(family)
    width = ours.time_embedding.linear_1.in_features
    theirs = {"sinusoid": lambda x: transcription(x, width), "time embedding": ours.time_embedding}
    verdict = verify_port(ours, theirs, t)
    assert verdict.agree, verdict.summary()
    if family != "edm":  # c_noise keeps EDM's phases small
        assert verdict.stages[2].max_abs > 1e-5


def test_x_and_y_swapped_hide_on_equal_coordinates():
    """Why tests on all-ones inputs did not catch it: where x == y the swapped table is the same."""
    diagonal = torch.arange(4.0)[:, None].expand(4, 2)
    ref = {"sinusoid": lambda p: grid_embedding(p, (16, 16), "mae")}
    swapped = {"sinusoid": lambda p: grid_embedding(p.flip(-1), (16, 16), "mae")}
    assert verify_port(ref, swapped, diagonal).agree
    verdict = verify_port(ref, swapped, grid_positions(3, 5))
    assert verdict.causes[0].startswith("x and y swapped")


def test_the_zoo_cites_its_reports_and_covers_twenty_classes():
    assert len(ZOO) >= 20 and len({b.name for b in ZOO}) == len(ZOO)
    for bug in ZOO:
        assert bug.sources and all("#" in s or ": " in s for s in bug.sources), bug.name
        assert set(bug.families) <= set(ZOO_FAMILIES), bug.name


def test_the_table_has_a_row_per_class_and_a_cell_per_family():
    results = [run_one(ZOO[0], f) for f in ZOO[0].families]
    table = zoo_table(results, [])
    assert ZOO[0].title in table and "0 false alarms" in table
    row = next(line for line in table.splitlines() if line.startswith(f"| {ZOO[0].name} | "))
    assert row.count("|") == len(ZOO[0].families) + 2 and "MISS" not in row  # a cell per family, each found
    missed = zoo_table([dataclasses.replace(results[0], detected=False), *results[1:]])
    assert next(line for line in missed.splitlines() if line.startswith(f"| {ZOO[0].name} | ")).count("MISS") == 1
    ref = {"sinusoid": lambda p: grid_embedding(p, (16, 16), "mae")}
    parted = verify_port(ref, {"sinusoid": lambda p: grid_embedding(p.flip(-1), (16, 16), "mae")}, grid_positions(3, 5))
    alarms = zoo_table(results, [("flux", "a correct pair", parted)])
    assert "1 checked, 1 false alarms" in alarms and "- false alarm: flux, a correct pair: sinusoid" in alarms
