"""A small DDPM on MNIST that trains on a laptop CPU: UNet, diffusion math, samplers, data, configs,
checkpoints, the training loop, consistency distillation, sampling, the evaluator and the run's log and pictures.

Nothing outside this package (and the CLI) imports it: the library works without it. Its public names
are re-exported here, so code that uses it does not depend on the file layout:

    from timestep_embed.ddpm import RunConfig, run_training, load_model, generate, score
"""

from ..files import Busy
from .checkpoint import CheckpointError
from .classifier import ClassifierConfig, load_classifier
from .config import (
    DEFAULT_CONFIG,
    DataConfig,
    DiffusionConfig,
    EvalConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
    describe_keys,
    run_config,
    shipped_configs,
)
from .consistency import ConsistencyConfig, consistency_function, consistency_loss
from .data import DataError, load_mnist
from .diffusion import Schedule, make_schedule, schedule_from_config, training_loss
from .evaluate import evaluate_samples, format_report, frechet_distance, score
from .runlog import TrainingDiverged
from .runtime import Runtime
from .schema import ConfigError
from .train import Callback, adamw, distill_config, distill_run, run_training, train_loop, update_ema
from .trained import describe_sampling, export_run, generate, load_model, sample_run
from .unet import UNet, UNetConfig

__all__ = [
    # configs and the errors of bad input
    "RunConfig", "DataConfig", "UNetConfig", "DiffusionConfig", "TrainConfig", "SampleConfig", "EvalConfig",
    "ClassifierConfig", "ConsistencyConfig", "DEFAULT_CONFIG", "describe_keys", "shipped_configs", "run_config",
    "ConfigError", "CheckpointError", "DataError", "Busy",
    # the model, the diffusion math, the data and the evaluator
    "UNet", "Runtime", "Schedule", "make_schedule", "schedule_from_config", "training_loss", "consistency_function",
    "consistency_loss", "load_mnist", "load_classifier", "evaluate_samples", "score", "frechet_distance",
    "format_report",
    # a run: train, distil, sample, load, export
    "Callback", "adamw", "update_ema", "TrainingDiverged", "train_loop", "run_training", "distill_config",
    "distill_run", "generate", "describe_sampling", "load_model", "export_run", "sample_run",
]  # fmt: skip
