"""verify_port names each planted bug: the stage where the two time paths part and the cause.

Each test plants one bug class of the ports in the wild into a copy (or a wrapper) of a tiny model
and checks that the verdict's first differing stage and its cause say so.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from timestep_embed import Convention, TimestepEmbedder, sinusoidal_embedding
from timestep_embed.interop import get_contract, mlp_from_diffusers, trace_time_path, verify_port
from timestep_embed.interop.allowance import _growth

from .conftest import build

diffusers = pytest.importorskip("diffusers")
T8 = torch.tensor([0, 3, 100, 250, 500, 750, 917, 999])
SIGMA = torch.tensor([1.0, 0.602151])  # a shifted flow-matching schedule's sigmas, batch of 2


class TimestepFix(nn.Module):
    """A port that changes the timestep before the model sees it (the bug)."""

    def __init__(self, model, fix):
        super().__init__()
        self.model, self.fix = model, fix

    def forward(self, timestep, **inputs):
        return self.model(timestep=self.fix(timestep), **inputs)


class DiffusersTimePath(nn.Module):
    """A diffusers time path alone: Timesteps then TimestepEmbedding."""

    def __init__(self, dim=32, emb=64, **flags):
        super().__init__()
        torch.manual_seed(0)
        self.time_proj = diffusers.models.embeddings.Timesteps(dim, **flags)
        self.time_embedding = diffusers.models.embeddings.TimestepEmbedding(dim, emb)

    def forward(self, t):
        return self.time_embedding(self.time_proj(t))


def ours_like(reference: DiffusersTimePath, convention) -> TimestepEmbedder:
    ours = TimestepEmbedder(64, 32, convention)
    ours.time_embedding = mlp_from_diffusers(reference.time_embedding)
    return ours


def test_identical_ports_agree():
    model, inputs, _ = build("flux_dev")
    verdict = verify_port(model, copy.deepcopy(model), SIGMA, inputs=inputs)
    assert verdict.agree and "agree on every stage" in verdict.summary()
    kinds = {d.kind for d in verdict.stages}
    assert kinds == {"timestep", "sinusoid input", "sinusoid", "time embedding", "modulation", "output"}


def test_input_scaled_by_1000():
    model, inputs, _ = build("flux_dev")
    verdict = verify_port(model, TimestepFix(model, lambda t: t * 1000), SIGMA, inputs=inputs)
    assert (verdict.parted.kind, verdict.parted.label) == ("sinusoid input", "timestep")
    assert verdict.causes[0].startswith("scaled by 1000 twice: the candidate feeds 1000 x the reference's")


def test_dtype_rounding():
    model, inputs, _ = build("sd3")
    verdict = verify_port(model, TimestepFix(model, lambda t: t.to(torch.bfloat16)), SIGMA * 1000, inputs=inputs)
    assert verdict.parted.kind == "sinusoid input"
    assert verdict.causes[0].startswith("rounded to bfloat16: the candidate rounds the timestep to bfloat16")
    assert "602.2..1000 -> integers 604..1000" in verdict.causes[0]


def test_one_minus_t():
    model, inputs, _ = build("flux_dev")
    verdict = verify_port(model, TimestepFix(model, lambda t: 1 - t), SIGMA, inputs=inputs)
    assert verdict.parted.kind == "sinusoid input"
    assert verdict.causes[0].startswith("reversed time: candidate = 1000 - reference")  # Flux multiplies by 1000


def test_guidance_scaled_by_1000_in_one_port():
    model, inputs, _ = build("flux_dev")
    scaled = {**inputs, "guidance": inputs["guidance"] * 1000}
    verdict = verify_port(model, model, SIGMA, inputs=inputs, candidate_inputs=scaled)
    assert (verdict.parted.kind, verdict.parted.label) == ("sinusoid input", "guidance")
    assert verdict.causes[0].startswith("guidance scaled by 1000 twice: the candidate feeds integers 3.5e+06")


def test_swapped_sin_cos_halves():
    reference = DiffusersTimePath(flip_sin_to_cos=True, downscale_freq_shift=0)
    verdict = verify_port(reference, ours_like(reference, Convention("concat", "sin", 0.0)), T8)
    assert verdict.parted.kind == "sinusoid"
    assert "sin and cos halves swapped" in verdict.causes[0]
    assert "A has first='cos', B has first='sin'" in verdict.causes[0]
    assert verdict.stages[-1].relative > 0.1  # the MLP output is far off too


def test_half_vs_half_minus_one_the_dit_port():
    """diffusers' DiT port (shift 1) against facebookresearch/DiT (shift 0) with the same MLP weights."""
    port = DiffusersTimePath(256, 64, flip_sin_to_cos=True, downscale_freq_shift=1)
    verdict = verify_port(port, ours_like_dit(port), torch.arange(1000))
    assert verdict.parted.kind == "sinusoid" and verdict.parted.max_abs == pytest.approx(1.98, abs=0.01)
    assert "half vs half - 1" in verdict.causes[0] and "A has freq_shift=1.0, B has freq_shift=0.0" in verdict.causes[0]


def ours_like_dit(reference: DiffusersTimePath) -> TimestepEmbedder:
    ours = TimestepEmbedder(64, 256, get_contract("dit").convention)
    ours.time_embedding = mlp_from_diffusers(reference.time_embedding)
    return ours


def test_interleaved_layout():
    reference = DiffusersTimePath(flip_sin_to_cos=False, downscale_freq_shift=1)
    verdict = verify_port(reference, ours_like(reference, Convention("interleaved", "sin", 1.0)), T8)
    assert verdict.parted.kind == "sinusoid" and "concatenated vs interleaved" in verdict.causes[0]


def test_mlp_weights_ported_for_the_other_half_order():
    model, inputs, _ = build("sd3")
    candidate = copy.deepcopy(model)
    w = candidate.time_text_embed.timestep_embedder.linear_1.weight
    w.data = w.data.roll(w.shape[1] // 2, dims=1)
    verdict = verify_port(model, candidate, SIGMA * 1000, inputs=inputs)
    assert (verdict.parted.kind, verdict.parted.module) == ("time embedding", "time_text_embed.timestep_embedder")
    assert "linear_1.weight: the reference's input columns with the two halves swapped" in verdict.causes[0]


def test_modulation_chunks_in_another_order():
    model, inputs, _ = build("sd3")
    candidate = copy.deepcopy(model)
    linear = candidate.transformer_blocks[0].norm1.linear  # AdaLayerNormZero: 6 chunks, shift first
    for p in (linear.weight, linear.bias):
        chunks = list(p.data.chunk(6))
        chunks[0], chunks[1] = chunks[1], chunks[0]  # shift and scale swapped
        p.data = torch.cat(chunks)
    verdict = verify_port(model, candidate, SIGMA * 1000, inputs=inputs)
    assert (verdict.parted.kind, verdict.parted.module) == ("modulation", "transformer_blocks.0.norm1.linear")
    assert verdict.causes[0].startswith("modulation order: the same 6 chunks in another order")
    assert "[1, 0, 2, 3, 4, 5]" in verdict.causes[0]


def test_callables_per_stage_and_shape_mismatch():
    reference = DiffusersTimePath(flip_sin_to_cos=True, downscale_freq_shift=0)
    stages = {"sinusoid": reference.time_proj, "time embedding": reference.time_embedding}
    assert verify_port(reference, stages, T8).agree
    narrow = {"sinusoid": diffusers.models.embeddings.Timesteps(16, True, 0)}
    verdict = verify_port(reference, narrow, T8)
    assert verdict.parted.kind == "sinusoid" and verdict.causes[0].startswith(
        "width: the candidate's sinusoid gives 16"
    )
    with pytest.raises(TypeError, match="a port is a TimePathTrace, an nn.Module or a dict"):
        verify_port(reference, "diffusers", T8)


def test_arguments_are_checked_by_name():
    ports = TimestepEmbedder(32)
    with pytest.raises(ValueError, match="timesteps: the reference is a model, so it needs the timesteps"):
        verify_port(ports, ports)
    with pytest.raises(TypeError, match="the candidate's inputs must be a mapping"):
        verify_port(ports, ports, T8, candidate_inputs=[1, 2])
    with pytest.raises(TypeError, match="timestep_arg must be a keyword name"):
        verify_port(ports, ports, T8, timestep_arg=3)


def test_a_whole_model_against_the_standalone_embedder_of_its_checkpoint():
    """Flux fed its pipeline's sigma against the embedder read from its state dict, called alone."""
    model, inputs, _ = build("flux_dev")
    embedder = TimestepEmbedder.from_state_dict(model.state_dict())
    verdict = verify_port(model, embedder, SIGMA, inputs=inputs, candidate_inputs={})
    assert verdict.agree, verdict.summary()
    assert {d.kind for d in verdict.stages} == {"timestep", "sinusoid input", "sinusoid", "time embedding"}
    wrong = TimestepEmbedder.from_state_dict(model.state_dict(), which="guidance")  # the other MLP
    assert not verify_port(model, wrong, SIGMA, inputs=inputs, candidate_inputs={}).agree


def test_each_side_is_given_its_own_timesteps():
    """SD3 is fed the scheduler's sigma * 1000; a port fed sigma that multiplies by T = 1000 itself agrees:
    the sinusoids see the same phase (up to float32 rounding), the given timesteps are not compared."""
    model, inputs, _ = build("sd3")
    port = TimestepEmbedder.from_state_dict(model.state_dict(), time_input="times_T")
    verdict = verify_port(model, port, SIGMA * 1000, inputs=inputs, candidate_inputs={}, candidate_timesteps=SIGMA)
    assert verdict.agree, verdict.summary()
    verdict = verify_port(
        model, port, SIGMA * 1000, inputs=inputs, candidate_inputs={}, candidate_timesteps=SIGMA * 1000
    )
    assert verdict.causes[0].startswith("scaled by 1000 twice")


def test_a_nan_weight_or_a_nan_stage_is_a_difference():
    """A candidate with one NaN weight parts at its MLP; the cause names the weight (issue 25)."""
    reference = TimestepEmbedder(32)
    candidate = copy.deepcopy(reference)
    candidate.time_embedding.linear_2.weight.data[0, 0] = float("nan")
    verdict = verify_port(reference, candidate, torch.tensor([10, 250, 500, 999]))
    assert not verdict.agree and verdict.parted.kind == "time embedding" and verdict.parted.nonfinite == 4
    assert verdict.causes[0].startswith("non-finite values: the candidate gives 4 NaN of 128 entries")
    assert "time_embedding.linear_2.weight" in verdict.causes[1]
    nan_stage = {"sinusoid": lambda t: reference.time_proj(t) * float("nan")}
    verdict = verify_port(reference, nan_stage, T8)
    assert verdict.parted.kind == "sinusoid" and "non-finite" in verdict.causes[0]
    assert verify_port(nan_stage, nan_stage, T8).agree  # NaN alike on both sides is no difference between them


@pytest.mark.parametrize("tol", [float("nan"), float("inf"), -1, True, "1e-5", None])
def test_the_tolerance_is_checked(tol):
    ports = TimestepEmbedder(32)
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        verify_port(ports, ports, T8, tol=tol)


def trace_sinusoid(t, max_period):
    return sinusoidal_embedding(t, 64, "adm", max_period=max_period).bfloat16()


def test_a_sinusoid_returned_in_bfloat16_is_judged_by_its_output_rounding_not_its_phase():
    t = torch.tensor([125.0, 400.0, 730.0, 980.0])
    stages = {m: {"sinusoid": lambda x, m=m: trace_sinusoid(x, m)} for m in (10000.0, 1000.0)}
    assert verify_port(stages[10000.0], {"sinusoid": lambda x: trace_sinusoid(x, 10000.0)}, t).agree
    verdict = verify_port(stages[10000.0], stages[1000.0], t)
    assert verdict.parted.kind == "sinusoid" and verdict.parted.allowed < 0.1, verdict.summary()
    assert "max_period=1000.0" in verdict.causes[0], verdict.causes


def test_with_one_timestep_the_mlp_is_not_judged_and_the_summary_says_why():
    reference = TimestepEmbedder(64, 256).eval()
    candidate = TimestepEmbedder(64, 256, act="gelu", precise=True).eval()
    candidate.load_state_dict(reference.state_dict())
    one = verify_port(reference, candidate, torch.tensor([999.0])).summary()
    assert "not judged: how a difference grows here is unknown (pass 2 or more distinct timesteps)" in one
    assert one.endswith("agree on every stage judged (1 not judged)"), one
    assert "own timesteps" not in one
    assert not verify_port(reference, candidate, T8).agree  # with more rows the activation is found


class InlinePort(nn.Module):
    """black-forest-labs/flux style: the sinusoid written inline, the MLP an ``MLPEmbedder`` of its own."""

    def __init__(self, reference: DiffusersTimePath, first: str):
        super().__init__()
        self.first = first
        self.in_layer, self.out_layer = (
            copy.deepcopy(reference.time_embedding.linear_1),
            copy.deepcopy(reference.time_embedding.linear_2),
        )

    def forward(self, t):
        emb = sinusoidal_embedding(t, 32, "adm", first=self.first)
        return self.out_layer(nn.functional.silu(self.in_layer(emb)))


def test_a_port_with_an_inline_time_path_is_compared_by_its_output():
    reference = DiffusersTimePath(flip_sin_to_cos=True, downscale_freq_shift=0)
    assert verify_port(reference, InlinePort(reference, "cos"), T8).agree
    verdict = verify_port(reference, InlinePort(reference, "sin"), T8)
    assert not verdict.agree and "modules record no stage" in verdict.causes[0], verdict.summary()


def test_stages_in_common_past_the_timestep_are_required():
    reference = DiffusersTimePath(flip_sin_to_cos=True, downscale_freq_shift=0)
    other = trace_time_path(copy.deepcopy(reference), T8)
    for stage in other.stages[1:]:
        stage.label = "guidance"  # nothing but the timestep shares a key with the reference's stages
    with pytest.raises(ValueError, match="record no stage in common past the timestep"):
        verify_port(reference, other, T8)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_integer_steps_scaled_by_1000_are_not_taken_for_a_respaced_index(dtype):
    """t * 1000 of integer steps keeps their order, as a respaced index does; the constant 1000 names it."""
    reference = TimestepEmbedder(64, 16)
    t = torch.tensor([3, 250, 500, 917], dtype=dtype)
    verdict = verify_port(reference, copy.deepcopy(reference), t, candidate_timesteps=t * 1000)
    assert verdict.causes[0].startswith("scaled by 1000 twice: the candidate feeds 1000 x the reference's integers")
    back = verify_port(reference, copy.deepcopy(reference), t * 1000, candidate_timesteps=t)
    assert back.causes[0].startswith("t in [0, 1] where t * 1000 is expected"), back.causes
    respaced = verify_port(reference, copy.deepcopy(reference), t, candidate_timesteps=t // 10)
    assert respaced.causes[0].startswith("respaced index for the original step"), respaced.causes


def growth_over_all_pairs(before: torch.Tensor, after: torch.Tensor) -> float:
    """The growth as one [N, N, width] difference of every pair of rows (memory quadratic in N)."""
    x, y = before.double().reshape(len(before), -1), after.double().reshape(len(after), -1)
    dx = (x[:, None] - x[None]).abs().amax(-1)
    dy = (y[:, None] - y[None]).abs().amax(-1)
    return float((dy[dx > 0] / dx[dx > 0]).max())


def test_the_growth_between_stages_equals_the_all_pairs_formula_for_any_block():
    torch.manual_seed(0)
    before = torch.randn(37, 6)
    before[5] = before[2]  # a repeated row: a pair with no difference is left out
    after = torch.tanh(before @ torch.randn(6, 9))
    expected = growth_over_all_pairs(before, after)
    for block in (None, 1, 2, 5, 36, 37, 100):
        assert _growth(before, after, block) == expected
    assert _growth(before[:1].expand(4, 6), after[:4]) == math.inf  # one distinct row: unknown


def test_the_growth_between_stages_takes_memory_linear_in_the_rows():
    """800 rows of width 512: every pair at once is 2.6 GB a difference; a block of rows stays small."""
    code = (
        "import resource, torch\n"
        "from timestep_embed.interop.allowance import _growth\n"
        "x = torch.randn(800, 512, dtype=torch.float64); y = x.tanh()\n"
        "start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "_growth(x, y)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 300, f"_growth raised the peak memory by {out.stdout.strip()} MB"
