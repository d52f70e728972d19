"""Modules over the sinusoidal core: the sinusoid, Fourier features, the time-input map, the MLP, the embedder."""

from .embedder import TimestepEmbedder, default_sinusoid_dim
from .fourier import FourierEmbedding
from .mlp import ACTIVATIONS, TimestepMLP
from .sinusoidal import SinusoidalEmbedding
from .time_input import TIME_INPUTS, check_time_input, time_input

__all__ = [
    "ACTIVATIONS",
    "TIME_INPUTS",
    "FourierEmbedding",
    "SinusoidalEmbedding",
    "TimestepEmbedder",
    "TimestepMLP",
    "check_time_input",
    "default_sinusoid_dim",
    "time_input",
]
