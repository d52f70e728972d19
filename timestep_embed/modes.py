"""Where the package may read a tensor's values, and where it must not: the graph modes (tracing, compiling,
export, meta and fake tensors, torch.func's transforms, forward-mode duals), the host (an eager CPU tensor: reading
costs no sync), the switch that lets the value checks read accelerator tensors too, and what a cache may keep.
Each path of the core and the modules is chosen by these tests (docs/core.md).
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

__all__ = [
    "is_compiling", "graph_mode", "host_values", "VALUE_CHECKS", "set_value_checks", "value_checks", "reads_values",
    "cacheable",
]  # fmt: skip

# torch.compiler.is_compiling arrived in torch 2.3; torch 2.2 (the last release for Intel Macs) has the
# same function as torch._dynamo.is_compiling, which dynamo likewise answers with True while tracing.
# is_compiling(): True while torch.compile or torch.export traces (dynamo: no Python-side caches there).
if hasattr(torch.compiler, "is_compiling"):
    is_compiling = torch.compiler.is_compiling
else:  # pragma: no cover - torch < 2.3
    import torch._dynamo

    is_compiling = torch._dynamo.is_compiling

# torch.func's transforms (vmap, grad, jvp) hand a function wrapped tensors: a batched one has no values to read, and
# the reuse paths would drop a tangent. torch.func.debug_unwrap (torch >= 2.3) returns its argument itself unless it
# is such a wrapper; torch 2.2 has no public test (there, vmap over the core fails at a value read).
_unwrap = getattr(torch.func, "debug_unwrap", None)


def graph_mode(t: torch.Tensor) -> bool:
    """True where the values of ``t`` cannot or must not be read: under ``torch.jit.trace``,
    ``torch.compile`` or ``torch.export``, for meta tensors, for tensor subclasses that intercept
    dispatch (fake and functional tensors), inside ``torch.func``'s transforms (``vmap``, ``grad``, ``jvp``,
    ``jacfwd``: wrapped tensors) and for forward-mode duals (``torch.autograd.forward_ad``): the reuse of repeated
    values would embed a batched tensor's one slice, or give every row one row's tangent. ``nn.Parameter`` and other
    plain subclasses hold real values."""
    return (
        torch.jit.is_tracing()
        or is_compiling()
        or t.is_meta
        or type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__
        or (_unwrap is not None and _unwrap(t, recurse=False) is not t)
        or forward_ad.unpack_dual(t).tangent is not None
    )


def host_values(t: torch.Tensor) -> bool:
    """True for an eager CPU tensor: its values can be read with no host sync, so the paths that read them
    (value checks, reuse of repeated timesteps, the integer-step cache) are chosen for it. A tensor on an
    accelerator (CUDA, MPS, ...) takes diffusers' operations only: no reads, no data-dependent launches."""
    return t.is_cpu and not graph_mode(t)


# What the value checks read: "host" (values already on the host: Python numbers, lists, numpy, CPU tensors) or
# "all" (also tensors on an accelerator, one host read a call: for debugging a model on a GPU).
VALUE_CHECKS = ("host", "all")
_value_checks = ["host"]


def set_value_checks(mode: str) -> str:
    """Which timesteps the eager value checks read: ``"host"`` (default: Python numbers, lists, numpy arrays,
    CPU tensors, where reading costs no sync) or ``"all"`` (accelerator tensors too: NaN, overflow and rounded
    half-precision timesteps on a GPU get the same named errors and warnings, at one host sync per call).
    Returns the previous mode."""
    if mode not in VALUE_CHECKS:
        raise ValueError(f"set_value_checks: mode must be one of {list(VALUE_CHECKS)}, got {mode!r}")
    previous, _value_checks[0] = _value_checks[0], mode
    return previous


def value_checks() -> str:
    """The mode `set_value_checks` set: ``"host"`` or ``"all"``."""
    return _value_checks[0]


def reads_values(t: torch.Tensor) -> bool:
    """Whether the eager guards read the values of ``t``: on the host always (outside graph mode), on an
    accelerator only after ``set_value_checks("all")``."""
    return not graph_mode(t) and (t.is_cpu or _value_checks[0] == "all")


def cacheable(t: torch.Tensor) -> bool:
    """Whether a cache may keep ``t``: a real tensor that works in every later mode, not an inference
    tensor (autograd cannot save those), not a fake or functional one, without autograd history, not made while a
    CUDA graph is captured (its values exist only once the graph is replayed).
    Caches build their entries under ``torch.inference_mode(False)`` and keep them only when this holds."""
    capturing = t.is_cuda and torch.cuda.is_current_stream_capturing()
    return not (t.is_inference() or t.requires_grad or graph_mode(t) or capturing)
