"""timestep_embed: sinusoidal timestep embeddings for diffusion models.

The public API, re-exported from the modules that own it.
"""

from .conventions import (
    PRESETS,
    Convention,
    convention_from_diffusers,
    convention_to_diffusers,
    get_convention,
    layout_permutation,
)
from .detect import Detection, DiffReport, detect_convention, diff_report
from .embedding import (
    TIME_INPUTS,
    FourierEmbedding,
    SinusoidalEmbedding,
    TimestepEmbedder,
    TimestepMLP,
    time_input,
)
from .sinusoidal import (
    SinusoidalTable,
    frequencies,
    frequencies_np,
    get_timestep_embedding,
    sinusoidal_embedding,
    sinusoidal_embedding_np,
)
from .validation import LowPrecisionTimestepWarning

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "TIME_INPUTS",
    "Detection",
    "DiffReport",
    "FourierEmbedding",
    "SinusoidalEmbedding",
    "TimestepEmbedder",
    "TimestepMLP",
    "detect_convention",
    "diff_report",
    "time_input",
    "Convention",
    "LowPrecisionTimestepWarning",
    "SinusoidalTable",
    "convention_from_diffusers",
    "convention_to_diffusers",
    "frequencies",
    "frequencies_np",
    "get_convention",
    "get_timestep_embedding",
    "layout_permutation",
    "sinusoidal_embedding",
    "sinusoidal_embedding_np",
]
