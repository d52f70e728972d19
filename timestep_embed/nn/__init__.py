"""Modules over the sinusoidal core: the sinusoid, Fourier features, the time-input map, the MLP, the
embedder, and the key layouts of real checkpoints' time paths."""

from ..families import KNOWN_PREFIXES, LAYOUTS, Layout, MLPKeys
from .cast import InModelDtype
from .embedder import TimestepEmbedder, default_sinusoid_dim
from .fourier import FourierEmbedding
from .mlp import ACTIVATIONS, TimestepMLP
from .sinusoidal_module import SinusoidalEmbedding
from .time_input import TIME_INPUTS, check_time_input, time_input
from .time_path import (
    LayoutMatch,
    TimePath,
    build_to_fit,
    embedder_state_dict,
    find_time_paths,
    load_state_dict_checked,
    to_layout,
)

__all__ = [
    "ACTIVATIONS",
    "LAYOUTS",
    "KNOWN_PREFIXES",
    "InModelDtype",
    "Layout",
    "LayoutMatch",
    "MLPKeys",
    "TimePath",
    "embedder_state_dict",
    "find_time_paths",
    "load_state_dict_checked",
    "build_to_fit",
    "to_layout",
    "TIME_INPUTS",
    "FourierEmbedding",
    "SinusoidalEmbedding",
    "TimestepEmbedder",
    "TimestepMLP",
    "check_time_input",
    "default_sinusoid_dim",
    "time_input",
]
