"""The bridge to diffusers: patching its UNets, moving weights both ways, the comparison report.

The only place that imports diffusers, lazily (inside functions): ``import timestep_embed.interop``
works without it; calling into diffusers raises an ImportError that says
``pip install 'timestep-embed[diffusers]'``."""

from .compare import run_comparison, write_report
from .patch import (
    PATCHABLE,
    SUPPORTED_UNETS,
    convention_from_unet_config,
    embedder_from_diffusers_unet,
    export_to_diffusers,
    fourier_from_diffusers,
    mlp_from_diffusers,
    patch_diffusers_model,
    require_diffusers,
    sinusoid_from_diffusers,
    to_diffusers_modules,
)

__all__ = [
    "PATCHABLE",
    "SUPPORTED_UNETS",
    "require_diffusers",
    "convention_from_unet_config",
    "sinusoid_from_diffusers",
    "fourier_from_diffusers",
    "mlp_from_diffusers",
    "embedder_from_diffusers_unet",
    "patch_diffusers_model",
    "to_diffusers_modules",
    "export_to_diffusers",
    "run_comparison",
    "write_report",
]
