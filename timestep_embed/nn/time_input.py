"""What the sinusoid is fed: the map from a scheduler's time value to the embedding's input."""

from __future__ import annotations

import torch

from ..checks import check_choice, check_int
from ..guards import TimestepsLike, as_tensor, value_range
from ..modes import reads_values

__all__ = ["TIME_INPUTS", "time_input", "check_time_input"]

TIME_INPUTS = {
    # DDPM (diffusion_tf), diffusers' schedulers and UNets, Stable Diffusion, DiT: the integer step
    # index 0..T-1 goes into the sinusoid as it is.
    "identity": "t as is (e.g. the integer step index 0..T-1)",
    # Continuous time t in [0, 1] stretched to the index range: flow-matching pipelines (SD3, Flux) feed
    # sigma * 1000; score_sde's VP models feed t * (N - 1) = t * 999, which is num_timesteps=999 here.
    "times_T": "t * num_timesteps (t in [0, 1])",
    # improved-/guided-diffusion `GaussianDiffusion._scale_timesteps` with rescale_timesteps=True:
    # t.float() * (1000.0 / num_timesteps), so a 4000-step model sees the range of a 1000-step one.
    "times_1000_over_T": "t * 1000 / num_timesteps",
    # EDM (Karras et al. 2022, Table 1) preconditioning c_noise = ln(sigma) / 4, in float32 at least (EDM's
    # networks cast sigma to float32 first); k-diffusion's Denoiser feeds the same. Here t is sigma > 0.
    "quarter_log": "ln(t) / 4 (t = sigma > 0, EDM c_noise)",
}


def check_time_input(kind, num_timesteps) -> None:
    """ValueError naming the argument unless ``kind`` is in `TIME_INPUTS` and T a positive int."""
    check_choice(kind, "time_input", TIME_INPUTS)
    check_int(num_timesteps, "num_timesteps")


def time_input(t: TimestepsLike, kind: str = "identity", num_timesteps: int = 1000) -> TimestepsLike:
    """Map a time value ``t`` ``[...]`` to what the embedding is fed (``kind``: see `TIME_INPUTS`).

    ``"identity"`` returns ``t`` unchanged; the others return a floating tensor ``[...]``:
    ``t * num_timesteps``, ``t.float() * (1000 / num_timesteps)`` or ``ln(t) * 0.25`` (``t`` must then be
    > 0: sigma; checked where the values are on the host, see ``modes.reads_values``; a float16/bfloat16 sigma is
    taken to float32 first, as EDM does, so that the log is not rounded to 8 bits).
    """
    check_time_input(kind, num_timesteps)
    if kind == "identity":
        return t
    t = as_tensor(t, name="t")
    if kind == "times_1000_over_T":
        return t.float() * (1000.0 / num_timesteps)
    t = t if t.is_floating_point() else t.float()
    if kind == "times_T":
        return t * float(num_timesteps)
    if t.dtype in (torch.float16, torch.bfloat16):  # EDM: sigma.to(torch.float32), then the log
        t = t.float()
    if t.numel() and reads_values(t) and not value_range(t.reshape(-1))[0] > 0:  # NaN fails too
        raise ValueError(f"t must be > 0 for time_input='quarter_log' (ln(sigma) / 4), got {t.min().item():g}")
    return t.log() * 0.25  # == ln(t) / 4 exactly (a power-of-two scaling)
