"""Tiny random-weight diffusers models of the classes the interop is tested on (nothing is downloaded).

``build(name)`` builds one (seeded, eval mode) and returns ``(model, inputs, timesteps)``: the keyword
arguments of its forward other than the timestep, and what its pipeline feeds as ``timestep``
(integer steps, flow-matching sigma * 1000, or Flux's sigma in [0, 1]). ``run(model, inputs, t)``
returns the output tensor. diffusers is imported lazily; the sizes are the smallest each config
allows. The specs (`timestep_embed.interop.tiny_spec.Tiny`) are in ``tiny_unets.py`` and
``tiny_dits.py``; `BY_CLASS` names one per diffusers class.
"""

from __future__ import annotations

import torch

from .patch import require_diffusers
from .tiny_custom import CUSTOM
from .tiny_derived import DERIVED
from .tiny_dits import DITS
from .tiny_flux_like import FLUX_LIKE
from .tiny_more import MORE
from .tiny_newer import NEWER
from .tiny_sd_unets import ZOO_UNETS
from .tiny_spec import Tiny
from .tiny_unets import UNETS
from .tiny_video import VIDEO
from .tiny_zoo import ZOO_TRANSFORMERS

__all__ = ["TINY", "BY_CLASS", "build", "run"]

TINY: dict[str, Tiny] = {
    **UNETS,
    **DITS,
    **ZOO_UNETS,
    **ZOO_TRANSFORMERS,
    **FLUX_LIKE,
    **DERIVED,
    **VIDEO,
    **NEWER,
    **CUSTOM,
    **MORE,
}
BY_CLASS: dict[str, str] = {}
for _name, _spec in TINY.items():
    BY_CLASS.setdefault(_spec.cls, _name)


def build(name: str):
    """``(model in eval mode, inputs without the timestep, the timesteps its pipeline feeds)``."""
    if name not in TINY:
        raise ValueError(f"no tiny model {name!r}; known: {', '.join(TINY)}")
    spec = TINY[name]
    torch.manual_seed(0)
    model = getattr(require_diffusers(), spec.cls)(**spec.config)
    return model.eval(), spec.inputs(), torch.tensor(spec.timesteps)


def run(model, inputs, timestep, timestep_arg: str = "timestep") -> torch.Tensor:
    """The model's output for ``timestep`` (no gradients), as one tensor: its ``sample``, or every
    tensor it returns flattened and joined (a ControlNet's residuals)."""
    with torch.no_grad():
        out = model(**inputs, **{timestep_arg: timestep})
    sample = getattr(out, "sample", None)
    if isinstance(sample, torch.Tensor):
        return sample
    tensors = list(_tensors(out))
    return tensors[0] if len(tensors) == 1 else torch.cat([t.reshape(-1) for t in tensors])


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for value in out.values():
            yield from _tensors(value)
    elif isinstance(out, (tuple, list)):
        for value in out:
            yield from _tensors(value)
