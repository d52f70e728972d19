"""Why two time paths part, in a porter's words: the likely causes [`verify_port`][timestep_embed.interop.verify_port]
names.

Each cause starts with a short name of the bug class (``"scaled by 1000 twice: ..."``) and says which
side does what, both ways round (the candidate feeds sigma where the reference feeds ln(sigma) / 4,
or the reverse). The causes of the bugs seen in the wild before the sinusoid are here (scaling,
rounding, truncation, reversed time, a shift applied twice, a respaced index, a map skipped, per-token
timesteps collapsed, a dropped guidance path); those of the sinusoid and after it are in
`timestep_embed.interop.embedding_causes`.
"""

from __future__ import annotations

import torch

from ..analysis.relation import relate
from .embedding_causes import embedding_stage_causes
from .stage import Stage
from .trace import TimePathTrace

__all__ = ["cause_of", "missing_cause", "describe_values"]

_HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def describe_values(v: torch.Tensor) -> str:
    """``"integers 0..999"``, ``"0.0292..14.6"``, ``"[2, 32] per token, 250..999"``: what a stage holds."""
    x = v.detach().double().reshape(-1)
    if not x.numel():
        return "nothing"
    kind = "integers " if bool((x == x.round()).all()) else ""
    shape = f"{list(v.shape)} per token, " if v.dim() > 1 else ""
    return f"{shape}{kind}{float(x.min()):.4g}..{float(x.max()):.4g}"


def cause_of(a: Stage, b: Stage, ref: TimePathTrace, cand: TimePathTrace, ref_port, cand_port) -> list[str]:
    """The likely causes of the difference between stage ``a`` (reference) and ``b`` (candidate)."""
    x, y = a.value.detach().double().cpu(), b.value.detach().double().cpu()
    given = _given(ref, cand) if a.kind in ("timestep", "sinusoid input") else None
    if given is not None:  # each side was given its own timesteps: what the pipelines feed explains it first
        found = _relation(given[0], given[1], given[0])
        if found:
            return [found] + (
                _nonfinite_causes(a, x, y, ref_port, cand_port) if not torch.equal(x.isfinite(), y.isfinite()) else []
            )
    if x.shape == y.shape and not torch.equal(x.isfinite(), y.isfinite()):
        return _nonfinite_causes(a, x, y, ref_port, cand_port)
    if a.kind in ("timestep", "sinusoid input"):
        if x.shape != y.shape:
            return [_shape_cause(a, b, ref, cand)]
        return [_input_cause(a, b, ref, cand)]
    return embedding_stage_causes(a, b, ref, cand, ref_port, cand_port)


def _given(ref: TimePathTrace, cand: TimePathTrace) -> tuple[Stage, Stage] | None:
    """The two "timestep" stages, when they differ (same shape) and are worth naming."""
    a, b = ref.stages[0], cand.stages[0]
    if a.kind != "timestep" or b.kind != "timestep" or a.value.shape != b.value.shape:
        return None
    x, y = a.value.detach().double(), b.value.detach().double()
    return None if torch.equal(x, y) else (a, b)


def _shape_cause(a: Stage, b: Stage, ref: TimePathTrace, cand: TimePathTrace) -> str:
    sa, sb = tuple(a.value.shape), tuple(b.value.shape)
    na, nb = a.value.numel(), b.value.numel()
    if min(na, nb) and max(na, nb) % min(na, nb) == 0 and na != nb:
        many, one = ("reference", "candidate") if na > nb else ("candidate", "reference")
        tokens, samples = (ref, cand) if na > nb else (cand, ref)
        shape_many, shape_one = tuple(tokens.stages[0].value.shape), tuple(samples.stages[0].value.shape)
        return (
            f"per-token timesteps collapsed: the {many} embeds one {a.label} per token ({list(shape_many)}), "
            f"the {one} one per sample ({list(shape_one)}); per-token timesteps (Wan 2.2 TI2V's "
            "expand_timesteps, diffusion forcing) treated as one scalar"
        )
    return f"different shapes: the reference gives {sa}, the candidate {sb}"


def _input_cause(a: Stage, b: Stage, ref: TimePathTrace, cand: TimePathTrace) -> str:
    x, y = _phase(a), _phase(b)
    return (
        _relation(a, b, a)
        or _map_skipped(a, b, ref, cand)
        or (
            f"the {a.label} differs before the sinusoid: the reference feeds {describe_values(x)}, the candidate "
            f"{describe_values(y)} (no known map between them)"
        )
    )


def _relation(a: Stage, b: Stage, named: Stage) -> str | None:
    """The map between the two sides' values, in words (None: no known one)."""
    x, y = _phase(a), _phase(b)
    if x.shape != y.shape or not (x.isfinite().all() and y.isfinite().all()):
        return None
    for check in (_rounding, _truncation, _respaced):
        found = check(x, y, named)
        if found:
            return found
    how = relate(x, y)
    if how is not None and how.startswith("candidate = "):
        return _named(how, named, x, y)
    back = relate(y, x)
    if back is not None and back.startswith("candidate = ") and "rounded" not in back:
        return _named_reverse(back[len("candidate = ") :], named, x, y)
    return _shifted_again(x, y, named)


def _phase(stage: Stage) -> torch.Tensor:
    v = stage.phase if stage.kind == "sinusoid input" and stage.phase is not None else stage.value
    return v.detach().double().cpu()


def _named(how: str, a: Stage, x: torch.Tensor, y: torch.Tensor) -> str:
    """A map candidate = f(reference) found by [`relate`][timestep_embed.analysis.relation.relate], in words."""
    f = how[len("candidate = ") :]
    guidance = a.label == "guidance"
    if f.startswith("1000 x reference"):
        if guidance:
            return (
                f"guidance scaled by 1000 twice: the candidate feeds {describe_values(y)} where the reference feeds "
                f"{describe_values(x)} (the pipeline's guidance * 1000 on top of the model's own * 1000)"
            )
        return (
            f"scaled by 1000 twice: the candidate feeds 1000 x the reference's {describe_values(x)} "
            "(sigma * 1000 fed to a model that multiplies by 1000 itself, or t * 1000 where t is expected)"
        )
    if f.startswith("0.001 x reference"):
        if guidance:
            return (
                f"guidance not scaled by 1000: the candidate feeds {describe_values(y)} where the reference "
                f"feeds {describe_values(x)}"
            )
        return (
            f"t in [0, 1] where t * 1000 is expected: the candidate feeds {describe_values(y)} where the reference "
            f"feeds {describe_values(x)} (sigma for sigma * 1000; the sinusoid's frequencies then barely turn)"
        )
    if "- reference" in f and not f.startswith("reference"):
        return (
            f"reversed time: candidate = {f} (one side's t = 0 is data where the other's is noise: "
            "feed 1 - t, or 1000 - t, to the model that counts the other way)"
        )
    if f.startswith("ln(reference) / 4"):
        return (
            "ln(sigma) / 4 where sigma is expected: the candidate feeds EDM's c_noise = ln(sigma) / 4 of what the "
            f"reference feeds as it is ({describe_values(x)})"
        )
    if f.startswith("ln(reference)"):
        return f"a log taken twice or once too often: candidate = {f} (the reference feeds {describe_values(x)})"
    return f"the {a.label} is mapped differently before the sinusoid: candidate = {f}"


def _named_reverse(f: str, a: Stage, x: torch.Tensor, y: torch.Tensor) -> str:
    """A map reference = f(candidate), in words (the reverse direction of `_named`)."""
    if f.startswith("ln(reference) / 4"):
        return (
            f"sigma where ln(sigma) / 4 is expected: the candidate feeds sigma itself ({describe_values(y)}) where "
            "the reference feeds EDM's c_noise = ln(sigma) / 4 of it"
        )
    return f"the {a.label} is mapped differently before the sinusoid: reference = {f.replace('reference', 'candidate')}"


def _rounding(x: torch.Tensor, y: torch.Tensor, a: Stage) -> str | None:
    """One side's values are the other's rounded to bfloat16 / float16 (999.4 -> 1000)."""
    for name, dtype in _HALF.items():
        for rounded, kept, side, other in ((y, x, "candidate", "reference"), (x, y, "reference", "candidate")):
            if torch.equal(kept.to(dtype).double(), rounded) and not torch.equal(kept, rounded):
                lost = int(kept.unique().numel() - rounded.unique().numel())
                collide = f"; {lost} distinct values collide" if lost > 0 else ""
                return (
                    f"rounded to {name}: the {side} rounds the {a.label} to {name} before the sinusoid, the {other} "
                    f"keeps it ({describe_values(kept)} -> {describe_values(rounded)}{collide}); keep timesteps in "
                    "float32 (two engines disagree when only one of them computes in bfloat16)"
                )
    return None


def _truncation(x: torch.Tensor, y: torch.Tensor, a: Stage) -> str | None:
    """Fractional steps turned into integers on one side (an int64 cast truncates 998.9 to 998)."""
    for frac, whole, side in ((x, y, "candidate"), (y, x, "reference")):
        if bool((frac != frac.round()).any()) and bool((whole == whole.round()).all()):
            if torch.equal(whole, frac.trunc()):
                return (
                    f"fractional steps truncated to integers: the {side} feeds trunc(t) ({describe_values(frac)} -> "
                    f"{describe_values(whole)}): an int64 cast of fractional timesteps (Karras / DPM-Solver grids)"
                )
            if torch.equal(whole, frac.round()):
                return f"fractional steps rounded to integers: the {side} feeds round(t) of {describe_values(frac)}"
    return None


def _shifted_again(x: torch.Tensor, y: torch.Tensor, a: Stage) -> str | None:
    """The flow-matching shift sigma -> s sigma / (1 + (s - 1) sigma) applied once more on one side."""
    scale = 1000.0 if float(x.abs().max()) > 1.5 else 1.0
    for before, after, side in ((x, y, "candidate"), (y, x, "reference")):
        s0, s1 = before / scale, after / scale
        inside = (s0 > 1e-3) & (s0 < 1 - 1e-3) & (s1 > 1e-3) & (s1 < 1 - 1e-3)
        if int(inside.sum()) < 2:
            continue
        s = (s1 * (1 - s0) / (s0 * (1 - s1)))[inside]
        if float(s.min()) > 1.01 and float((s.max() - s.min()) / s.mean()) < 1e-4:
            return (
                f"shift applied twice: the {side}'s timesteps are the other's shifted once more (shift "
                f"{float(s.mean()):.4g}: sigma -> s sigma / (1 + (s - 1) sigma)); the scheduler shifts its sigmas twice"
            )
    return None


def _respaced(x: torch.Tensor, y: torch.Tensor, a: Stage) -> str | None:
    """An index into a respaced schedule (0..S-1) fed where the original step (0..T-1) is expected.

    Exactly 1000 x the other side is not a respacing (that would be T = 1000 S): it is left to
    [`relate`][timestep_embed.analysis.relation.relate], which names it scaled by 1000 twice."""
    for small, big, side in ((y, x, "candidate"), (x, y, "reference")):
        whole = bool((small == small.round()).all()) and bool((big == big.round()).all())
        if not whole or small.unique().numel() < 3 or float(small.max()) >= float(big.max()) / 2:
            continue
        if torch.equal(big, small * 1000):
            continue
        if torch.equal(torch.argsort(small.reshape(-1)), torch.argsort(big.reshape(-1))) and float(small.min()) >= 0:
            return (
                f"respaced index for the original step: the {side} feeds {describe_values(small)} where the other "
                f"feeds {describe_values(big)} in the same order: an index into a respaced schedule (improved-"
                "diffusion's _WrappedModel maps it back to the original step)"
            )
    return None


def _map_skipped(a: Stage, b: Stage, ref: TimePathTrace, cand: TimePathTrace) -> str | None:
    """One side feeds its timestep argument as it is, the other maps it first (sigma_to_t, c_noise ...)."""
    if a.kind != "sinusoid input":
        return None
    ta, tb = ref.stages[0].value.detach().double(), cand.stages[0].value.detach().double()
    xa, xb = _phase(a), _phase(b)
    as_is_a = ta.shape == xa.shape and torch.allclose(ta, xa, rtol=1e-6, atol=0)
    as_is_b = tb.shape == xb.shape and torch.allclose(tb, xb, rtol=1e-6, atol=0)
    if as_is_a == as_is_b:
        return None
    plain, mapped = ("candidate", "reference") if as_is_b else ("reference", "candidate")
    values, target = (xb, xa) if as_is_b else (xa, xb)
    return (
        f"a map skipped: the {plain} feeds its timestep argument as it is ({describe_values(values)}) where the "
        f"{mapped} maps it first (to {describe_values(target)}): e.g. sigma fed where the fractional step index "
        "t = sigma_to_t(sigma) is expected (k-diffusion's CompVisDenoiser)"
    )


def missing_cause(diff, ref: TimePathTrace, cand: TimePathTrace) -> list[str]:
    """A label (guidance, time ids ...) that only one side embeds and adds to the blocks' conditioning."""
    has, lacks = ("reference", "candidate") if diff.missing == "candidate" else ("candidate", "reference")
    trace = ref if has == "reference" else cand
    inputs = [s for s in trace.stages if s.label == diff.label and s.kind == "sinusoid input"]
    given = f" (its input reaches the sinusoid as {describe_values(_phase(inputs[0]))})" if inputs else ""
    return [
        f"{diff.label} path dropped: the {has} embeds its {diff.label} input{given} and adds it to the time "
        f"embedding; the {lacks} has no {diff.label} embedding (guidance_embeds=False, or the embedder's weights "
        "silently not loaded), so its blocks get the time embedding without it"
    ]


def _nonfinite_causes(a: Stage, x: torch.Tensor, y: torch.Tensor, ref_port, cand_port) -> list[str]:
    """Which side turns NaN or infinite at this stage, and the non-finite weights that explain it."""
    side, bad = ("candidate", y) if (~y.isfinite() & x.isfinite()).any() else ("reference", x)
    count, nans = int((~bad.isfinite()).sum()), int(bad.isnan().sum())
    what = f"{nans} NaN" + (f" and {count - nans} infinite" if count > nans else "")
    causes = [f"non-finite values: the {side} gives {what} of {bad.numel()} entries at the {a.kind} ({a.label})"]
    port = cand_port if side == "candidate" else ref_port
    if isinstance(port, torch.nn.Module):
        broken = [name for name, t in port.state_dict().items() if t.is_floating_point() and not t.isfinite().all()]
        if broken:
            causes.append(f"the {side}'s weights hold NaN or infinity: {', '.join(broken[:8])}")
    return causes
