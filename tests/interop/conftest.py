"""The tiny random-weight diffusers models of ``tests/fixtures/tiny.py`` as a fixture."""

from __future__ import annotations

import pytest

diffusers = pytest.importorskip("diffusers")

from ..fixtures.tiny import build, run  # noqa: E402  (after the skip: needs diffusers)

__all__ = ["build", "run"]


class _Tiny:
    """``tiny(name) -> (model, inputs, timesteps)``; ``tiny.run(model, inputs, t)``."""

    run = staticmethod(run)

    def __call__(self, name: str):
        return build(name)


@pytest.fixture
def tiny_model():
    return _Tiny()
