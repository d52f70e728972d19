"""timestep_embed: sinusoidal timestep embeddings for diffusion models.

The public API: the sinusoidal core (timesteps and patch grids), the modules over it and the
convention detector. The rooms
above them are imported by name: ``timestep_embed.analysis``, ``timestep_embed.interop`` (diffusers),
``timestep_embed.ddpm`` (the MNIST DDPM).
"""

from .analysis.detect import Detection, detect_convention
from .analysis.diff_report import DiffReport, diff_report
from .conventions import (
    PRESETS,
    Convention,
    convention_from_diffusers,
    convention_to_diffusers,
    get_convention,
    layout_permutation,
)
from .files import package_version
from .grid import grid_embedding, grid_positions, patch_grid_embedding, video_grid_embedding
from .modes import set_value_checks
from .nn import TIME_INPUTS, FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP, time_input
from .sinusoidal import (
    LowPrecisionTimestepWarning,
    frequencies,
    frequencies_np,
    get_timestep_embedding,
    sinusoidal_embedding,
    sinusoidal_embedding_np,
)

__version__ = package_version()

__all__ = [
    "PRESETS",
    "TIME_INPUTS",
    "Convention",
    "Detection",
    "DiffReport",
    "FourierEmbedding",
    "LowPrecisionTimestepWarning",
    "SinusoidalEmbedding",
    "TimestepEmbedder",
    "TimestepMLP",
    "convention_from_diffusers",
    "convention_to_diffusers",
    "detect_convention",
    "diff_report",
    "frequencies",
    "frequencies_np",
    "get_convention",
    "get_timestep_embedding",
    "grid_embedding",
    "grid_positions",
    "layout_permutation",
    "patch_grid_embedding",
    "set_value_checks",
    "sinusoidal_embedding",
    "sinusoidal_embedding_np",
    "time_input",
    "video_grid_embedding",
]
