"""Two implementations of one time path: where do they part, by how much, and why?

:func:`verify_port` traces both (:func:`trace_time_path`), lines their stages up (the timestep, the
sinusoid's input, the sinusoid, the time MLP, each block's modulation, the output; per label:
timestep, guidance, time ids ...) and names the first stage that differs with its likely cause:
input scaling (x 1000 or / 1000), dtype rounding, reversed time (1 - t), a different sinusoid
(the diff report's causes: swapped halves, half vs half - 1, layout, max_period), guidance scaling,
MLP weights (columns of swapped halves), the order of the modulation's chunks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..analysis.diff_report import embedding_causes
from ..analysis.relation import relate
from ..guards import TimestepsLike
from .trace import Stage, TimePathTrace, trace_stages, trace_time_path

__all__ = ["PortVerdict", "verify_port"]

_CHUNKS = (6, 3, 2, 9, 4, 12)  # adaLN-Zero: shift, scale, gate (x2 for attention and MLP); scale-shift: 2
Port = TimePathTrace | nn.Module | Mapping[str, Callable]


@dataclass
class StageDiff:
    """One aligned stage: ``max_abs`` difference and ``relative`` (max abs / the reference's rms) over
    the entries finite on both sides; ``nonfinite``: entries where one side is NaN or infinite and the
    other is not (or holds another infinity), ``shared_nonfinite``: entries non-finite alike on both."""

    kind: str
    label: str
    module: str
    max_abs: float
    relative: float
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    nonfinite: int = 0
    shared_nonfinite: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind} ({self.label})" + (f" [{self.module}]" if self.module else "")


@dataclass
class PortVerdict:
    """The result of :func:`verify_port`: ``parted`` is the first stage that differs (None: they
    agree on every stage both record), ``causes`` its likely causes, ``stages`` every aligned stage."""

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
        for d in self.stages:
            mark = "  <- first difference" if d is self.parted else ""
            if d.shapes[0] != d.shapes[1]:
                lines.append(f"  {d.name}: shapes {d.shapes[0]} vs {d.shapes[1]}{mark}")
            else:
                lines.append(f"  {d.name}: max abs {d.max_abs:.3g} (relative {d.relative:.3g}){mark}")
        if self.parted is None:
            return "\n".join(lines + ["  the two time paths agree on every stage both record"])
        return "\n".join(lines + [f"  likely cause: {c}" for c in self.causes])


def _traced(port: Port, timesteps, inputs, timestep_arg) -> TimePathTrace:
    if isinstance(port, TimePathTrace):
        return port
    if isinstance(port, nn.Module):
        return trace_time_path(port, timesteps, inputs, timestep_arg=timestep_arg)
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


def _compare(a: Stage, b: Stage) -> StageDiff:
    x, y = a.value.detach().double().cpu(), b.value.detach().double().cpu()
    shapes = (tuple(x.shape), tuple(y.shape))
    if shapes[0] != shapes[1]:
        return StageDiff(a.kind, a.label, a.module, float("inf"), float("inf"), shapes)
    finite = x.isfinite() & y.isfinite()
    # NaN compares unequal to everything, so a max over it would hide a broken side: count instead
    alike = (x.isnan() & y.isnan()) | (~finite & (x == y))
    nonfinite, shared = int((~finite & ~alike).sum()), int(alike.sum())
    diff = float((x - y)[finite].abs().max()) if finite.any() else 0.0
    rms = float(x[finite].pow(2).mean().sqrt()) if finite.any() else 0.0
    return StageDiff(a.kind, a.label, a.module, diff, diff / rms if rms > 0 else diff, shapes, nonfinite, shared)


def _scale(stage: Stage) -> float:
    """``max(1, max |reference|)`` over the reference's finite entries: what ``tol`` is relative to."""
    v = stage.value.detach().double()
    v = v[v.isfinite()]
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
    tol: float = 1e-5,
    timestep_arg: str = "timestep",
) -> PortVerdict:
    """Run two implementations of a time path on the same ``timesteps`` and name where they part.

    Args:
        reference: a model (diffusers' or ours), a :class:`TimePathTrace` already taken, or callables
            per stage (``{"sinusoid input": f, "sinusoid": g, "time embedding": h}``, see :func:`trace_stages`).
        candidate: the other implementation, in the same forms.
        timesteps: the timestep argument both are given (not needed when both are traces); 4 or
            more distinct values let a differing sinusoid's conventions be named.
        inputs: the reference model's other keyword arguments (None: ``model(timesteps)``).
        candidate_inputs: the candidate's, when they differ from ``inputs``.
        tol: a stage differs where ``max abs difference > tol * max(1, max |reference|)``.
        timestep_arg: the keyword the timestep is passed as.
    """
    tol = _check_tol(tol)
    ref = _traced(reference, timesteps, inputs, timestep_arg)
    cand = _traced(candidate, timesteps, candidate_inputs if candidate_inputs is not None else inputs, timestep_arg)
    ka, kb = _keyed(ref), _keyed(cand)
    diffs, parted, causes = [], None, []
    previous: dict[tuple[str, str], StageDiff] = {}
    for key, a in ka.items():
        if key not in kb:
            continue
        d = _compare(a, kb[key])
        diffs.append(d)
        if parted is None and (d.nonfinite or d.max_abs > tol * _scale(a)):
            parted = d
            causes = _causes(a, kb[key], ref, cand, reference, candidate, previous, tol)
        previous[(a.kind, a.label)] = d
    if not diffs:
        raise ValueError("the reference and the candidate record no stage in common; nothing to compare")
    return PortVerdict(parted, causes, diffs, tol, ref, cand)


# --------------------------------------------------------------------------------------- causes
def _causes(a: Stage, b: Stage, ref, cand, ref_port, cand_port, previous, tol) -> list[str]:
    x, y = a.value.detach().double().cpu(), b.value.detach().double().cpu()
    if x.shape != y.shape:
        return [f"different shapes: the reference gives {tuple(x.shape)}, the candidate {tuple(y.shape)}"]
    if not torch.equal(x.isfinite(), y.isfinite()):
        return _nonfinite_causes(a, x, y, ref_port, cand_port)
    if a.kind in ("timestep", "sinusoid input"):
        return [_input_cause(a, b)]
    if a.kind == "sinusoid":
        inputs = ref.find("sinusoid input", a.label)
        t = inputs[0].value if inputs else ref.stages[0].value
        before = previous.get(("sinusoid input", a.label))
        if before is not None and before.max_abs > 0:
            return ["the sinusoid inputs already differ (below the tolerance); see that stage"]
        found = embedding_causes(x.numpy(), y.numpy(), t.detach().double().cpu().numpy(), tol)
        return [f"a different sinusoid (A: reference, B: candidate): {c}" for c in found]
    if a.kind in ("time embedding", "modulation"):
        if a.kind == "modulation":
            order = _chunk_order(x, y, tol)
            if order is not None:
                return [order]
        return _weight_causes(a, b, ref_port, cand_port)
    return ["the time path agrees up to the blocks: the difference lies elsewhere in the model"]


def _input_cause(a: Stage, b: Stage) -> str:
    how = relate(a.value, b.value) or "no known map between them"
    if ("1000 x" in how or "0.001 x" in how) and a.label == "guidance":
        return f"guidance scaling: {how} (one port multiplies the guidance scale by 1000, the other does not)"
    if "1000 x" in how or "0.001 x" in how:
        return f"input scaling: {how} (sigma against sigma * 1000, or the 1000 applied twice)"
    if "rounded to" in how:
        return f"dtype rounding: {how} (reference {a.value.dtype}, candidate {b.value.dtype})"
    if "- reference" in how:
        return f"reversed time: {how} (one side expects 1 - t)"
    return f"the {a.label} differs before the sinusoid: {how}"


def _chunk_order(x: torch.Tensor, y: torch.Tensor, tol: float) -> str | None:
    width = x.shape[-1]
    for n in _CHUNKS:
        if width % n:
            continue
        xs, ys = x.reshape(*x.shape[:-1], n, width // n), y.reshape(*y.shape[:-1], n, width // n)
        order = []
        for i in range(n):
            match = [j for j in range(n) if torch.allclose(ys[..., i, :], xs[..., j, :], atol=tol, rtol=0)]
            if not match:
                break
            order.append(match[0])
        if len(order) == n and order != list(range(n)):
            return (
                f"modulation order: the same {n} chunks in another order (candidate chunk i = reference chunk "
                f"{order}[i]; e.g. shift and scale swapped)"
            )
    return None


def _weight_causes(a: Stage, b: Stage, ref_port, cand_port) -> list[str]:
    if not (isinstance(ref_port, nn.Module) and isinstance(cand_port, nn.Module)):
        return [f"the {a.kind} differs while its input agrees: weights, activation or layer order"]
    try:
        wa = ref_port.get_submodule(a.module).state_dict()
        wb = cand_port.get_submodule(b.module).state_dict()
    except AttributeError:
        return [f"the {a.kind} differs while its input agrees: weights, activation or layer order"]
    if wa.keys() != wb.keys():
        return [f"the {a.kind} modules differ in their parameters: {sorted(wa)} vs {sorted(wb)}"]
    causes = []
    for name in wa:
        p, q = wa[name].double(), wb[name].double()
        if p.shape != q.shape:
            causes.append(f"{b.module}.{name} has shape {tuple(q.shape)}, the reference's {tuple(p.shape)}")
        elif not torch.equal(p, q):
            if p.dim() == 2 and p.shape[1] % 2 == 0 and torch.equal(p.roll(p.shape[1] // 2, dims=1), q):
                causes.append(
                    f"{b.module}.{name}: the reference's input columns with the two halves swapped "
                    "(weights ported for the other sin/cos order)"
                )
            else:
                causes.append(f"{b.module}.{name} differs: max abs {float((p - q).abs().max()):.3g}")
    return causes or [f"same weights: the {a.kind}'s activation or layer order differs"]


def _nonfinite_causes(a: Stage, x: torch.Tensor, y: torch.Tensor, ref_port, cand_port) -> list[str]:
    """Which side turns NaN or infinite at this stage, and the non-finite weights that explain it."""
    side, bad = ("candidate", y) if (~y.isfinite() & x.isfinite()).any() else ("reference", x)
    count, nans = int((~bad.isfinite()).sum()), int(bad.isnan().sum())
    what = f"{nans} NaN" + (f" and {count - nans} infinite" if count > nans else "")
    causes = [f"non-finite values: the {side} gives {what} of {bad.numel()} entries at the {a.kind} ({a.label})"]
    port = cand_port if side == "candidate" else ref_port
    if isinstance(port, nn.Module):
        broken = [name for name, t in port.state_dict().items() if t.is_floating_point() and not t.isfinite().all()]
        if broken:
            causes.append(f"the {side}'s weights hold NaN or infinity: {', '.join(broken[:8])}")
    return causes
