"""The embedder a model owns: ``t -> time_input -> time_proj (sinusoid) -> time_embedding (MLP) -> emb``.

The child names (``time_proj``, ``time_embedding``; inside the MLP ``linear_1``, ``act``,
``linear_2``, ``cond_proj``, ``post_act``) are diffusers' UNet attribute names, so diffusers
weights load as they are. Compute ``emb`` once per forward and hand it to every block.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..checks import check_int
from ..conventions import Convention
from ..folders import load_pretrained, push_folder_to_hub, save_pretrained
from ..guards import TimestepsLike, as_tensor
from ..sinusoidal import distinct_values
from .cast import run_dtype
from .fourier import FourierEmbedding
from .mlp import TimestepMLP
from .porting import time_path_modules
from .pretrained import diffusers_options, embedder_arguments, embedder_config, with_mlp
from .sinusoidal_module import SinusoidalEmbedding
from .time_input import check_time_input, time_input
from .time_path import build_to_fit, find_time_paths, load_state_dict_checked, match_state_dict

__all__ = ["TimestepEmbedder", "default_sinusoid_dim"]

log = logging.getLogger(__name__)


def _rows_of_one(t: TimestepsLike, weight: torch.Tensor) -> torch.Tensor:
    """``t`` ``[...]`` as the rows ``[..., 1]`` a ``FourierEmbedding(in_features=1)`` takes (k-diffusion's
    ``append_dims(c_noise, 2)``); a trailing axis of 1 after a batch axis is already that axis ([B] of B = 1 is
    not). Numbers go on the weight's device, floats in its dtype, as the module puts them."""
    if not isinstance(t, torch.Tensor):
        t = as_tensor(t, weight.device, "t")
        t = t.to(weight.dtype) if t.is_floating_point() else t
    return t if t.dim() >= 2 and t.shape[-1] == 1 else t[..., None]


def default_sinusoid_dim(emb_dim: int) -> int:
    """``emb_dim // 4`` rounded down to even, at least 4 (diffusers / ADM: 1280 -> 320)."""
    return max(4, 2 * (check_int(emb_dim, "emb_dim") // 8))


class TimestepEmbedder(nn.Module):
    """``t [B] (or [...]) -> emb [B, emb_dim] (or [..., emb_dim])``: time input, sinusoid, MLP.

    Children: ``time_proj`` (a [`SinusoidalEmbedding`][timestep_embed.SinusoidalEmbedding], or the module given as
    ``time_proj``, e.g. a [`FourierEmbedding`][timestep_embed.FourierEmbedding]) and ``time_embedding``
    ([`TimestepMLP`][timestep_embed.TimestepMLP] ``sinusoid_dim -> emb_dim -> emb_dim``).

    Args:
        emb_dim: output width (diffusers' ``time_embed_dim``, 4x the first channel count).
        sinusoid_dim: width of the sinusoid; default [`default_sinusoid_dim`][timestep_embed.nn.default_sinusoid_dim].
        convention: sinusoid convention (preset or [`Convention`][timestep_embed.Convention]), default ``"adm"``.
        time_input: what the sinusoid is fed, see [`time_input`][timestep_embed.nn.time_input.time_input] (default
            ``"identity"``).
        num_timesteps: T; with ``time_input="identity"`` also the size of the integer-step cache.
        act: the MLP's activation (see [`TimestepMLP`][timestep_embed.TimestepMLP]).
        post_act: an activation after the MLP (EDM's DhariwalUNet has one).
        cond_dim: width of an extra condition added before the MLP (diffusers' ``cond_proj``).
        precise: float64 sinusoid (see the core).
        time_proj: a module ``[...] -> [..., sinusoid_dim]`` used instead of the sinusoid (or ``[..., F] -> [...,
            sinusoid_dim]``, a [`FourierEmbedding`][timestep_embed.FourierEmbedding] with ``in_features``; with
            ``in_features=1``, ``t`` ``[...]`` is one timestep per entry, and a trailing axis of 1 is the feature
            axis: k-diffusion's ``[B, 1]``).
    """

    def __init__(
        self,
        emb_dim: int,
        sinusoid_dim: int | None = None,
        convention: str | Convention = "adm",
        *,
        time_input: str = "identity",
        num_timesteps: int = 1000,
        act: str = "silu",
        post_act: str | None = None,
        cond_dim: int | None = None,
        precise: bool = False,
        time_proj: nn.Module | None = None,
    ):
        super().__init__()
        check_time_input(time_input, num_timesteps)
        check_int(emb_dim, "emb_dim")
        if time_proj is not None:  # the MLP takes the width the module returns
            if not isinstance(time_proj, nn.Module):
                raise TypeError(f"time_proj must be an nn.Module [...] -> [..., width], got {type(time_proj).__name__}")
            sinusoid_dim = getattr(time_proj, "out_dim", getattr(time_proj, "dim", sinusoid_dim))
            if sinusoid_dim is None:
                raise ValueError(
                    f"pass sinusoid_dim=, the width {type(time_proj).__name__} returns (it has no out_dim)"
                )
        sinusoid_dim = (
            default_sinusoid_dim(emb_dim) if sinusoid_dim is None else check_int(sinusoid_dim, "sinusoid_dim")
        )
        self.time_input, self.num_timesteps = time_input, num_timesteps
        if time_proj is None:
            cache = num_timesteps if time_input == "identity" else None
            time_proj = SinusoidalEmbedding(sinusoid_dim, convention, precise=precise, num_timesteps=cache)
        self.time_proj = time_proj
        self.time_embedding = TimestepMLP(sinusoid_dim, emb_dim, act=act, post_act=post_act, cond_dim=cond_dim)

    @property
    def emb_dim(self) -> int:
        return self.time_embedding.linear_2.out_features

    def forward(
        self, t: TimestepsLike, condition: torch.Tensor | None = None, batch_size: int | None = None
    ) -> torch.Tensor:
        """``t`` ``[...]`` (int or float) -> ``[..., emb_dim]`` in the MLP's dtype.

        A large ``t`` with few distinct values (per-token timesteps ``[B, tokens]``, a batch sharing its
        steps) runs the sinusoid and the MLP once per distinct value and gathers the rows
        ([`distinct_values`][timestep_embed.sinusoidal.distinct_values]); not with a ``condition``, not when ``t``
        requires grad, not for a ``time_proj`` of ``in_features`` per row, not under tracing or compiling.

        A scalar or 0-d ``t`` with ``batch_size`` (or a ``condition`` ``[B, cond_dim]``), or a ``t`` ``[1]`` with
        ``batch_size``, is one step for the whole batch: ``[batch_size, emb_dim]``, as diffusers' UNets expand a
        timestep; another ``t`` must have ``batch_size`` rows. A ``condition`` ``[B, cond_dim]`` with per-token
        ``t`` ``[B, tokens]`` applies to each batch row's tokens.
        """
        weights = self.time_embedding.linear_1.weight
        if condition is not None and not isinstance(condition, torch.Tensor):
            raise TypeError(f"condition must be a floating torch.Tensor [B, cond_dim], got {type(condition).__name__}")
        if isinstance(t, torch.Tensor) and t.device != weights.device:
            raise ValueError(f"t is on {t.device} but the embedder's weights are on {weights.device}: move one of them")
        batch: int | None = None
        if batch_size is not None:
            batch = check_int(batch_size, "batch_size")
            t = t if isinstance(t, torch.Tensor) else as_tensor(t, weights.device)
            if t.numel() != 1 and (t.dim() == 0 or t.shape[0] != batch):
                raise ValueError(f"t of shape {tuple(t.shape)} is not one step or {batch} rows: batch_size={batch}")
        else:
            batch = condition.shape[0] if condition is not None and condition.dim() > 1 else None  # [B, cond_dim]
        one_step = not isinstance(t, torch.Tensor) or t.dim() == 0 or (t.shape == (1,) and batch_size is not None)
        if batch is not None and one_step:  # one step for the batch: [1] too, as diffusers' UNets expand it
            t = as_tensor(t, weights.device).reshape(()).expand(batch)
        t = time_input(t, self.time_input, self.num_timesteps)
        # FourierEmbedding(in_features=F) takes [..., F]: one timestep per row of F, not per entry
        proj = self.time_proj
        per_entry = not (isinstance(proj, FourierEmbedding) and proj.in_features is not None)
        if isinstance(proj, FourierEmbedding) and proj.in_features == 1:
            t = _rows_of_one(t, proj.weight)
        if condition is not None and per_entry and isinstance(t, torch.Tensor) and t.dim() > 1 and condition.dim() == 2:
            # [B, cond_dim] with per-token t [B, tokens]: each batch row's condition for its tokens (right-aligned
            # broadcasting would pair condition row i with token i)
            condition = condition.reshape(condition.shape[0], *[1] * (t.dim() - 1), condition.shape[1])
        if condition is None and per_entry and isinstance(t, torch.Tensor) and not t.requires_grad:
            # Per-token timesteps [B, tokens] hold few distinct values: sinusoid and MLP on those, then
            # gather. The rows equal a per-token run's up to the matrix multiply's rounding (which
            # depends on the number of rows); gradients reach the weights through the gather.
            distinct = distinct_values(t)
            if distinct is not None:
                values, index = distinct
                return self._embed(values, None).index_select(0, index).reshape(*t.shape, -1)
        return self._embed(t, condition)

    def _embed(self, t: TimestepsLike, condition: torch.Tensor | None) -> torch.Tensor:
        return self.time_embedding(self.time_proj(t), condition)  # the MLP casts to its dtype

    # ------------------------------------------------------------------------ checkpoints
    @classmethod
    def from_state_dict(
        cls,
        state_dict: Mapping[str, torch.Tensor],
        convention: str | Convention | None = None,
        *,
        family: str | None = None,
        layout: str = "auto",
        prefix: str | None = None,
        which: str = "timestep",
        **options,
    ) -> TimestepEmbedder:
        """The time path of a whole-model checkpoint: layout found, widths read from its tensors, weights loaded.

        Knows the layouts of `timestep_embed.families.LAYOUTS`: diffusers' models and the
        original releases (Stable Diffusion/LDM, SDXL, guided-diffusion, DDPM's torch port, DiT,
        PixArt, SD3, Flux with ``guidance_in``, Wan, HunyuanVideo, EDM's three networks,
        k-diffusion, lucidrains), under the prefixes ``model.diffusion_model.``, ``unet.``,
        ``transformer.``, ``model.``, ``net.`` ... (``prefix=`` for others). The sinusoid in front
        is the layout's, fed what the model's ``forward`` gets as its timestep (Flux: sigma, cast to
        the model's dtype and multiplied by 1000 there, as the model does). It logs the layout and
        every other MLP it found (guidance, text refiner, per-block copies, text projections):
        ``which="guidance"``, ``which="timestep[3]"`` ... loads one of those instead. The module is in the
        checkpoint's dtype (of two, the wider; a float8 checkpoint's in bfloat16, which holds its values exactly).

        Args:
            state_dict: the checkpoint's tensors (other keys are ignored).
            convention: the sinusoid, overriding the layout's; a diffusers UNet's state dict does
                not say (``flip_sin_to_cos`` and ``freq_shift`` are in its config): pass this or
                ``family``, or use `from_pretrained` on its folder.
            family: as [`find_time_paths`][timestep_embed.nn.find_time_paths] takes it.
            layout: as [`find_time_paths`][timestep_embed.nn.find_time_paths] takes it.
            prefix: as [`find_time_paths`][timestep_embed.nn.find_time_paths] takes it.
            which: the MLP to load (default the model's main time path, ``"timestep"``).
            options: ``time_input``, ``num_timesteps``, ``time_proj`` (replaces the layout's sinusoid),
                ``act`` and ``post_act`` (the MLP's activations, which the weights do not say: a diffusers
                UNet's ``act_fn`` and ``timestep_post_act``; default the layout's).
        """
        unknown = sorted(set(options) - {"time_input", "num_timesteps", "time_proj", "act", "post_act"})
        if unknown:
            raise ValueError(
                f"from_state_dict reads the MLP's widths and the sinusoid from the checkpoint and its layout; "
                f"{unknown} cannot be set (options are time_input, num_timesteps, time_proj, act, post_act; "
                "the sinusoid: convention=)"
            )
        if not isinstance(which, str):
            raise TypeError(f"which must be the label of an MLP ('timestep', 'guidance' ...), got {which!r}")
        match = find_time_paths(state_dict, family=family, layout=layout, prefix=prefix)
        ours = match_state_dict(state_dict, match, which)
        acts = {k: options.pop(k) for k in ("act", "post_act") if k in options}
        time_proj, mlp = time_path_modules(match, ours, convention, options.pop("time_proj", None), **acts)
        options.setdefault("time_input", match.layout.time_input)
        embedder = cls(mlp.linear_2.out_features, time_proj=time_proj, **options)
        embedder.time_embedding = mlp
        load_state_dict_checked(embedder, ours, f"the {which} MLP of this {match.describe()}")
        path = match.path(which)
        others = [p.describe() for p in match.paths if p is not path]
        log.info("%s %s found: %s", match.describe(), path.describe(), "; also: " + ", ".join(others) if others else "")
        return _stored_proj(embedder.to(_stored_dtype(ours)), ours)  # the MLP's dtype, Fourier features their own

    def config(self) -> dict:
        """The constructor arguments, JSON-able: what `save_pretrained` writes to ``config.json``
        (see `timestep_embed.nn.pretrained`)."""
        return embedder_config(self)

    def save_pretrained(self, folder: str | Path) -> Path:
        """``folder/config.json`` (`config`, flat, with ``_class_name`` and the versions) and
        ``folder/model.safetensors``: a folder ``huggingface_hub.PyTorchModelHubMixin`` also reads."""
        return save_pretrained(folder, type(self).__name__, self.config(), self.state_dict())

    def push_to_hub(self, repo_id: str, *, private: bool | None = None, token: str | None = None) -> str:
        """Upload the `save_pretrained` folder to the Hugging Face Hub repository ``repo_id``
        (created if needed; needs ``huggingface_hub`` and a network); returns the commit's URL."""
        with tempfile.TemporaryDirectory() as tmp:
            return push_folder_to_hub(self.save_pretrained(Path(tmp) / "model"), repo_id, private=private, token=token)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        subfolder: str | None = None,
        revision: str | None = None,
        variant: str | None = None,
        torch_dtype: torch.dtype | str | None = None,
        device: torch.device | str | None = None,
        which: str = "timestep",
    ) -> TimestepEmbedder:
        """An embedder from a pretrained folder, or a Hugging Face Hub repository (``huggingface_hub``).

        Reads the folders `save_pretrained` writes (and those of earlier versions), and diffusers
        model folders (``config.json`` + ``diffusion_pytorch_model.safetensors``, sharded or not): their
        time path, with what the config says that the weights do not (a UNet's ``flip_sin_to_cos``,
        ``freq_shift``, ``act_fn``, Fourier features; the class where two share their keys).

        Args:
            name_or_path: a folder, or a Hub repository id (``owner/name``).
            subfolder: the model's folder inside it (a pipeline's ``"unet"`` or ``"transformer"``).
            revision: the Hub revision (branch, tag or commit).
            variant: diffusers' variant of the weights (``"fp16"``: ``diffusion_pytorch_model.fp16.safetensors``).
            torch_dtype: the dtype to cast to (``torch.bfloat16`` or ``"bfloat16"``); default: as stored (float8:
                bfloat16, which holds its values exactly; torch has no float8 arithmetic).
            device: where to put it.
            which: in a diffusers folder, the MLP to load (``"guidance"``, ``"refiner"`` ...).
        """
        dtype, place = _dtype(torch_dtype), _device(device)
        config, state = load_pretrained(name_or_path, subfolder=subfolder, revision=revision, variant=variant)
        if "_diffusers_version" in config:
            embedder = cls.from_state_dict(state, which=which, **diffusers_options(config, state))
        elif config.get("_class_name") not in {c.__name__ for c in cls.__mro__}:  # this class or one it extends
            raise ValueError(f"{name_or_path} holds a {config.get('_class_name')}, not a {cls.__name__}")
        else:

            def build() -> TimestepEmbedder:
                try:  # an edited config.json: its error names the file (build_to_fit meets it on the meta device)
                    kwargs, extras = embedder_arguments(config)
                    return with_mlp(cls(**kwargs), extras)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{name_or_path}: its config.json does not build a {cls.__name__}: {exc}") from exc

            embedder = build_to_fit(build, state, f"{name_or_path}")
            if dtype is None:  # as from_state_dict
                return _stored_proj(embedder.to(dtype=_stored_dtype(state)), state).to(device=place)
        return embedder.to(device=place, dtype=dtype)


def _stored_proj(embedder: TimestepEmbedder, state: Mapping[str, torch.Tensor]) -> TimestepEmbedder:
    """``embedder`` whose time projection keeps the dtype its weights are stored in (Fourier features in float32
    beside a bfloat16 MLP), loaded again from ``state``: casting the whole embedder to the MLP's dtype rounded them."""
    stored = {k.removeprefix("time_proj."): v for k, v in state.items() if k.startswith("time_proj.")}
    if stored:
        embedder.time_proj.to(run_dtype(*(v.dtype for v in stored.values())))
        load_state_dict_checked(embedder.time_proj, stored, "the time projection's weights")
    return embedder


def _stored_dtype(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    """The dtype an embedder of these weights (in our names) runs in: its two Linears' as stored, by `run_dtype`
    (of two, the wider; float8 in bfloat16)."""
    return run_dtype(*(state[f"time_embedding.linear_{i}.weight"].dtype for i in (1, 2)))


def _dtype(torch_dtype) -> torch.dtype | None:
    if torch_dtype is None:
        return None
    dtype = getattr(torch, torch_dtype, None) if isinstance(torch_dtype, str) else torch_dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"torch_dtype must be a floating torch dtype (torch.bfloat16 or 'bfloat16'), got {torch_dtype!r}"
        )
    return dtype


def _device(device) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be a torch device ('cpu', 'cuda:0', torch.device), got {device!r}") from exc
