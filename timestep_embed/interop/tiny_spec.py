"""What a tiny random-weight diffusers model is made of: its class, a small config, the other inputs of
its forward and the timesteps its pipeline feeds (see `timestep_embed.interop.tiny`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["Tiny", "B", "randn", "FLOW", "STEPS", "SIGMA", "WAN_BLOCKS"]

B = 2  # the batch of every tiny model
STEPS = (3, 917)  # integer steps of a DDPM / DDIM run
FLOW = (127.5, 981.25)  # sigma * 1000 from FlowMatchEulerDiscreteScheduler
SIGMA = tuple(t / 1000 for t in FLOW)  # what Flux-like pipelines pass: timestep / 1000
# the blocks of diffusers' tiny Wan-family test configs (Wan, SkyReels-V2, ChronoEdit, Helios, AnyFlow ...)
WAN_BLOCKS = dict(
    patch_size=[1, 2, 2], num_attention_heads=2, ffn_dim=32, num_layers=2, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
)  # fmt: skip


def randn(*shape: int) -> torch.Tensor:
    """Random inputs from the global generator (seeded before every build): never all ones."""
    return torch.randn(*shape)


@dataclass(frozen=True)
class Tiny:
    """A tiny model: ``cls`` (the diffusers class name), ``config`` (its ``__init__`` keywords),
    ``inputs`` (the keyword arguments of its forward other than the timestep, made after the model from
    the same seeded generator), ``timesteps`` (what its pipeline passes as the timestep) and the
    keyword that carries it (``timestep_arg``)."""

    cls: str
    config: dict = field(default_factory=dict)
    inputs: Callable[[], dict] = field(default=dict, repr=False)
    timesteps: tuple = STEPS
    timestep_arg: str = "timestep"
