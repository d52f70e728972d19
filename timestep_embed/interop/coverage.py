"""How much of the installed diffusers' model zoo the interop covers, measured class by class.

`time_classes` walks diffusers' model classes (every ``ModelMixin`` it exports) and keeps those
whose ``forward`` takes a timestep or noise level. `check_class` builds the class's tiny
random-weight model (`timestep_embed.interop.tiny`) and runs four checks, each ``"ok"`` or the
precise reason it fails:

* **contract**: [`contract_for`][timestep_embed.interop.contract_for] names the family, and what the model's own
  sinusoid receives is what the contract computes from the pipeline's timestep (no ``contract:`` or ``convention:``
  flag);
* **patch**: [`patch_diffusers_model`][timestep_embed.interop.patch_diffusers_model] keeps the output bit for bit (and
  the state-dict keys) in float32, and in bfloat16 and float16 where the model runs in them, patched before or after
  the cast;
* **trace**: [`trace_time_path`][timestep_embed.interop.trace_time_path] records the sinusoid's input, the sinusoid and
  the time MLP;
* **from_state_dict**: [`TimestepEmbedder.from_state_dict`][timestep_embed.nn.embedder.TimestepEmbedder.from_state_dict]
  on the model's full state dict gives the model's own time MLP output (``torch.equal``) for the pipeline's timestep.

Only public API is used, so the same checks measure any version of the package.
``python scripts/diffusers_coverage.py`` prints the table.
"""

from __future__ import annotations

import copy
import inspect
import tempfile
from dataclasses import dataclass

import torch

from ..nn import TimestepEmbedder
from .contracts import contract_for
from .coverage_reasons import LIMITS, NOT_BUILT
from .patch import convention_from_unet_config, patch_diffusers_model, require_diffusers
from .tiny import BY_CLASS, TINY, build, run
from .trace import trace_time_path

__all__ = ["CoverageRow", "time_classes", "check_class", "coverage", "coverage_table", "NOT_BUILT"]

TIME_ARGUMENTS = ("timestep", "timesteps", "t", "timestep_ratio", "decoder_noise_time", "noise_level", "sigma")
CHECKS = ("contract", "patch", "trace", "from_state_dict")


@dataclass
class CoverageRow:
    """One class: its time arguments and each check's result (``"ok"`` or the reason it is not)."""

    name: str
    arguments: tuple[str, ...]
    results: dict[str, str]

    @property
    def covered(self) -> bool:
        return all(self.results.get(c, "").startswith("ok") for c in CHECKS)


def time_classes() -> dict[str, tuple[str, ...]]:
    """``{class name: its forward's time arguments}`` for every diffusers model class that has one."""
    diffusers = require_diffusers()
    mixin = diffusers.ModelMixin
    found = {}
    for name in sorted(dir(diffusers)):
        try:
            cls = getattr(diffusers, name)
        except Exception:  # a lazy import whose optional dependency is missing
            continue
        if not (inspect.isclass(cls) and issubclass(cls, mixin) and cls is not mixin):
            continue
        forward = cls.forward  # type: ignore[attr-defined]
        params = list(inspect.signature(forward).parameters)[1:]
        args = tuple(p for p in params if p in TIME_ARGUMENTS or p.endswith(("_timestep", "_timesteps")))
        if args:
            found[name] = args
    return found


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def _contract(model, trace) -> str:
    contract = contract_for(model)
    if contract is None:
        return f"no contract for {type(model).__name__} with this config"
    if not any(s.kind == "sinusoid input" for s in trace.stages):
        return "the trace records no sinusoid input to check the contract against"
    bad = [f for f in trace.flags if f.startswith(("contract:", "convention:"))]
    return f"{contract.name}: {bad[0]}" if bad else "ok"


def _trace(trace) -> str:
    kinds = {s.kind for s in trace.stages}
    missing = [k for k in ("sinusoid input", "sinusoid", "time embedding") if k not in kinds]
    return "ok" if not missing else f"records no {', '.join(missing)} (its time modules are not diffusers' or ours)"


def _patch(name: str, model, inputs, t, arg: str) -> str:
    before = run(model, inputs, t, arg)
    patched = copy.deepcopy(model)
    keys = set(patched.state_dict())
    try:
        patch_diffusers_model(patched)
    except (TypeError, ValueError) as exc:
        return _first_line(exc)
    if set(patched.state_dict()) != keys:
        return "patching changed the state-dict keys"
    after = run(patched, inputs, t, arg)
    if not torch.equal(before, after):
        return f"outputs differ after patching: max |d| {float((before - after).abs().max()):.3g}"
    return _patch_in_low_precision(model, inputs, t, arg)


def _patch_in_low_precision(model, inputs, t, arg: str) -> str:
    """bfloat16 and float16, cast then patched and patched then cast, against the unpatched model cast to that
    dtype (each dtype the model runs in on this device; CPU kernels lack some float16 operations). Bit for bit, a NaN
    where the unpatched model makes one (a tiny random model can overflow float16) included."""
    ran, skipped = [], []
    for dtype in (torch.bfloat16, torch.float16):
        cast, name = _cast(inputs, dtype), str(dtype).removeprefix("torch.")
        try:
            reference = run(copy.deepcopy(model).to(dtype), cast, t, arg)
        except (RuntimeError, NotImplementedError) as exc:  # the unpatched model does not run in this dtype here
            skipped.append(f"{name}: {_first_line(exc)[:80]}")
            continue
        for order in ("cast then patch", "patch then cast"):
            twin = copy.deepcopy(model)
            twin = (
                patch_diffusers_model(twin.to(dtype))
                if order == "cast then patch"
                else patch_diffusers_model(twin).to(dtype)
            )
            out = run(twin, cast, t, arg)
            if out.shape != reference.shape or not ((out == reference) | (out.isnan() & reference.isnan())).all():
                diff = float((out.float() - reference.float()).abs().max())
                return f"{name} outputs differ after patching ({order}): max |d| {diff:.3g}"
        ran.append(name)
    also = f"also {' and '.join(ran)}, in both orders" if ran else ""
    unpatched = f"the unpatched model does not run in {'; '.join(skipped)}" if skipped else ""
    return "ok" + (f" ({'; '.join(x for x in (also, unpatched) if x)})" if ran or skipped else "")


def _cast(value, dtype: torch.dtype):
    """``value`` with every floating tensor in it (in dicts, lists and tuples too) cast to ``dtype``."""
    if torch.is_tensor(value):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _main_mlp(model, embedder: TimestepEmbedder) -> str | None:
    """The module path of the model's MLP whose weights the embedder loaded."""
    w = embedder.time_embedding.linear_1.weight
    for path, module in model.named_modules():
        lin = getattr(module, "linear_1", None)
        if isinstance(module, torch.nn.Sequential) and len(module):  # DiT-style: mlp.0 / mlp.2
            lin = module[0]
        if isinstance(lin, torch.nn.Linear) and lin.weight.shape == w.shape and torch.equal(lin.weight, w):
            return path
    return None


def _loaded(load, model, inputs, t, arg: str) -> str:
    """``"ok"`` when the embedder ``load()`` returns gives the model's own time MLP output, else why not."""
    try:
        embedder = load()
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return _first_line(exc)
    path = _main_mlp(model, embedder)
    if path is None:
        return "the loaded MLP is none of the model's time MLPs"
    seen: list[torch.Tensor] = []
    handle = model.get_submodule(path).register_forward_hook(lambda m, a, out: seen.append(out.detach()))
    try:
        run(model, inputs, t, arg)
    finally:
        handle.remove()
    with torch.no_grad():
        ours = embedder(t)
    # the call that carries the given timesteps (Helios embeds a zero history timestep first); per-token
    # timesteps reach the MLP flattened
    seen = [s for s in seen if s.numel() == ours.numel()] or seen
    if seen and ours.shape != seen[0].shape and ours.numel() == seen[0].numel():
        ours = ours.reshape(seen[0].shape)
    if not seen or ours.shape != seen[0].shape:
        return (
            f"the model's {path} gives {tuple(seen[0].shape) if seen else 'nothing'}, the embedder {tuple(ours.shape)}"
        )
    return (
        "ok"
        if torch.equal(ours, seen[0])
        else f"differs from {path}: max |d| {float((ours - seen[0]).abs().max()):.3g}"
    )


def _from_state_dict(model, inputs, t, arg: str) -> str:
    """The weights alone (a UNet's sinusoid from its config); else the folder diffusers writes, whose
    config.json says what the weights do not."""
    state = model.state_dict()

    def from_weights():
        try:
            return TimestepEmbedder.from_state_dict(state)
        except ValueError as exc:
            if "does not say which sinusoid" not in str(exc):
                raise
            return TimestepEmbedder.from_state_dict(state, convention=convention_from_unet_config(model.config))

    alone = _loaded(from_weights, model, inputs, t, arg)
    if alone == "ok":
        return alone
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        folder = _loaded(lambda: TimestepEmbedder.from_pretrained(tmp), model, inputs, t, arg)
    return f"ok from its folder (the weights alone: {alone})" if folder == "ok" else alone


def check_class(name: str, arguments: tuple[str, ...] = ()) -> CoverageRow:
    """The four checks on the tiny model of diffusers class ``name``."""
    if name not in BY_CLASS:
        reason = NOT_BUILT.get(name, "no tiny configuration in timestep_embed.interop.tiny")
        return CoverageRow(name, arguments, dict.fromkeys(CHECKS, reason))
    spec = TINY[BY_CLASS[name]]
    limits = LIMITS.get(name, {})
    try:
        model, inputs, t = build(BY_CLASS[name])
        run(model, inputs, t, spec.timestep_arg)
    except Exception as exc:  # a config that no longer builds with this diffusers version
        failed = f"the tiny model does not run: {_first_line(exc)}"
        return CoverageRow(name, arguments, {c: limits.get(c, failed) for c in CHECKS})
    trace = trace_time_path(model, t, inputs, timestep_arg=spec.timestep_arg)
    results = {
        "contract": _contract(model, trace),
        "patch": _patch(name, model, inputs, t, spec.timestep_arg),
        "trace": _trace(trace),
        "from_state_dict": _from_state_dict(model, inputs, t, spec.timestep_arg),
    }
    for check, reason in limits.items():  # the known cause in place of the symptom (none where the check passes)
        if not results[check].startswith("ok"):
            results[check] = reason
    return CoverageRow(name, arguments, results)


def coverage(names=None) -> list[CoverageRow]:
    """`check_class` for every class of `time_classes` (or those of ``names``)."""
    found = time_classes()
    return [check_class(n, found[n]) for n in found if names is None or n in names]


def coverage_table(rows: list[CoverageRow]) -> str:
    """Markdown: covered / found, then one row per class (ok, or the reason)."""
    covered = sum(r.covered for r in rows)
    per_check = {c: sum(r.results.get(c, "").startswith("ok") for r in rows) for c in CHECKS}
    head = [
        f"{covered} / {len(rows)} diffusers model classes with a time argument covered on all four checks "
        f"(contract {per_check['contract']}, patch {per_check['patch']}, trace {per_check['trace']}, "
        f"from_state_dict {per_check['from_state_dict']}).",
        "",
        "| class | time argument | contract | patch | trace | from_state_dict |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.results[c] for c in CHECKS]
        head.append(f"| {r.name} | {', '.join(r.arguments)} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(head) + "\n"
