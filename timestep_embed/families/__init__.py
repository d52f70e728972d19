"""The model families this package knows, as data: each family's timestep contract and checkpoint
layouts together, one module per kind (``unets``, ``edm``, ``dit``, ``mmdit``, ``flux``, ``cogview``,
``hunyuan``, ``wan``, ``video``), one schema and one ordered registry. Nothing here imports diffusers,
``nn`` or ``interop``: ``nn`` matches the layouts, the interop tools read the contracts."""

from .edm import edm_vp_c_noise
from .registry import CONTRACTS, FAMILIES, LAYOUT_BY_CLASS, LAYOUTS, contract_for, get_contract, get_family, one_model
from .schema import KNOWN_PREFIXES, Family, Layout, MLPKeys, TimestepContract

__all__ = ["Family", "TimestepContract", "Layout", "MLPKeys", "KNOWN_PREFIXES", "FAMILIES", "CONTRACTS", "LAYOUTS"]
__all__ += ["LAYOUT_BY_CLASS", "get_contract", "get_family", "contract_for", "edm_vp_c_noise", "one_model"]
