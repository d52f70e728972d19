"""The compute paths behind :func:`timestep_embed.sinusoidal_embedding` (private).

A :class:`Plan` holds everything about a call that does not depend on the timesteps (validated
once and cached), so a call costs a handful of torch operations:

* small outputs: ``outer`` -> ``sin``, ``cos`` -> one ``cat``/``stack`` (fewest Python calls);
* large outputs: row chunks (phases stay in cache), each laid out by one ``cat``/``stack``
  straight into its rows of the preallocated output;
* integer timesteps in [0, rows): a gather from a cached table of those rows, built by the
  same kernels, so the values are bit-identical to the direct path;
* one timestep shared by the whole batch (every sampling step): one row, then a copy;
* ``precise``: float64 phases, see :mod:`timestep_embed._precise`.

The float32 phase is formed with exactly diffusers' operations (float32 frequencies from
``exp(-ln(max_period) * arange(h) / (h - shift))``, ``t.float() * w``, then ``* scale``), and
torch's sin/cos are elementwise and position-independent, so every path gives diffusers' bits.
(Per value, torch's CPU sin/cos cost several times a multiply or a copy: the benchmark's
"sin floor" column. Bit-identity rules out any cheaper sin, so that is the floor here too.)
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import _precise
from .conventions import Convention
from .validation import ValueRange, check_dim, check_dtype, value_range_of

# Up to this many output elements, one pass of outer/sin/cos/cat over the whole batch; above it,
# row chunks written into a preallocated output (no [N, dim/2] temporaries through memory).
SMALL_OUTPUT = 1 << 17
# Large outputs are computed in row chunks of about this many phases (measured best of 2**15..2**19).
CHUNK_PHASES = 1 << 17
# Integer timesteps use a cached table when the table would hold at most this many values.
TABLE_MAX_ELEMENTS = 1 << 21


def float32_frequencies(half: int, freq_shift: float, max_period: float, device) -> torch.Tensor:
    """diffusers' float32 frequencies, operation for operation (so the bits match)."""
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=device)
    exponent = exponent / (half - freq_shift)
    return torch.exp(exponent)


def float64_frequencies(half: int, freq_shift: float, max_period: float) -> np.ndarray:
    """Float64 ``w_k = max_period ** (-k / (h - freq_shift))``, shape [h]."""
    k = np.arange(half, dtype=np.float64)
    return np.exp(-math.log(max_period) * k / (half - freq_shift))


class Plan:
    """Validated options of one (dim, convention, dtype, precise) with per-device caches."""

    def __init__(self, dim: int, conv: Convention, dtype: torch.dtype, precise: bool):
        check_dim(dim, conv.freq_shift)
        check_dtype(dtype)
        self.dim, self.conv, self.dtype = dim, conv, dtype
        self.half = dim // 2
        self.precise = bool(precise) or dtype == torch.float64
        self.scale = float(conv.scale)
        self.cos_first = conv.first == "cos"
        self.interleaved = conv.layout == "interleaved"
        self.pad = dim % 2 == 1
        self.max_table_rows = TABLE_MAX_ELEMENTS // max(dim, 1)
        self.freqs64 = float64_frequencies(self.half, float(conv.freq_shift), float(conv.max_period))
        self.max_freq = float(self.freqs64.max(initial=0.0))
        self._freqs: dict[torch.device, torch.Tensor] = {}
        self._tables: dict[torch.device, torch.Tensor] = {}
        self._column_rows: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def freqs(self, device: torch.device) -> torch.Tensor:
        """``w_k`` [h] on ``device``: float32 exactly as diffusers computes them, or float64."""
        try:
            return self._freqs[device]
        except KeyError:
            if self.precise:
                freqs = torch.from_numpy(self.freqs64).to(device)
            else:
                freqs = float32_frequencies(self.half, float(self.conv.freq_shift), float(self.conv.max_period), device)
            self._freqs[device] = freqs
            return freqs

    def phases(self, t: torch.Tensor) -> torch.Tensor:
        """``scale * t * w_k``, [N, h]: float32 exactly as diffusers forms it, or float64 (precise)."""
        freqs = self.freqs(t.device)
        if t.dtype is not freqs.dtype:
            t = t.double() if self.precise else t.float()  # cheaper calls than t.to(dtype)
        args = torch.outer(t, freqs)
        if self.scale != 1.0:  # diffusers multiplies after the product; x * 1 is exact, so skip it
            args.mul_(self.scale)
        return args

    def column_rows(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 rows [1, dim]: per-column frequency and phase offset (precise path)."""
        rows = self._column_rows.get(device)
        if rows is None:
            freqs, offsets = _precise.column_phases(self)
            rows = tuple(torch.from_numpy(a).to(device).unsqueeze(0) for a in (freqs, offsets))
            self._column_rows[device] = rows
        return rows

    def layout_into(self, out: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> None:
        """Write sin/cos [N, h] into ``out`` [N, dim] per the layout: one concatenation (or
        stack) into ``out`` itself, which beats two strided writes."""
        a, b = (cos, sin) if self.cos_first else (sin, cos)
        body = out[:, : 2 * self.half] if self.pad else out
        if self.interleaved:
            torch.stack((a, b), dim=2, out=body.unflatten(1, (self.half, 2)))
        else:
            torch.cat((a, b), dim=1, out=body)
        if self.pad:
            out[:, -1] = 0

    def table(self, device: torch.device, rows: int) -> torch.Tensor:
        """Embeddings of the integers 0 .. >= rows-1, grown in powers of two (>= 1024 rows).

        Built by the direct path's own kernels: float32 rows are bit-identical to it; precise
        rows are float64 sines rounded once (the small precise path, exactly).
        """
        table = self._tables.get(device)
        if table is None or table.shape[0] < rows:
            size = min(max(1024, 1 << (rows - 1).bit_length()), self.max_table_rows)
            positions = torch.arange(size, device=device)
            if self.precise:
                table = _precise.float64_embedding(positions, self).to(self.dtype)
            else:
                table = embed(positions, self, use_table=False)
            self._tables[device] = table
        return table


def embed(t: torch.Tensor, plan: Plan, value_range: ValueRange | None = None, use_table: bool = True) -> torch.Tensor:
    """Embed a validated 1-D timestep tensor [N] into [N, dim] of ``plan.dtype``.

    ``value_range`` is what validation found (:func:`checked_timesteps`); None means "work it out".
    """
    n = t.shape[0]
    if n == 0:
        return torch.empty(0, plan.dim, dtype=plan.dtype, device=t.device)
    if value_range is None:
        value_range = value_range_of(t)
    if use_table:
        emb = _from_table(t, plan, value_range)
        if emb is not None:
            return emb
    size = n * plan.dim
    if size > SMALL_OUTPUT and value_range.low == value_range.high:
        # One timestep for the whole batch (every sampling step): compute one row.
        return embed(t[:1], plan, value_range, use_table).expand(n, plan.dim).contiguous()
    if plan.precise:
        return _precise.embed_precise(t, plan, max(abs(value_range.low), abs(value_range.high)))
    if size <= SMALL_OUTPUT:
        emb = sin_cos_layout(plan.phases(t), plan)
        return emb if plan.dtype is torch.float32 else emb.to(plan.dtype)
    # Large outputs: row chunks whose phases stay in cache, each laid out straight into its rows.
    out = torch.empty(n, plan.dim, dtype=torch.float32, device=t.device)
    rows = max(1, CHUNK_PHASES // max(plan.half, 1))
    for start in range(0, n, rows):
        args = plan.phases(t[start : start + rows])
        plan.layout_into(out[start : start + rows], torch.sin(args), torch.cos(args))
    return out if plan.dtype is torch.float32 else out.to(plan.dtype)


def _from_table(t: torch.Tensor, plan: Plan, value_range: ValueRange) -> torch.Tensor | None:
    """Rows of the cached table when every timestep is an integer (of any dtype) in its range.

    Integer-valued floats qualify too: their phase ``float32(k) * w`` is the table row's phase.
    Returns None when ``t`` leaves the table's range or holds a fractional value.
    """
    low, high, integral = value_range
    if low < 0 or high >= plan.max_table_rows or integral is False:
        return None
    if integral is None and not bool((t == torch.round(t)).all()):
        return None
    index = t.long() if t.dtype.is_floating_point else t
    return torch.index_select(plan.table(t.device, int(high) + 1), 0, index)


def sin_cos_layout(args: torch.Tensor, plan: Plan) -> torch.Tensor:
    """sin/cos of phases [N, h] arranged per the plan's layout, [N, dim]: three calls and one concatenation."""
    a, b = torch.sin(args), torch.cos(args)
    if plan.cos_first:
        a, b = b, a
    if plan.interleaved:
        emb = torch.stack((a, b), dim=-1).flatten(1)
    else:
        emb = torch.cat((a, b), dim=1)
    return torch.nn.functional.pad(emb, (0, 1)) if plan.pad else emb
