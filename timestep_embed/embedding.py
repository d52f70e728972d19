"""nn.Modules over the sinusoidal core: what a UNet owns to turn a timestep into ``emb``.

Data flow (one direction): ``t -> time_input(t, kind) -> time_proj (sinusoid or Fourier)
-> time_embedding (TimestepMLP) -> emb [B, emb_dim]``, handed to every block.

The child names (``time_proj``, ``time_embedding``; ``linear_1``, ``act``, ``linear_2``,
``cond_proj``, ``post_act``) are diffusers' names, so diffusers weights load as they are.
"""

from __future__ import annotations

import torch
from torch import nn

from ._kernels import Plan, sin_cos_layout
from .conventions import Convention, resolve_convention
from .fourier import FourierEmbedding
from .mlp import TimestepMLP, call_children_directly
from .sinusoidal import SinusoidalTable, frequencies, sinusoidal_embedding

__all__ = [
    "TIME_INPUTS",
    "time_input",
    "SinusoidalEmbedding",
    "FourierEmbedding",
    "TimestepMLP",
    "TimestepEmbedder",
    "default_sinusoid_dim",
]

# --------------------------------------------------------------------------------------------
# what the embedding is fed
# --------------------------------------------------------------------------------------------
TIME_INPUTS = {
    # DDPM (diffusion_tf), diffusers schedulers + UNets, Stable Diffusion, DiT: the integer step
    # index 0..T-1 goes straight into the sinusoid.
    "index": "t as is (integer step index 0..T-1)",
    # Continuous-time models with t in [0, 1] (score_sde VP models feed t * 999, flow-matching
    # codebases such as SD3/Flux pipelines feed t * 1000): t * num_timesteps.
    "unit_x1000": "t in [0, 1] times num_timesteps (1000 by default)",
    # improved-/guided-diffusion `GaussianDiffusion._scale_timesteps` with rescale_timesteps=True:
    # t.float() * (1000.0 / num_timesteps), so a 4000-step model sees the range of a 1000-step one.
    "rescale_1000": "t * 1000 / num_timesteps (improved-diffusion rescale_timesteps)",
    # EDM (Karras et al. 2022, Table 1) preconditioning c_noise = ln(sigma) / 4; k-diffusion's
    # Denoiser feeds the same. Here t is sigma > 0.
    "edm_log_sigma": "0.25 * ln(sigma), t = sigma > 0 (EDM c_noise)",
}


def time_input(t: torch.Tensor, kind: str = "index", num_timesteps: int = 1000) -> torch.Tensor:
    """Map a timestep to what the embedding is fed, as the codebase ``kind`` does.

    Args:
        t: tensor (or number) of any shape ``[...]``: an integer index, a time in [0, 1], or sigma.
        kind: one of :data:`TIME_INPUTS`: ``"index"`` (returned unchanged),
            ``"unit_x1000"`` (``t * num_timesteps``), ``"rescale_1000"``
            (``t.float() * (1000 / num_timesteps)``), ``"edm_log_sigma"`` (``0.25 * ln(t)``).
        num_timesteps: T of the schedule (used by ``unit_x1000`` and ``rescale_1000``).

    Returns:
        Tensor ``[...]``: ``t`` itself for ``"index"``, otherwise floating.
    """
    if kind == "index":
        return t
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    if kind == "rescale_1000":
        return t.float() * (1000.0 / num_timesteps)
    if kind == "unit_x1000":
        return (t if t.is_floating_point() else t.float()) * float(num_timesteps)
    if kind == "edm_log_sigma":
        sigma = t if t.is_floating_point() else t.float()
        return sigma.log() * 0.25  # == log() / 4 exactly (a power-of-two scaling)
    raise ValueError(f"time_input kind must be one of {sorted(TIME_INPUTS)}, got {kind!r}")


def _check_time_input(kind, num_timesteps) -> None:
    if kind not in TIME_INPUTS:
        raise ValueError(f"time_input must be one of {sorted(TIME_INPUTS)}, got {kind!r}")
    if isinstance(num_timesteps, bool) or not isinstance(num_timesteps, int) or num_timesteps < 1:
        raise ValueError(f"num_timesteps must be a positive int, got {num_timesteps!r}")


# --------------------------------------------------------------------------------------------
# sinusoid
# --------------------------------------------------------------------------------------------
def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


class SinusoidalEmbedding(nn.Module):
    """Sinusoidal embedding ``t [...] -> [..., dim]``; the numbers of :func:`sinusoidal_embedding`.

    No parameters; the frequencies (and the optional table) are non-persistent buffers, so the
    state dict is empty and ``.to(device)`` moves them.

    Paths, all giving ``torch.equal`` results (``precise``: see the last one):

    * eager: calls the core :func:`sinusoidal_embedding` (input checks, bf16 warning);
    * integer ``t`` on CPU with ``num_timesteps`` set: one row gather from a table of
      ``0..num_timesteps-1`` computed by the core (out-of-range steps fall back to the core);
    * under ``torch.compile`` / ``torch.export``, or when ``t`` requires grad: plain torch ops
      over the frequency buffer (the core's exact float32 operations), traceable without
      data-dependent checks, no recompiles across batch sizes, differentiable in ``t``. With
      ``precise=True`` it is the core's small-output float64 path; the core's large-output
      precise kernel can differ from that by one float32 ulp (6e-8).

    Args:
        dim: output width (odd widths end with a zero column).
        convention: preset name or :class:`Convention`; default ``"adm"`` ([cos, sin], shift 0).
        layout, first, freq_shift, max_period, scale: override single fields of ``convention``.
        precise: float64 argument and sin/cos, rounded once (see the core).
        num_timesteps: build the integer lookup table for ``0..num_timesteps-1`` (CPU speed-up).
    """

    def __init__(
        self,
        dim: int,
        convention: str | Convention | None = "adm",
        *,
        layout: str | None = None,
        first: str | None = None,
        freq_shift: float | None = None,
        max_period: float | None = None,
        scale: float | None = None,
        precise: bool = False,
        num_timesteps: int | None = None,
    ):
        super().__init__()
        self.convention = resolve_convention(
            convention, layout=layout, first=first, freq_shift=freq_shift, max_period=max_period, scale=scale
        )
        self._plan = Plan(dim, self.convention, torch.float32, precise)  # validates dim
        self.dim, self.precise = dim, bool(precise)
        conv = self.convention
        freqs = frequencies(dim, conv.freq_shift, conv.max_period, precise=self.precise).clone()
        self.register_buffer("freqs", freqs, persistent=False)
        # precise: per-column frequency and phase offset rows [1, dim] (cos = sin(x + pi/2)), the
        # core's small precise path operation for operation
        columns = self._column_rows(freqs.device) if self.precise else (None, None)
        self.register_buffer("column_freqs", columns[0], persistent=False)
        self.register_buffer("column_offsets", columns[1], persistent=False)
        self.num_timesteps = num_timesteps
        table = None
        if num_timesteps is not None:
            table = SinusoidalTable(num_timesteps, dim, conv, precise=self.precise).table
        self.register_buffer("table", table, persistent=False)

    def _apply(self, fn, recurse=True):
        # Keep the buffers' exact values through .half()/.to(dtype): recompute them on the new
        # device instead of letting a cast round them (the output stays float32, as diffusers').
        super()._apply(fn, recurse)
        device, conv = self.freqs.device, self.convention
        expected = torch.float64 if self.precise else torch.float32
        if self.freqs.dtype != expected:
            self.freqs = frequencies(
                self.dim, conv.freq_shift, conv.max_period, device=device, precise=self.precise
            ).clone()
        if self.precise and self.column_freqs.dtype != torch.float64:
            self.column_freqs, self.column_offsets = self._column_rows(device)
        if self.table is not None and self.table.dtype != torch.float32:
            self.table = SinusoidalTable(self.num_timesteps, self.dim, conv, precise=self.precise, device=device).table
        return self

    def extra_repr(self) -> str:
        c = self.convention
        return (
            f"dim={self.dim}, layout={c.layout!r}, first={c.first!r}, freq_shift={c.freq_shift}, "
            f"max_period={c.max_period}, scale={c.scale}, precise={self.precise}, "
            f"num_timesteps={self.num_timesteps}"
        )

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` ``[...]`` (int or float) -> float32 ``[..., dim]``."""
        if _tracing() or (isinstance(t, torch.Tensor) and t.requires_grad):
            return self.traceable(t)
        table = self.table
        if (
            table is not None
            and isinstance(t, torch.Tensor)
            and t.device.type == "cpu"
            and not t.is_floating_point()
            and table.device.type == "cpu"
        ):
            try:
                return nn.functional.embedding(t, table)  # a row gather, [...] -> [..., dim]
            except (IndexError, RuntimeError):
                pass  # a step outside 0..num_timesteps-1: compute it directly
        return sinusoidal_embedding(t, self.dim, self.convention, precise=self.precise, device=self.freqs.device)

    def _column_rows(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(row.to(device).clone() for row in self._plan.column_rows(torch.device("cpu")))

    def traceable(self, t: torch.Tensor) -> torch.Tensor:
        """The core's float32 (or small-output float64 ``precise``) operations over the buffers,
        no checks."""
        shape = t.shape
        if self.precise:
            x = t.reshape(-1, 1).double()
            emb = torch.addcmul(self.column_offsets, x, self.column_freqs).sin()
            return emb.float().reshape(*shape, self.dim)
        x = t.reshape(-1).float()
        args = x[:, None] * self.freqs[None, :]
        if self.convention.scale != 1.0:
            args = args * self.convention.scale
        emb = sin_cos_layout(args, self._plan)  # the core's own few-call layout step
        return emb.reshape(*shape, self.dim)


# --------------------------------------------------------------------------------------------
# the embedder a UNet owns
# --------------------------------------------------------------------------------------------
def default_sinusoid_dim(emb_dim: int) -> int:
    """``emb_dim // 4`` rounded down to even, at least 4 (diffusers/ADM: 320 -> 1280)."""
    return max(4, 2 * (emb_dim // 8))


class TimestepEmbedder(nn.Module):
    """``t [B] -> emb [B, emb_dim]``: time-input mapping, sinusoid (or Fourier), MLP.

    Children: ``time_proj`` (:class:`SinusoidalEmbedding` or :class:`FourierEmbedding`) and
    ``time_embedding`` (:class:`TimestepMLP` ``sinusoid_dim -> emb_dim -> emb_dim``), named
    like diffusers' UNet attributes. Compute it once per forward and hand ``emb`` to every block.

    Args:
        emb_dim: output width (diffusers' ``time_embed_dim``, 4x the first channel count).
        sinusoid_dim: width of the sinusoid; default :func:`default_sinusoid_dim`.
        convention: sinusoid convention (preset or :class:`Convention`), default ``"adm"``.
        time_input: what the sinusoid is fed, see :func:`time_input` (default ``"index"``).
        num_timesteps: T; with ``time_input="index"`` it also builds the integer lookup table.
        act, post_act, cond_dim: passed to :class:`TimestepMLP`.
        fourier: None (sinusoid), ``"diffusers"`` ([sin, cos] of ``t*w*2pi``) or ``"edm"``
            ([cos, sin] of ``t.ger(2pi w)``) random features with std ``fourier_scale``.
        precise: float64 sinusoid (see the core).
    """

    def __init__(
        self,
        emb_dim: int,
        sinusoid_dim: int | None = None,
        convention: str | Convention = "adm",
        time_input: str = "index",
        num_timesteps: int = 1000,
        act: str = "silu",
        fourier: str | None = None,
        fourier_scale: float = 16.0,
        post_act: str | None = None,
        cond_dim: int | None = None,
        precise: bool = False,
    ):
        super().__init__()
        _check_time_input(time_input, num_timesteps)
        if isinstance(emb_dim, bool) or not isinstance(emb_dim, int) or emb_dim < 1:
            raise ValueError(f"emb_dim must be a positive int, got {emb_dim!r}")
        sinusoid_dim = default_sinusoid_dim(emb_dim) if sinusoid_dim is None else sinusoid_dim
        self.time_input, self.num_timesteps = time_input, num_timesteps
        if fourier is None:
            table_size = num_timesteps if time_input == "index" else None
            self.time_proj = SinusoidalEmbedding(sinusoid_dim, convention, precise=precise, num_timesteps=table_size)
        elif fourier == "diffusers":
            self.time_proj = FourierEmbedding(sinusoid_dim, fourier_scale)
        elif fourier == "edm":
            self.time_proj = FourierEmbedding.edm(sinusoid_dim, fourier_scale)
        else:
            raise ValueError(f"fourier must be None, 'diffusers' or 'edm', got {fourier!r}")
        self.time_embedding = TimestepMLP(sinusoid_dim, emb_dim, act=act, post_act=post_act, cond_dim=cond_dim)

    @property
    def emb_dim(self) -> int:
        return self.time_embedding.linear_2.out_features

    def forward(self, t: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """``t`` ``[B]`` (int or float; or any ``[...]``) -> ``[B, emb_dim]`` in the MLP's dtype."""
        cache = self._cache
        if cache is not None and condition is None and self._cache_applies(t, cache[1]):
            if self._cache_key(cache[1]) == cache[2]:
                try:
                    return nn.functional.embedding(t, cache[0])
                except (IndexError, RuntimeError):
                    pass  # a step outside 0..num_timesteps-1: compute it
            else:
                self._cache = None  # the weights changed (optimizer step, load_state_dict, .to())
        return self._compute(t, condition)

    def _compute(self, t: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        if self.time_input != "index":
            t = time_input(t, self.time_input, self.num_timesteps)
        proj, mlp = self.time_proj, self.time_embedding
        direct = call_children_directly(proj, mlp)  # skip two Module.__call__ (see mlp.py)
        features = proj.forward(t) if direct else proj(t)
        weight = mlp.linear_1.weight
        if features.dtype != weight.dtype:
            features = features.to(weight.dtype)
        return mlp.forward(features, condition) if direct else mlp(features, condition)

    # ---------------------------------------------------------------- inference cache
    _cache: tuple[torch.Tensor, tuple] | None = None

    def cache_integer_steps(self) -> TimestepEmbedder:
        """Precompute ``emb`` of every integer step ``0..num_timesteps-1`` for inference.

        Afterwards a forward with integer ``t`` on CPU, no ``condition`` and no gradient needed
        (``torch.no_grad()`` or frozen weights) is one row gather instead of sinusoid + MLP. The
        rows come from one batched forward, so they equal a direct call up to float32 GEMM
        rounding (~1e-7), not bit for bit. The cache is dropped automatically when any weight
        changes (in-place update, ``load_state_dict``, ``.to()``); it is never saved. Returns self.
        """
        weight = self.time_embedding.linear_1.weight
        with torch.no_grad():
            table = self._compute(torch.arange(self.num_timesteps, device=weight.device))
        params = (self.time_proj, self.time_embedding, *self.parameters())
        self._cache = (table, params, self._cache_key(params))
        return self

    def _cache_key(self, params: tuple) -> tuple:
        # the same children, and every weight unchanged: in-place updates bump _version, a move
        # to another device/dtype changes data_ptr
        if params[0] is not self.time_proj or params[1] is not self.time_embedding:
            return ()
        return tuple((p._version, p.data_ptr()) for p in params[2:])

    @staticmethod
    def _cache_applies(t, params: tuple) -> bool:
        if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.device.type != "cpu" or _tracing():
            return False
        return not torch.is_grad_enabled() or not any(p.requires_grad for p in params[2:])
