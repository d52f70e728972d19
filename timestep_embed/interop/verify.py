"""Two implementations of one time path: where do they part, by how much, and why?

[`verify_port`][timestep_embed.interop.verify_port] traces both
([`trace_time_path`][timestep_embed.interop.trace_time_path]), each called with its own inputs (a whole diffusers model
against a standalone embedder, say), lines their stages up (the timestep, the sinusoid's input, the sinusoid, the time
MLP, each block's modulation, the output; per label: timestep, guidance, time ids, refiner ...) and names the first
stage that differs, with its likely cause in a porter's words (`timestep_embed.interop.causes`).

What differs is judged against what float32 rounding allows, not a fixed tolerance: the sinusoid at
``t`` may differ by a few ulps of its phase ``t * w`` (two correct ports that form the frequencies in
another float32 order do), and each later stage by what that difference can grow into, measured on
the reference's own rows. A NaN or an infinity on one side only is always a difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..guards import TimestepsLike
from .allowance import stage_allowance, stage_values
from .causes import cause_of, missing_cause
from .stage import Stage
from .trace import TimePathTrace, trace_stages, trace_time_path

__all__ = ["PortVerdict", "StageDiff", "verify_port"]

Port = TimePathTrace | nn.Module | Mapping[str, Callable]


@dataclass
class StageDiff:
    """One aligned stage: ``max_abs`` difference and ``relative`` (max abs / the reference's rms) over the
    entries finite on both sides; ``allowed``: the largest difference float32 rounding explains there
    (inf: not judged); ``nonfinite``: entries NaN or infinite on one side only (``shared_nonfinite``:
    alike on both); ``missing``: the side that lacks this stage's label altogether."""

    kind: str
    label: str
    module: str
    max_abs: float
    relative: float
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    nonfinite: int = 0
    shared_nonfinite: int = 0
    allowed: float = 0.0
    missing: str | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} ({self.label})" + (f" [{self.module}]" if self.module else "")


@dataclass
class PortVerdict:
    """The result of [`verify_port`][timestep_embed.interop.verify_port]: ``parted`` is the first stage that differs
    (None: they agree on every stage both record), ``causes`` its likely causes, ``stages`` every aligned stage."""

    parted: StageDiff | None
    causes: list[str]
    stages: list[StageDiff]
    tol: float
    reference: TimePathTrace = field(repr=False)
    candidate: TimePathTrace = field(repr=False)

    @property
    def agree(self) -> bool:
        return self.parted is None

    def summary(self) -> str:
        lines = [f"reference {self.reference.model} vs candidate {self.candidate.model}, tolerance {self.tol:g}"]
        downstream = False  # past the first difference, what a stage allows follows from it: not shown
        for d in self.stages:
            mark = "  <- first difference" if d is self.parted else ""
            if d.missing:
                lines.append(
                    f"  {d.name}: only in the {'reference' if d.missing == 'candidate' else 'candidate'}{mark}"
                )
            elif d.shapes[0] != d.shapes[1]:
                lines.append(f"  {d.name}: shapes {d.shapes[0]} vs {d.shapes[1]}{mark}")
            elif d.nonfinite:
                lines.append(f"  {d.name}: {d.nonfinite} entries NaN or infinite on one side only{mark}")
            elif math.isinf(d.allowed) and d.kind == "timestep":
                lines.append(f"  {d.name}: not compared (each side is given its own timesteps)")
            elif math.isinf(d.allowed) and not downstream:
                lines.append(f"  {d.name}: max abs {d.max_abs:.3g}, not judged: {_UNJUDGED}")
            else:
                shown = d.max_abs and 0 < d.allowed < math.inf and not downstream
                within = f", float32 rounding allows {d.allowed:.2g}" if shown else ""
                lines.append(f"  {d.name}: max abs {d.max_abs:.3g} (relative {d.relative:.3g}){within}{mark}")
            downstream = downstream or d is self.parted
        if self.parted is None:
            unjudged = sum(math.isinf(d.allowed) and d.kind != "timestep" for d in self.stages)
            last = f"every stage judged ({unjudged} not judged)" if unjudged else "every stage both record"
            return "\n".join(lines + [f"  the two time paths agree on {last}"])
        return "\n".join(lines + [f"  likely cause: {c}" for c in self.causes])


_UNJUDGED = "how a difference grows here is unknown (pass 2 or more distinct timesteps)"


def _traced(port: Port, timesteps, inputs, timestep_arg: str, side: str) -> TimePathTrace:
    if isinstance(port, TimePathTrace):
        return port
    if timesteps is None:
        raise ValueError(f"timesteps: the {side} is a model, so it needs the timesteps to run on (got None)")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise TypeError(f"the {side}'s inputs must be a mapping of keyword arguments, got {type(inputs).__name__}")
    if isinstance(port, nn.Module):
        return trace_time_path(port, timesteps, inputs or None, timestep_arg=timestep_arg)
    if isinstance(port, Mapping):
        return trace_stages(port, timesteps)
    raise TypeError(f"a port is a TimePathTrace, an nn.Module or a dict of stage callables, got {type(port).__name__}")


def _keyed(trace: TimePathTrace) -> dict[tuple[str, str, int], Stage]:
    counts: dict[tuple[str, str], int] = {}
    out = {}
    for s in trace.stages:
        n = counts[(s.kind, s.label)] = counts.get((s.kind, s.label), -1) + 1
        out[(s.kind, s.label, n)] = s
    return out


def _aligned(ref: TimePathTrace, cand: TimePathTrace):
    """Both sides' stages by key. A side whose modules record nothing (an inline sinusoid and MLP: its timestep and
    output only) has its output compared with the other side's last stage, which a trace records in place of an
    output equal to it."""
    ka, kb = _keyed(ref), _keyed(cand)
    out = ("output", "timestep", 0)
    for mine, other, trace, own in ((kb, ka, ref, cand), (ka, kb, cand, ref)):
        if out in mine and out not in other and trace.stages and own.opaque:
            other[out] = trace.stages[-1]
    return ka, kb


def _compare(a: Stage, b: Stage) -> StageDiff:
    x, y = stage_values(a), stage_values(b)
    shapes = (tuple(x.shape), tuple(y.shape))
    if shapes[0] != shapes[1]:
        return StageDiff(a.kind, a.label, a.module, math.inf, math.inf, shapes)
    finite = x.isfinite() & y.isfinite()
    # NaN compares unequal to everything, so a max over it would hide a broken side: count instead
    alike = (x.isnan() & y.isnan()) | (~finite & (x == y))
    nonfinite, shared = int((~finite & ~alike).sum()), int(alike.sum())
    diff = float((x - y)[finite].abs().max()) if finite.any() else 0.0
    rms = float(x[finite].pow(2).mean().sqrt()) if finite.any() else 0.0
    return StageDiff(a.kind, a.label, a.module, diff, diff / rms if rms > 0 else diff, shapes, nonfinite, shared)


def _scale(values: torch.Tensor) -> float:
    """``max(1, max |reference|)`` over the finite entries: what ``tol`` is relative to."""
    v = values[values.isfinite()]
    return max(1.0, float(v.abs().max())) if v.numel() else 1.0


def _check_tol(tol) -> float:
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0 (a relative tolerance, e.g. 1e-5), got {tol!r}")
    return float(tol)


def verify_port(
    reference: Port,
    candidate: Port,
    timesteps: TimestepsLike | None = None,
    *,
    inputs: Mapping | None = None,
    candidate_inputs: Mapping | None = None,
    candidate_timesteps: TimestepsLike | None = None,
    tol: float = 1e-5,
    timestep_arg: str = "timestep",
    candidate_timestep_arg: str | None = None,
) -> PortVerdict:
    """Run two implementations of a time path, each on its own inputs, and name where they part.

    Args:
        reference: a model (diffusers' or ours), a [`TimePathTrace`][timestep_embed.interop.TimePathTrace] already
            taken, or callables per stage (``{"sinusoid input": f, "sinusoid": g, "time embedding": h}``, see
            [`trace_stages`][timestep_embed.interop.trace_stages]).
        candidate: the other implementation, in the same forms.
        timesteps: the reference's timestep argument (and the candidate's, unless
            ``candidate_timesteps`` is given); 4 or more distinct values let a differing sinusoid's
            conventions be named, 2 or more let a rounding difference be followed through the MLP.
        inputs: the reference model's other keyword arguments (None or ``{}``: ``model(timesteps)``).
        candidate_inputs: the candidate's (None: the reference's; ``{}``: a standalone embedder,
            called as ``candidate(timesteps)``).
        candidate_timesteps: what the candidate is given as its timestep, when its pipeline feeds
            another quantity (its ``"timestep"`` stage is then not compared; what reaches the
            sinusoid is).
        tol: the relative tolerance on top of float32 rounding: a stage differs where its difference
            exceeds ``tol * max(1, max |reference|)`` plus what rounding allows there.
        timestep_arg: the keyword the reference's timestep is passed as (``candidate_timestep_arg``:
            the candidate's, default the same).
    """
    tol = _check_tol(tol)
    if not isinstance(timestep_arg, str) or (
        candidate_timestep_arg is not None and not isinstance(candidate_timestep_arg, str)
    ):
        raise TypeError(f"timestep_arg must be a keyword name (str), got {timestep_arg!r}")
    ref = _traced(reference, timesteps, inputs, timestep_arg, "reference")
    own = candidate_timesteps is not None
    cand = _traced(
        candidate,
        candidate_timesteps if own else timesteps,
        candidate_inputs if candidate_inputs is not None else inputs,
        candidate_timestep_arg or timestep_arg,
        "candidate",
    )
    diffs, parted, pair = _judge(ref, cand, tol, skip_timestep=own)
    if all(d.kind == "timestep" for d in diffs):
        kinds = [sorted({s.kind for s in t.stages}) for t in (ref, cand)]
        raise ValueError(
            f"the reference ({', '.join(kinds[0])}) and the candidate ({', '.join(kinds[1])}) record no stage in "
            "common past the timestep, so nothing of the time path would be compared: pass the candidate's stages as "
            "callables (trace_stages), or a model whose time modules are diffusers' or ours"
        )
    causes: list[str] = []
    if parted is not None and parted.missing:
        causes = missing_cause(parted, ref, cand)
    elif parted is not None and pair is not None:
        causes = cause_of(pair[0], pair[1], ref, cand, reference, candidate)
    return PortVerdict(parted, causes, diffs, tol, ref, cand)


def _whole_model(trace: TimePathTrace) -> bool:
    return any(s.kind in ("modulation", "output") for s in trace.stages)


def _judge(ref: TimePathTrace, cand: TimePathTrace, tol: float, skip_timestep: bool):
    """``(every aligned stage, the first that differs or None, its two stages (reference, candidate) or None where
    one side lacks it)``, in the reference's order."""
    ka, kb = _aligned(ref, cand)
    labels_a, labels_b = {k[1] for k in ka}, {k[1] for k in kb}
    diffs: list[StageDiff] = []
    seen: dict[tuple[str, str, int], StageDiff] = {}
    parted: tuple[StageDiff, tuple[Stage, Stage] | None] | None = None
    for key, a in ka.items():
        if key not in kb:
            # a label the candidate lacks altogether matters only where its blocks would have received it
            if parted is None and key[1] not in labels_b and _whole_model(cand):
                d = _missing(a, "candidate")
                diffs.append(d)
                parted = (d, None)
            continue
        d = _compare(a, kb[key])
        differs = d.shapes[0] != d.shapes[1] or d.nonfinite > 0
        if key[0] == "timestep" and skip_timestep:
            d.allowed, differs = math.inf, False  # each side was given its own timesteps
        elif not differs:
            differs = _exceeds(d, key, a, kb[key], ka, kb, seen, tol)
        diffs.append(d)
        seen[key] = d
        if parted is None and differs:
            parted = (d, (a, kb[key]))
    if parted is None and _whole_model(ref):
        extra = next((b for k, b in kb.items() if k[1] not in labels_a), None)
        if extra is not None:
            d = _missing(extra, "reference")
            diffs.append(d)
            parted = (d, None)
    return (diffs, *parted) if parted is not None else (diffs, None, None)


def _missing(stage: Stage, side: str) -> StageDiff:
    shape = tuple(stage.value.shape)
    shapes = (shape, ()) if side == "candidate" else ((), shape)
    return StageDiff(stage.kind, stage.label, stage.module, math.inf, math.inf, shapes, missing=side)


def _exceeds(d: StageDiff, key, a: Stage, b: Stage, ka, kb, seen, tol: float) -> bool:
    """Whether stage ``key`` differs by more than rounding explains; sets ``d.allowed``."""
    allowance = stage_allowance(key, a, ka, kb, seen, tol * _scale(stage_values(a)))
    if isinstance(allowance, float):
        d.allowed = allowance
        return d.max_abs > allowance
    rows = (stage_values(a) - stage_values(b)).abs().nan_to_num(0.0).reshape(allowance.shape[0], -1).amax(-1)
    d.allowed = float(allowance[int(rows.argmax())])  # what rounding allows where the difference is largest
    return bool((rows > allowance).any())
