"""Why two time paths part at the sinusoid or after it, in a porter's words.

The sinusoid: a hard-coded width, an activation applied to it, x and y swapped in a 2-D position
table (or its rows flattened in the other order), a 16-bit phase, and the convention's own fields
(the diff report's causes: swapped halves, ``half`` vs ``half - 1``, layout, max_period). The MLP: its
weights (ported for the other half order), its activation, a final activation dropped or added. The
modulation: its chunks in another order (shift and scale swapped).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..analysis.detect import detect_convention
from ..analysis.diff_report import embedding_causes
from ..sinusoidal import frequencies_np
from .stage import Stage
from .trace import TimePathTrace

__all__ = ["embedding_stage_causes"]

_CHUNKS = (6, 3, 2, 9, 4, 12)  # adaLN-Zero: shift, scale, gate (x2 for attention and MLP); scale-shift: 2
_ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": nn.functional.silu,
    "gelu": nn.functional.gelu,
    "mish": nn.functional.mish,
    "relu": torch.relu,
}
_HALF = (torch.float16, torch.bfloat16)  # the finer first


def embedding_stage_causes(a: Stage, b: Stage, ref: TimePathTrace, cand: TimePathTrace, ref_port, cand_port):
    x, y = a.value.detach().double().cpu(), b.value.detach().double().cpu()
    opaque = next((side for side, t in (("reference", ref), ("candidate", cand)) if t.opaque), None)
    if opaque is not None:
        return [
            f"the {opaque}'s modules record no stage (its sinusoid and MLP are inline code, not diffusers' modules "
            "or ours), so only the outputs were compared: pass its stages as callables (trace_stages) to see where "
            "they part"
        ]
    if a.kind == "sinusoid":
        return _sinusoid_causes(a, b, x, y, ref, cand)
    if x.shape != y.shape:
        return [f"different shapes: the reference gives {tuple(x.shape)}, the candidate {tuple(y.shape)}"]
    if a.kind == "time embedding":
        return _mlp_causes(a, b, x, y, cand, ref_port, cand_port)
    if a.kind == "modulation":
        found = _chunk_order(x, y) or _silu_before(a, x, y, ref_port)
        return [found] if found else _weight_causes(a, b, ref_port, cand_port)
    return [
        "the time path agrees (within float32 rounding) up to the blocks: the difference lies elsewhere in the model"
    ]


def _input(trace: TimePathTrace, stage: Stage) -> Stage | None:
    """The sinusoid input recorded just before ``stage`` in ``trace``."""
    i = next(i for i, s in enumerate(trace.stages) if s is stage)
    return next((s for s in reversed(trace.stages[:i]) if s.kind == "sinusoid input"), None)


def _sinusoid_causes(a: Stage, b: Stage, x, y, ref: TimePathTrace, cand: TimePathTrace) -> list[str]:
    if x.shape != y.shape:
        if x.shape[:-1] == y.shape[:-1]:
            return [
                f"width: the candidate's sinusoid gives {y.shape[-1]} features where the reference's gives "
                f"{x.shape[-1]}: a width hard-coded instead of read from the model (the MLP's input width)"
            ]
        return [f"different shapes: the reference gives {tuple(x.shape)}, the candidate {tuple(y.shape)}"]
    for name, act in _ACTS.items():
        if torch.allclose(act(x), y, rtol=1e-5, atol=1e-6):
            return [
                f"an activation on the sinusoid: the candidate applies {name} to the sinusoid itself "
                "(where a Linear layer belongs)"
            ]
    given = _input(ref, a)
    positions = given.value if given is not None else ref.stages[0].value
    if positions.dim() == 2 and positions.shape[-1] == 2 and x.dim() == 2:
        grid = _grid_causes(x, y)
        if grid:
            return [grid]
    t = (given.phase if given is not None and given.phase is not None else positions).detach().double().cpu()
    rows, other = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
    if t.numel() != rows.shape[0]:
        return ["a different sinusoid: the same inputs give other features (no single known cause)"]
    t = t.reshape(-1)
    stored = max((torch.finfo(s.value.dtype).eps for s in (a, b) if s.value.dtype.is_floating_point), default=0.0)
    named = embedding_causes(rows.numpy(), other.numpy(), t.numpy(), 1e-4, detect_tol=1e-3 + stored)
    if named and not any("matches no known" in c for c in named):
        return [f"a different sinusoid (A: reference, B: candidate): {c}" for c in named]
    half = _half_precision(rows, other, t)
    return [half] if half else [f"a different sinusoid (A: reference, B: candidate): {c}" for c in named]


def _grid_causes(x: torch.Tensor, y: torch.Tensor) -> str | None:
    """A 2-D position table ``[N, d]``: the two axes' blocks swapped, or the rows in another order."""
    half = x.shape[-1] // 2
    if torch.allclose(torch.cat([x[:, half:], x[:, :half]], -1), y, rtol=0, atol=1e-6):
        return (
            "x and y swapped: the candidate embeds (y, x) where the reference embeds (x, y) (the two axes' "
            "blocks of the 2-D table exchanged); a square grid tested on equal coordinates hides it"
        )
    match = torch.cdist(y, x).min(-1)
    if bool((match.values <= 1e-6).all()) and not torch.equal(match.indices, torch.arange(len(x))):
        return (
            "rows flattened in the other order: the candidate's rows are the reference's embeddings in another "
            "order (meshgrid indexing 'xy' against 'ij', or height and width exchanged in the reshape)"
        )
    return None


def _half_precision(x: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> str | None:
    """The difference is what a 16-bit phase gives: the reference's own convention (detected), the phase
    ``t * w`` of each entry, and the largest relative phase error the difference implies (where sin and
    cos are not saturated), against each 16-bit float's epsilon."""
    found = detect_convention(x.numpy(), t.numpy()) if t.unique().numel() >= 4 else None
    if found is None or not found.matched or found.convention is None:
        return None
    c = found.convention
    half = x.shape[-1] // 2
    w = torch.from_numpy(frequencies_np(2 * half, c.freq_shift, c.max_period))
    per_column = w.repeat(2) if c.layout == "concat" else w.repeat_interleave(2)
    phase = (t[:, None] * c.scale * per_column[None, :]).abs()
    diff = (x[:, : 2 * half] - y[:, : 2 * half]).abs()
    usable = (phase >= 0.5) & (phase <= 256)  # a visible error that sin does not fold back
    if not usable.any() or float(diff.max()) <= 64 * torch.finfo(torch.float32).eps:
        return None
    implied = float((diff[usable] / phase[usable]).max())
    for dtype in _HALF:
        eps = torch.finfo(dtype).eps
        if implied <= 1.5 * eps:
            name = str(dtype)[6:]
            return (
                f"sinusoid computed in {name}: the features part as the phase t * w grows, with a relative phase "
                f"error up to {implied:.2g} ({name}'s epsilon is {eps:.2g}); one side forms the phase in a "
                "16-bit float (keep the sinusoid in float32)"
            )
    return None


def _mlp_causes(a: Stage, b: Stage, x, y, cand: TimePathTrace, ref_port, cand_port) -> list[str]:
    weights = _weight_causes(a, b, ref_port, cand_port)
    if not weights[0].startswith("same weights"):
        return weights
    for name, act in _ACTS.items():
        if torch.allclose(act(y), x, rtol=1e-5, atol=1e-6):
            return [
                f"final activation dropped: the reference applies {name} after the MLP (EDM's emb = silu(...)), "
                "the candidate does not"
            ]
        if torch.allclose(act(x), y, rtol=1e-5, atol=1e-6):
            return [
                f"final activation added: the candidate applies {name} after the MLP once more, the reference does not"
            ]
    mlp = _submodule(ref_port, a.module)
    features = [s for s in cand.stages if s.kind == "sinusoid" and s.label == a.label]
    if mlp is None or not features or not hasattr(mlp, "linear_1"):
        return weights
    sinusoid = features[0].value.to(mlp.linear_1.weight.dtype)
    for name, act in _ACTS.items():
        out = mlp(act(sinusoid))
        if out.shape == y.shape and torch.allclose(out.double(), y, rtol=1e-5, atol=1e-6):
            return [
                f"an activation on the sinusoid: the candidate applies {name} to the sinusoid before the MLP's "
                "first Linear"
            ]
    linear_1, linear_2 = mlp.linear_1, mlp.linear_2
    hidden = linear_1(sinusoid)
    for name, act in _ACTS.items():
        out = linear_2(act(hidden))
        if (
            name != type(mlp.act).__name__.lower()
            and out.shape == y.shape
            and torch.allclose(out.double(), y, rtol=1e-5, atol=1e-6)
        ):
            return [f"activation: the candidate's MLP uses {name} where the reference's uses {type(mlp.act).__name__}"]
    return weights


def _silu_before(a: Stage, x: torch.Tensor, y: torch.Tensor, ref_port) -> str | None:
    """One side's block applies its projection to the time embedding without the SiLU in front: the
    input recovered from one side's output (least squares through the reference's Linear) explains
    the other side's output with the SiLU applied."""
    lin = _submodule(ref_port, a.module)
    if not isinstance(lin, nn.Linear) or lin.out_features < lin.in_features:
        return None
    w = lin.weight.detach().double()
    bias = lin.bias.detach().double() if lin.bias is not None else torch.zeros(lin.out_features, dtype=torch.float64)
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
    tol = 1e-4 * max(1.0, float(x.abs().max()))
    for plain, with_silu, side in ((rows_y, rows_x, "candidate"), (rows_x, rows_y, "reference")):
        emb = torch.linalg.lstsq(w, (plain - bias).T).solution.T
        if torch.allclose(nn.functional.silu(emb) @ w.T + bias, with_silu, rtol=0, atol=tol):
            return (
                f"SiLU before the projection dropped: the {side}'s block computes Linear(emb) where the other "
                "computes Linear(SiLU(emb)) (the nonlinearity in front of each block's time projection missing)"
            )
    return None


def _submodule(port, path: str):
    if not isinstance(port, nn.Module):
        return None
    try:
        return port.get_submodule(path) if path else port
    except AttributeError:
        return None


def _chunk_order(x: torch.Tensor, y: torch.Tensor) -> str | None:
    width = x.shape[-1]
    tol = 1e-5 * max(1.0, float(x.abs().max()))
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
                f"modulation order: the same {n} chunks in another order (candidate chunk i is reference chunk "
                f"order[i], order = {order}; e.g. shift and scale swapped, as converters must undo with "
                "swap_scale_shift)"
            )
    return None


def _weight_causes(a: Stage, b: Stage, ref_port, cand_port) -> list[str]:
    ma, mb = _submodule(ref_port, a.module), _submodule(cand_port, b.module)
    if ma is None or mb is None:
        return [f"the {a.kind} differs while its input agrees: weights, activation or layer order"]
    wa, wb = ma.state_dict(), mb.state_dict()
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
