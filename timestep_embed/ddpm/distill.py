"""A trained run made a few-step generator: ``timestep-embed distill RUN --out-dir OUT``.

The student starts as RUN's EMA weights and trains with the consistency objective
([`consistency`][timestep_embed.ddpm.consistency]) for ``train.minutes`` more; OUT is a run folder like any other
(checkpoint, log, samples, scores), and ``timestep-embed sample OUT`` draws from it with the consistency sampler in
``sample.steps`` model calls. The settings are RUN's config with [`DISTILL_DEFAULTS`][timestep_embed.ddpm.distill.DISTILL_DEFAULTS]
and then the user's ``train.*``, ``sample.*``, ``eval.*`` and ``consistency.*`` overrides on top; the model,
the data and the diffusion stay the teacher's. Python use:

    from timestep_embed.ddpm import distill_run
    metrics = distill_run("runs/ddpm_mnist", "runs/distilled", ["consistency.method=cd"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torch import nn

from .config import RunConfig
from .consistency import ConsistencyConfig
from .schema import ConfigError, to_dict
from .train import Callback, run_training
from .trained import load_model

__all__ = ["DISTILL_DEFAULTS", "distill_config", "distill_run"]

# What a distillation changes in the teacher's config before the user's overrides (docs/ddpm.md, few steps):
# 6 minutes at a tenth of the training learning rate, no warmup (the student starts trained), and a sampler of
# four consistency steps from the largest tuned noise level.
DISTILL_DEFAULTS = (
    "train.minutes=6",
    "train.lr=2e-4",
    "train.warmup_steps=0",
    "train.grid_every=0",
    "sample.sampler=consistency",
    "sample.steps=4",
    "sample.sigma_max=10",
    "sample.last_sigma=0.5",
    "sample.noise_scale=0.9",
)
SETTABLE = ("train.", "sample.", "eval.", "consistency.")


def distill_config(teacher: RunConfig, overrides: Sequence[str] = ()) -> RunConfig:
    """The distillation's config: ``teacher``'s, with a ``consistency`` section (its defaults unless the teacher's
    config has one), [`DISTILL_DEFAULTS`][timestep_embed.ddpm.distill.DISTILL_DEFAULTS], then ``overrides``."""
    fixed = [o for o in overrides if not str(o).startswith(SETTABLE)]
    if fixed:
        raise ConfigError(
            f"{fixed[0]!r}: a distillation keeps the teacher's model, data and diffusion; it takes "
            f"overrides of {', '.join(k + '*' for k in SETTABLE)}"
        )
    if teacher.diffusion.prediction == "flow":
        raise ConfigError("diffusion.prediction = 'flow': distill tunes eps- and v-prediction runs only")
    data = teacher.to_dict()
    data["consistency"] = data.get("consistency") or to_dict(ConsistencyConfig())
    # two steps, so that a budget in the overrides (train.steps=...) replaces the default one (train.minutes)
    return RunConfig.load(data).with_overrides(DISTILL_DEFAULTS).with_overrides(overrides)


def distill_run(
    run: str | Path,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    callback: Callback | None = None,
) -> dict:
    """Distil the run folder (or checkpoint, or exported folder) ``run`` into the run folder ``out_dir``: train,
    sample, score as [`run_training`][timestep_embed.ddpm.run_training] does (the same folder rules, ``resume`` and
    ``overwrite``); returns its metrics dict."""
    if Path(out_dir).resolve() == Path(run).resolve():
        raise ValueError(f"--out-dir {str(out_dir)!r} is the teacher's folder: distil into a folder of its own")
    teacher: nn.Module
    teacher, teacher_cfg = load_model(run, ema=True)
    cfg = distill_config(teacher_cfg, overrides)
    cfg = cfg.replace("train", out_dir=str(out_dir))
    return run_training(
        cfg, out_dir, resume=resume, overwrite=overwrite, progress=progress, callback=callback, teacher=teacher
    )
