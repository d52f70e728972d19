"""timestep_embed: sinusoidal timestep embeddings for diffusion models.

The public API, re-exported from the modules that own it.
"""

from .analysis import (
    CoverageWarning,
    bounds,
    distance_by_offset,
    dot_by_offset,
    frequency_coverage,
    position_uniqueness,
    relative_identity,
    relative_identity_error,
    rotation_error,
    rotation_matrix,
    uniqueness,
    wavelengths,
)
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
from .naive import naive_scheme_table
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
    "CoverageWarning",
    "bounds",
    "distance_by_offset",
    "dot_by_offset",
    "frequency_coverage",
    "naive_scheme_table",
    "position_uniqueness",
    "relative_identity",
    "relative_identity_error",
    "rotation_error",
    "rotation_matrix",
    "uniqueness",
    "wavelengths",
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
