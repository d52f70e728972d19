"""The theory on real numbers: properties, frequency coverage, naive schemes, the convention detector,
the diff report, figures and the benchmark timer. Imports the core and ``nn``; matplotlib only lazily."""

from .coverage import Coverage, CoverageWarning, frequency_coverage
from .detect import Detection, detect_convention
from .diff_report import DiffReport, diff_report
from .naive import naive_scheme_table
from .properties import (
    Bounds,
    Uniqueness,
    bounds,
    distance_by_offset,
    dot_by_offset,
    position_uniqueness,
    relative_identity,
    relative_identity_error,
    rotation_error,
    rotation_matrix,
    uniqueness,
    wavelengths,
)

__all__ = [
    "Bounds",
    "Coverage",
    "CoverageWarning",
    "Detection",
    "DiffReport",
    "Uniqueness",
    "bounds",
    "detect_convention",
    "diff_report",
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
]
