"""The tiny random-weight diffusers models of ``timestep_embed.interop.tiny`` as a fixture."""

from __future__ import annotations

import pytest

diffusers = pytest.importorskip("diffusers")

from timestep_embed.interop.tiny import build, run  # noqa: E402  (after the skip: needs diffusers)

__all__ = ["build", "run"]


class _Tiny:
    """``tiny(name) -> (model, inputs, timesteps)``; ``tiny.run(model, inputs, t)``."""

    run = staticmethod(run)

    def __call__(self, name: str):
        return build(name)


@pytest.fixture
def tiny_model():
    return _Tiny()
