"""Argument checks shared by every room of the package.

Each one raises before torch, numpy or Python would, with a TypeError (wrong kind of value) or a
ValueError (wrong value) whose message names the argument, the value and what is accepted.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Collection
from functools import lru_cache

import numpy as np
import torch

__all__ = [
    "check_int",
    "check_real",
    "check_bool",
    "check_choice",
    "check_float_dtype",
    "check_device",
    "check_tensor",
    "check_dense",
    "check_path",
    "real_array",
    "format_bytes",
    "memory_size",
    "check_size",
    "check_memory",
]


def _show(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def check_int(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (bools, floats and strings are refused)."""
    if type(value) is int and value >= minimum:  # the common case, without the ABC checks below
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {_show(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def check_real(value, name: str, *, positive: bool = False, minimum: float | None = None) -> float:
    """``value`` as a finite float (> 0 with ``positive``, >= ``minimum``); bools and strings are refused."""
    if type(value) is not float and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
        raise TypeError(f"{name} must be a real number, got {_show(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    return value


def check_bool(value, name: str) -> bool:
    """``value`` as a bool: True, False (or a numpy bool); a string such as ``"no"`` is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_show(value)}")
    return bool(value)


def check_choice(value, name: str, choices: Collection):
    """``value`` when it is one of ``choices`` (unhashable values are refused with the same message)."""
    try:
        known = value in choices
    except TypeError:  # a list is not hashable: not a choice either
        known = False
    if not known:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_float_dtype(dtype, name: str = "dtype") -> torch.dtype:
    """A floating ``torch.dtype`` (float16, bfloat16, float32, float64)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")
    return dtype


def check_device(device, name: str = "device") -> torch.device | None:
    """None, or a ``torch.device`` this process can allocate on (``"cpu"``, ``"cuda:0"``, ``"meta"``...)."""
    if device is None:
        return None
    if isinstance(device, (bool, np.bool_)) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(
            f"{name} must be a torch.device, a string such as 'cpu' or 'cuda:0', or None, got {_show(device)}"
        )
    try:
        device = torch.device(device)
        torch.empty(0, device=device)  # an empty allocation: the one test every backend answers
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise ValueError(f"{name}={str(device)!r} is not a device torch can use here: {exc}") from None
    return device


def check_tensor(
    x, name: str, *, device: torch.device | None = None, width: int | None = None, width_name: str = ""
) -> torch.Tensor:
    """``x`` as a floating tensor (on ``device``, with ``x.shape[-1] == width`` when given)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a floating torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor (float16/bfloat16/float32/float64), got dtype {x.dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} is on {x.device} but the module's weights are on {device}: move one of them")
    if width is not None and (x.dim() == 0 or x.shape[-1] != width):
        raise ValueError(f"{name} must be [..., {width}] ({width_name} = {width}), got shape {tuple(x.shape)}")
    return x


def check_dense(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t`` when it is a dense (strided) tensor; sparse and other layouts are refused by name."""
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout {t.layout}: call .to_dense() first")
    return t


def check_path(value, name: str) -> str | os.PathLike:
    """``value`` when it is a path (``str`` or ``os.PathLike``), else a TypeError naming ``name``."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {_show(value)}")
    return value


def real_array(values, name: str) -> np.ndarray:
    """``values`` (tensor, array, number or nested list of numbers) as a numpy array of integers or floats.

    Refuses bool, complex, strings, ragged lists and other objects: numpy would turn them into
    0/1, drop the imaginary part, or fail with its own words.
    """
    if isinstance(values, torch.Tensor):
        check_dense(values, name)
        if values.dtype == torch.bool or values.dtype.is_complex:
            raise TypeError(f"{name} must hold int or float numbers, got a tensor of dtype {values.dtype}")
        if values.is_meta:
            raise ValueError(f"{name} is a meta tensor, which holds no values")
        values = values.detach().cpu()
        return (values.float() if values.dtype == torch.bfloat16 else values).numpy()  # numpy has no bfloat16
    if isinstance(values, (str, bytes, bool, np.bool_)):
        kind = "a bool" if isinstance(values, (bool, np.bool_)) else "a string"
        raise TypeError(f"{name} must be int or float numbers, got {kind}: {values!r}")
    try:
        array = np.asarray(values)
    except ValueError:  # a ragged nested list
        raise ValueError(f"{name} must be a number, an array or a rectangular nested list, got {values!r}") from None
    if array.dtype.kind not in "iuf":
        shown = f"an array of shape {array.shape}" if isinstance(values, np.ndarray) else repr(values)  # one line
        raise TypeError(
            f"{name} must be int or float numbers, got {shown} (numpy dtype {array.dtype}); "
            "bool, complex, strings and other objects are not accepted"
        )
    if array.itemsize > 8:  # numpy's longdouble: no torch dtype holds it
        raise TypeError(f"{name} has numpy dtype {array.dtype}, which torch cannot hold: convert it to float64 first")
    return array


# ---------------------------------------------------------------------------- sizes
def format_bytes(n: float) -> str:
    """``n`` bytes as a reader says it, in powers of 1000: ``80 MB``, ``128 GB``, ``3.2 TB``."""
    units = ("bytes", "kB", "MB", "GB", "TB", "PB", "EB")
    i = 0
    while n >= 1000 and i < len(units) - 1:
        n, i = n / 1000, i + 1
    return f"{n:.3g} {units[i]}"


@lru_cache(maxsize=16)
def memory_size(device: torch.device | None = None) -> int | None:
    """Bytes of memory on ``device``: the host's physical memory for the CPU (and Apple's MPS, which shares it), the
    GPU's own for CUDA; None where it is not known. Read from the system, never from a tensor."""
    kind = "cpu" if device is None else device.type
    if kind == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if kind not in ("cpu", "mps"):
        return None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def check_size(name: str, count: int, limit: int, unit: str, item_bytes: int, limit_is: str, hint: str = "") -> None:
    """ValueError when ``count`` ``unit`` of ``item_bytes`` bytes each are more than ``limit``: the message names
    ``name``, the count, the memory it would take and what sets the limit (``limit_is``), before anything is
    allocated; ``hint`` ends it."""
    if count > limit:
        held = f"{limit:,}, {format_bytes(limit * item_bytes)}" if limit else f"not one: {format_bytes(item_bytes)}"
        raise ValueError(
            f"{name}: {count:,} {unit} ({format_bytes(count * item_bytes)}) is more than {limit_is} ({held}){hint}"
        )


def check_memory(name: str, count: int, unit: str, item_bytes: int, device: torch.device | None = None) -> None:
    """`check_size` against the memory of ``device`` (`memory_size`): sizes from shapes and options only, so the
    check reads no tensor and costs nothing below a gigabyte."""
    if count * item_bytes <= 1 << 30:
        return
    memory = memory_size(device)
    if memory is not None:
        where = "this machine's memory" if device is None or device.type in ("cpu", "mps") else f"{device}'s memory"
        check_size(name, count, memory // max(1, item_bytes), unit, item_bytes, f"{where} holds")
