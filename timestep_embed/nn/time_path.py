"""Find the time path in a real checkpoint: which layout, under which prefix, which MLPs; strict loading.

No diffusers import: the layouts ([`timestep_embed.families`][timestep_embed.families]) are plain strings. Our names
are diffusers' names (``time_embedding.linear_1.weight`` ...), so a diffusers UNet's time path needs
no renaming.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from ..families import KNOWN_PREFIXES, LAYOUTS, Layout, MLPKeys, one_model

M = TypeVar("M", bound=nn.Module)

__all__ = [
    "LAYOUTS",
    "TimePath",
    "LayoutMatch",
    "load_state_dict_checked",
    "build_to_fit",
    "find_time_paths",
    "embedder_state_dict",
    "to_layout",
]

_OURS = ("time_embedding.linear_1.", "time_embedding.linear_2.")
_COND = "time_embedding.cond_proj."


def _describe(state: Mapping[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {list(v.shape)}" for k, v in state.items()) or "(no tensors)"


def load_state_dict_checked(module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str) -> None:
    """``module.load_state_dict(state_dict, strict=True)`` with an error that names the problem.

    Raises:
        ValueError: listing missing keys, unexpected keys, shape mismatches and the expected
            layout (every key of ``module.state_dict()`` with its shape).
    """
    _check_fits(module, state_dict, what)
    module.load_state_dict(state_dict, strict=True)


def build_to_fit(build: Callable[[], M], state_dict: Mapping[str, torch.Tensor], what: str) -> M:
    """``build()`` loaded with ``state_dict``, the names and shapes checked first on a build on the meta device,
    which allocates nothing: a config edited to ask for a huge module gets the ValueError of
    [`load_state_dict_checked`][timestep_embed.nn.load_state_dict_checked], not a MemoryError."""
    with torch.device("meta"):
        probe = build()
    _check_fits(probe, state_dict, what)
    module = build()
    module.load_state_dict(state_dict, strict=True)
    return module


def _check_fits(module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str) -> None:
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = [
        f"{k}: expected {list(expected[k].shape)}, got {list(state_dict[k].shape)}"
        for k in expected
        if k in state_dict and expected[k].shape != state_dict[k].shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{what}: the state dict does not fit. missing keys: {missing}; unexpected keys: "
            f"{unexpected}; shape mismatches: {shapes or 'none'}. Expected layout: {_describe(expected)}"
        )


@dataclass(frozen=True)
class TimePath:
    """One MLP found in a checkpoint: ``label`` (``"timestep"``, ``"guidance"``, ``"timestep[3]"`` for
    block 3's copy ...), the checkpoint keys of its two Linear layers (without ``.weight``), its
    widths ``(in, hidden, out)`` and what it is fed (``"sinusoid"``: a time path)."""

    label: str
    linears: tuple[str, ...]
    widths: tuple[int, ...]
    fed: str

    def describe(self) -> str:
        where = self.linears[0].rpartition(".")[0] if len(self.linears) > 1 else self.linears[0]
        widths = " -> ".join(map(str, self.widths))
        what = "" if self.fed == "sinusoid" else f", fed {self.fed}: not a time path"
        return f"{self.label} ({where}: {widths}{what})"


@dataclass(frozen=True)
class LayoutMatch:
    """A layout found in a state dict: the layout, the prefix its keys sit under, and its MLPs
    (``paths[0]`` is the model's main time path)."""

    layout: Layout
    prefix: str
    paths: tuple[TimePath, ...]

    def path(self, label: str = "timestep") -> TimePath:
        for p in self.paths:
            if p.label == label:
                return p
        raise ValueError(
            f"this {self.layout.name} checkpoint has no {label!r} MLP; it has {[p.label for p in self.paths]}"
        )

    def describe(self) -> str:
        family = f", family {self.layout.family}" if self.layout.family else ""
        return f"{self.layout.name} layout{family} under prefix {self.prefix!r}"


def _indices(mlp: MLPKeys, keys: Mapping, prefix: str) -> list:
    """The block indices of an MLP's copies (``[None]`` when its prefix has no ``{i}``; [] when absent)."""
    if "{i}" not in mlp.prefix:
        return [None] if prefix + mlp.key() in keys else []
    head, _, tail = mlp.prefix.partition("{i}")
    tail += mlp.names[0] + ".weight" if mlp.names else ""
    pattern = re.compile(re.escape(prefix + head) + r"(\d+)" + re.escape(tail))
    found = {int(m.group(1)) for k in keys if k.startswith(prefix + head) and (m := pattern.fullmatch(k))}
    return [*sorted(found)]


def _paths(layout: Layout, state_dict: Mapping[str, torch.Tensor], prefix: str) -> list[TimePath]:
    paths = []
    for mlp in layout.mlps:
        for n, i in enumerate(_indices(mlp, state_dict, prefix)):
            label = mlp.label if n == 0 else f"{mlp.label}[{i}]"
            if not mlp.names:
                key = prefix + mlp.key(i)
                paths.append(TimePath(label, (key,), tuple(state_dict[key].shape), mlp.fed))
                continue
            linears = tuple(prefix + mlp.key(i, w)[: -len(".weight")] for w in range(len(mlp.names)))
            w1, w2 = (state_dict.get(f"{lin}.weight") for lin in linears)
            for lin, w in zip(linears, (w1, w2), strict=True):
                if w is not None and mlp.fed == "sinusoid":  # a time path's widths build an embedder
                    _check_shape(f"{lin}.weight", w, linear_weight=True)
                    bias = state_dict.get(f"{lin}.bias")
                    if bias is not None and tuple(bias.shape) != tuple(w.shape[:1]):
                        raise ValueError(f"{lin}.bias {tuple(bias.shape)} does not fit {lin}.weight {tuple(w.shape)}")
            widths: tuple[int, ...] = ()
            if w1 is not None and w2 is not None and w1.dim() == w2.dim() == 2:
                widths = (w1.shape[1], w1.shape[0], w2.shape[0])
                if w2.shape[1] != w1.shape[0] or 0 in widths:
                    raise ValueError(f"{linears[0]}.weight {tuple(w1.shape)} and {linears[1]}.weight "
                                     f"{tuple(w2.shape)} are not one MLP's [hidden, in] and [out, hidden]")  # fmt: skip
            paths.append(TimePath(label, linears, widths, mlp.fed))
    return paths


def check_state_dict(state_dict, name: str = "state_dict") -> None:
    """Raise TypeError unless ``state_dict`` maps string keys to tensors (naming the first bad entry)."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{name} must be a mapping of names to tensors, got {type(state_dict).__name__}")
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            nested = f": a whole checkpoint? pass its {name}[{key!r}]" if isinstance(value, Mapping) else ""
            raise TypeError(f"{name}[{key!r}] must be a tensor under a string key, got {type(value).__name__}{nested}")


def find_time_paths(
    state_dict: Mapping[str, torch.Tensor],
    *,
    family: str | None = None,
    layout: str = "auto",
    prefix: str | None = None,
) -> LayoutMatch:
    """The layout of a whole-model state dict and every MLP of it that was found.

    Tries each layout of `LAYOUTS` under each of the
    `timestep_embed.families.KNOWN_PREFIXES` (or ``prefix``): its main MLP's weights must be
    there, its markers too, its absent keys not. A layout named by ``layout=`` needs its time path's
    keys only: the markers of the rest of the network decide automatic detection. Of the layouts
    that fit, the one with the most markers wins (Stable Diffusion's keys are guided-diffusion's
    plus cross-attention).

    Args:
        family: keep the layouts of this contract family (``"flux_dev"``, ``"stable_diffusion"`` ...);
            the only way to pick a layout whose keys are a generic one's (a diffusers UNet's).
        layout: ``"auto"`` or a name in ``LAYOUTS``.
        prefix: what the network's keys start with; None tries the known ones.

    Raises:
        ValueError: nothing fits (listing the layouts tried and the keys that came closest), or
            several layouts fit equally well (listing them: pass ``family=`` or ``layout=``).
    """
    check_state_dict(state_dict)
    if layout != "auto" and layout not in LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {sorted(LAYOUTS)}, got {layout!r}")
    families = {lay.family for lay in LAYOUTS.values() if lay.family is not None}
    if family is not None and family not in families:
        raise ValueError(f"family must be None or one of {sorted(families)}, got {family!r}")
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string or None, got {prefix!r}")
    candidates = [LAYOUTS[layout]] if layout != "auto" else list(LAYOUTS.values())
    if family is not None:
        candidates = [lay for lay in candidates if lay.family == family]
    elif layout == "auto":
        candidates = [lay for lay in candidates if lay.auto]
    keys = list(state_dict)
    prefixes = KNOWN_PREFIXES if prefix is None else (prefix,)
    found = [(lay, p) for lay in candidates for p in prefixes if all(p + k in state_dict for k in lay.required_keys())]
    full = [(lay, p) for lay, p in found if lay.fits(keys, p)]
    # markers decide detection; a named layout needs only its time path (a porter's t_embedder saved alone)
    found = full if full or layout == "auto" else found
    if not found:
        message = _nothing_fits(keys, candidates, prefixes)
        if family is not None or layout != "auto":  # what the keys are, when they are another family's
            try:
                other = find_time_paths(state_dict, prefix=prefix)
            except ValueError:
                pass
            else:
                message += f"; the keys are {other.layout.name}'s (family {other.layout.family})"
        raise ValueError(message)
    _refuse_two_models(found)
    best = max(len(lay.markers) for lay, _ in found)
    found = [(lay, p) for lay, p in found if len(lay.markers) == best]
    if len(found) > 1:
        names = [f"{lay.name} (prefix {p!r})" for lay, p in found]
        raise ValueError(f"several layouts fit this state dict equally well: {names}; pass family= or layout=")
    lay, p = found[0]
    return LayoutMatch(lay, p, tuple(_paths(lay, state_dict, p)))


def _refuse_two_models(found: list[tuple[Layout, str]]) -> None:
    """ValueError when the layouts that fit are of two models (neither extends the other): a state dict that
    merges two checkpoints, whose time path only the caller can choose."""
    for i, (a, pa) in enumerate(found):
        for b, pb in found[i + 1 :]:
            if not one_model(a, b):
                raise ValueError(
                    f"this state dict holds the time paths of two models: {a.name} (prefix {pa!r}) and {b.name} "
                    f"(prefix {pb!r}); pass layout= or family= to load one"
                )


def _nothing_fits(keys: list[str], layouts: list[Layout], prefixes: tuple[str, ...]) -> str:
    names = sorted(lay.name for lay in layouts)
    everyone = f"the {len(names)} layouts found without a name (of the {len(LAYOUTS)} in families.LAYOUTS)"
    tried = f"the layouts {names}" if len(names) <= 8 else everyone
    where = f"no time path in this state dict: tried {tried} under the prefixes {list(prefixes)}"
    # A layout whose keys are all there under another prefix (a DDP "module.", an "ema." copy): say which prefix.
    present: set[str] = set(keys)
    under: dict[str, list[str]] = {}
    for lay in layouts:
        first, *rest = lay.required_keys()
        for key in keys:
            head = key[: -len(first)]
            if key.endswith(first) and head not in prefixes and all(head + k in present for k in rest):
                under.setdefault(head, []).append(lay.name)
    if under:
        head, fits = min(under.items(), key=lambda item: len(item[0]))
        return (
            f"{where}; under the prefix {head!r} the keys of {sorted(fits)} are there: pass prefix={head!r} "
            f"(inspect --prefix {shlex.quote(head)})"
        )
    probes: dict[str, str] = {lay.mlps[0].key(): lay.name for lay in layouts}
    # difflib compares each key with each probe: only keys sharing a name with a probe, a bounded number of them
    words = {w for probe in probes for w in probe.split(".") if not w.isdigit()} - {"weight", "bias"}
    near = [k for k in keys if not words.isdisjoint(k.split("."))][:2000]
    scored = []
    for probe in probes:
        for key in difflib.get_close_matches(probe, near, n=2, cutoff=0.6):
            scored.append((difflib.SequenceMatcher(None, probe, key).ratio(), key, probe))
    closest = [f"{key} (like {probes[probe]}'s {probe})" for _, key, probe in sorted(scored, reverse=True)[:4]]
    hint = f"; the closest keys: {', '.join(closest)}" if closest else f"; its first keys: {keys[:4]}"
    return f"{where} (pass prefix= for another; inspect --prefix){hint}"


def embedder_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    layout: str = "auto",
    prefix: str | None = None,
    *,
    family: str | None = None,
    which: str = "timestep",
) -> dict[str, torch.Tensor]:
    """One time path of a whole-model checkpoint, renamed for [`TimestepEmbedder`][timestep_embed.TimestepEmbedder].

    Returns ``{"time_embedding.linear_1.weight": ..., ...}``, with ``time_proj.weight`` where the
    layout has Fourier features (a ``[n, 1]`` weight flattened to ``[n]``), ready for
    ``TimestepEmbedder.load_state_dict``; ``which`` picks the MLP (see
    [`find_time_paths`][timestep_embed.nn.find_time_paths]).
    """
    match = find_time_paths(state_dict, family=family, layout=layout, prefix=prefix)
    return match_state_dict(state_dict, match, which)


def match_state_dict(state_dict: Mapping[str, torch.Tensor], match: LayoutMatch, which: str = "timestep"):
    """The tensors of the MLP ``which`` of ``match`` (and its Fourier weight), under our names: real floating
    weights with values (not meta), a Linear's weight 2-D and its bias 1-D."""
    path = match.path(which)
    if path.fed != "sinusoid" or len(path.linears) != 2:
        raise ValueError(f"the {path.describe()} is not a time path; the time paths: {_time_labels(match)}")
    out = {}
    for ours, theirs in zip(_OURS, path.linears, strict=True):
        for key, value in state_dict.items():
            if key.startswith(theirs + "."):
                out[ours + key[len(theirs) + 1 :]] = _checked_weight(key, value, key.endswith(".weight"))
    biases = [ours + "bias" in out for ours in _OURS]
    if biases[0] != biases[1]:  # one MLP has a bias in both Linears or in neither: name the checkpoint's missing key
        raise ValueError(
            f"state_dict has {path.linears[biases.index(True)]}.bias but not {path.linears[biases.index(False)]}.bias: "
            f"the {path.describe()} needs a bias in both Linears or in neither"
        )
    cond = _cond_key(path.linears[0] + ".")
    if cond and cond + "weight" in state_dict:  # an LCM UNet's condition projection (time_cond_proj_dim)
        out[_COND + "weight"] = _checked_weight(cond + "weight", state_dict[cond + "weight"], True)
    if match.layout.fourier is not None:
        out["time_proj.weight"] = state_dict[match.prefix + match.layout.fourier[0]]  # k-diffusion's [n, 1] too
    elif match.prefix + "time_proj.weight" in state_dict and match.layout.name in ("diffusers", "unet1d"):
        out["time_proj.weight"] = state_dict[match.prefix + "time_proj.weight"]  # a diffusers Fourier UNet
    return out


def _cond_key(first_linear: str) -> str | None:
    """Where diffusers' ``TimestepEmbedding`` keeps ``cond_proj``: beside its ``linear_1.``; None in other layouts."""
    return first_linear[: -len("linear_1.")] + "cond_proj." if first_linear.endswith("linear_1.") else None


def _check_shape(key: str, value: torch.Tensor, linear_weight: bool) -> None:
    if value.dim() != (2 if linear_weight else 1):
        kind = "a Linear's weight [out, in]" if linear_weight else "a bias [out]"
        raise ValueError(f"state_dict[{key!r}] must be {kind}, got shape {tuple(value.shape)}")


def _checked_weight(key: str, value: torch.Tensor, linear_weight: bool) -> torch.Tensor:
    """``value`` when it can be a Linear's weight (2-D) or bias (1-D) of a time MLP, else a named error."""
    if not value.dtype.is_floating_point:
        raise TypeError(f"state_dict[{key!r}] must hold real floating weights, got dtype {value.dtype}")
    if value.is_meta:
        raise ValueError(f"state_dict[{key!r}] is a meta tensor, which holds no weights: load the checkpoint's values")
    _check_shape(key, value, linear_weight)
    return value


def _time_labels(match: LayoutMatch) -> list[str]:
    return [p.label for p in match.paths if p.fed == "sinusoid"]


def to_layout(state_dict: Mapping[str, torch.Tensor], layout: str, prefix: str = "") -> dict[str, torch.Tensor]:
    """The reverse of [`embedder_state_dict`][timestep_embed.nn.embedder_state_dict]: our embedder's keys renamed into
    ``layout`` (its main MLP; block 0's copy for per-block layouts; the Fourier weight under the layout's key)."""
    check_state_dict(state_dict)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {type(prefix).__name__}")
    lay = LAYOUTS[layout]
    theirs = [lay.mlps[0].key(0, w)[: -len("weight")] for w in range(2)]
    pairs, cond = list(zip(_OURS, theirs, strict=True)), _cond_key(theirs[0])
    if cond is not None:
        pairs.append((_COND, cond))
    elif _COND + "weight" in state_dict:
        raise ValueError(f"the {layout} layout has no key for the condition projection {_COND}weight (diffusers' has)")
    out = {}
    for key, value in state_dict.items():
        for ours, their in pairs:
            if key.startswith(ours):
                out[prefix + their + key[len(ours) :]] = value
        if key == "time_proj.weight":  # k-diffusion keeps FourierFeatures' weight as [n, in_features = 1]
            out[prefix + (lay.fourier[0] if lay.fourier else "time_proj.weight")] = (
                value.reshape(-1, 1) if lay.fourier_column else value
            )
    return out
