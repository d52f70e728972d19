"""The tools that bridge to real codebases: tracing and verifying ports (with the causes of a
difference), the precision of a time path along a real sampling run, patching diffusers models and
moving weights both ways, the comparison report, and ``inspect`` of a checkpoint. The contracts they
check against are the families' ([`timestep_embed.families`][timestep_embed.families]), re-exported here.

The only place that imports diffusers, lazily (inside functions): ``import timestep_embed.interop``
works without it; calling into diffusers raises an ImportError that says
``pip install 'timestep-embed[diffusers]'``."""

from ..families import CONTRACTS, TimestepContract, contract_for, edm_vp_c_noise, get_contract
from .compare import run_comparison, write_report
from .export import export_to_diffusers, to_diffusers_modules
from .inspect import Inspection, inspect_checkpoint
from .patch import (
    PATCHABLE,
    SUPPORTED_UNETS,
    convention_from_unet_config,
    embedder_from_diffusers_unet,
    fourier_from_diffusers,
    mlp_from_diffusers,
    patch_diffusers_model,
    require_diffusers,
    sinusoid_from_diffusers,
)
from .precision import SchedulePrecision, schedule_precision
from .schedules import SCHEDULES, Schedule, schedule_for
from .trace import STAGE_KINDS, Stage, TimePathTrace, trace_stages, trace_time_path
from .verify import PortVerdict, verify_port

__all__ = [
    "TimestepContract",
    "CONTRACTS",
    "get_contract",
    "contract_for",
    "edm_vp_c_noise",
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
    "STAGE_KINDS",
    "Stage",
    "TimePathTrace",
    "trace_time_path",
    "trace_stages",
    "SchedulePrecision",
    "schedule_precision",
    "Schedule",
    "SCHEDULES",
    "schedule_for",
    "PortVerdict",
    "verify_port",
    "run_comparison",
    "write_report",
    "Inspection",
    "inspect_checkpoint",
]
