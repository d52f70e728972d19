"""Train a DDPM on MNIST, then sample and score it: ``timestep-embed train`` (the default MNIST run).

Read top to bottom: the loop's helpers (learning rate, optimizer, EMA, budget, log, progress snapshots),
the loop ([`train_loop`][timestep_embed.ddpm.train_loop], in commented stanzas), the whole run
([`run_training`][timestep_embed.ddpm.run_training]), and ``timestep-embed distill``
([`distill_run`][timestep_embed.ddpm.distill_run]: the same run, starting from a trained one, with the consistency
objective). With ``config.py``, ``checkpoint.py`` and ``runfolder.py`` that is
everything a run does. Python use:

    from timestep_embed.ddpm import run_training
    metrics = run_training("mnist", "runs/x", overrides=["train.minutes=2"])
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from ..files import atomic_write_bytes, save_npy, versions
from .checkpoint import RUN_CHECKPOINT, load_training_state, save_training_state
from .config import DEFAULT_CONFIG, RunConfig, TrainConfig
from .consistency import ConsistencyConfig, consistency_loss
from .data import load_mnist, random_shifts
from .diffusion import schedule_from_config, training_loss
from .evaluate import score
from .runfolder import kept_results, run_config_for, starting
from .runlog import TrainingDiverged, TrainingLog, save_loss_curve, save_samples_png
from .runtime import GraphedStep, Runtime, broadcast_float, cleanup, set_lr, setup, signals_held, torch_older_than
from .schema import ConfigError, to_dict
from .solvers import karras_levels
from .trained import describe_sampling, generate, load_model, progress_snapshot
from .unet import UNet, check_fits

__all__ = [
    "Callback",
    "lr_at",
    "adamw",
    "update_ema",
    "TrainingDiverged",
    "compiled",
    "train_loop",
    "run_training",
    "DISTILL_DEFAULTS",
    "distill_config",
    "distill_run",
]

log = logging.getLogger(__name__)
# Called after every step with (step, model, ema, loss); returning True stops the run as Ctrl-C would. The loss is
# the step's 0-d tensor, on the device: reading it (float(loss)) waits for the device, so read it only when needed;
# with train.compile: step-graph the next step overwrites it (keep a clone, not the tensor).
Callback = Callable[[int, nn.Module, nn.Module, torch.Tensor], "bool | None"]


def lr_at(progress: float, step: int, t: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then cosine from lr to lr*min_lr_ratio as progress 0 -> 1."""
    warm = min(1.0, (step + 1) / max(1, t.warmup_steps))
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return t.lr * warm * (t.min_lr_ratio + (1 - t.min_lr_ratio) * cos)


def adamw(params, lr: float, *, weight_decay: float = 0.0, betas=(0.9, 0.999)) -> torch.optim.AdamW:
    """``torch.optim.AdamW``, with its fused kernel where this torch has one for the parameters' device
    (CUDA; CPU since torch 2.4): the same update (rounding aside) and state dict as the default
    per-tensor loop, in one kernel (docs/benchmarks.md, the training step)."""
    params = list(params)  # a generator would be spent by the first attempt
    try:
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # torch < 2.4 on CPU, or a device without the kernel: refused at construction
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)


def adamw_steps(opt: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> int:
    """How many updates the optimizer has made (AdamW's ``step`` of the first parameter it updates; 0 before the
    first): one host read, when training stops."""
    steps = (opt.state[p]["step"] for p in params if "step" in opt.state.get(p, {}))
    return int(next(steps, 0))


@torch.no_grad()
def update_ema(ema: nn.Module | Sequence[torch.Tensor], model: nn.Module | Sequence[torch.Tensor], step: int,
               max_decay: float) -> None:  # fmt: skip
    """EMA of the weights with warmup, decay ``min(max_decay, (1 + n) / (10 + n))`` at step n, so a short
    run averages its last part rather than its random start. ``ema`` and ``model``: the modules, or lists of
    their parameters (the loop keeps those: walking a UNet's modules for its parameters takes longer than a
    step's launches on a GPU). The update is ``torch.optim.swa_utils``' EMA over the parameter lists (one foreach
    lerp: a few kernel launches instead of one per tensor)."""
    decay = min(max_decay, (1 + step) / (10 + step))
    targets = list(ema.parameters()) if isinstance(ema, nn.Module) else list(ema)
    sources = list(model.parameters()) if isinstance(model, nn.Module) else list(model)
    get_ema_multi_avg_fn(decay)(targets, sources, None)


class Budget:
    """``train.steps``, or ``train.minutes`` on the wall clock since training began, plus what the run
    had used before a resume. Rank 0's clock decides on every rank: with several processes it is broadcast
    (a host sync) every ``train.log_every`` steps, and holds in between."""

    def __init__(self, t: TrainConfig, rt: Runtime, elapsed: float):
        self.t, self.rt, self.before, self.start = t, rt, elapsed, time.time()
        self.shared: tuple[int, float] | None = None  # (step, progress) of the last broadcast

    @property
    def elapsed(self) -> float:
        return self.before + time.time() - self.start

    def progress(self, step: int) -> float:
        """How much of the budget is used, 0 -> 1 (it also drives the learning-rate decay)."""
        if self.t.steps:
            return step / self.t.steps
        if self.rt.world_size == 1:
            return self.elapsed / self.t.seconds
        # every rank asks at the same steps, so they broadcast together; a run may end up to log_every steps late
        if self.shared is None or step - self.shared[0] >= self.t.log_every:
            self.shared = (step, broadcast_float(self.elapsed / self.t.seconds, self.rt))
        return self.shared[1]


def compiled(model: nn.Module, option: bool | str) -> nn.Module:
    """``train.compile``: ``model`` itself (False, and ``"step-graph"``, which captures the whole step instead:
    [`GraphedStep`][timestep_embed.ddpm.runtime.GraphedStep]), ``torch.compile(model)`` (True: inductor's fused
    kernels), or with ``mode="reduce-overhead"`` (``"cudagraphs"``: those kernels replayed as CUDA graphs, one launch a
    graph; on other devices the same as True). The compiled module shares the weights; the first steps compile."""
    if option is False or option == "step-graph":
        return model
    return torch.compile(model, mode="reduce-overhead" if option == "cudagraphs" else None)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- the loop
def train_loop(
    cfg: RunConfig,
    rt: Runtime,
    model: UNet,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    callback: Callback | None = None,
    teacher: nn.Module | None = None,
) -> tuple[nn.Module, dict]:
    """Train ``model`` (and its EMA) within ``cfg.train``'s budget; returns (ema_model, stats).

    The objective: denoising ([`training_loss`][timestep_embed.ddpm.training_loss]), or with ``cfg.consistency``
    [`consistency_loss`][timestep_embed.ddpm.consistency.consistency_loss] (``teacher``: the model whose ODE
    ``consistency.method`` cd distils). Writes ``checkpoint.safetensors``, ``log.jsonl`` and the progress snapshots in
    ``out_dir`` (rank 0). ``callback``: see `Callback`. Ctrl-C saves a checkpoint and stops. With
    ``cfg.model.augment`` the images are shifted ([`random_shifts`][timestep_embed.ddpm.data.random_shifts]) and the
    UNet told; consistency training shifts nothing and leaves ``model.shift_embed`` frozen (``requires_grad``
    False).
    """
    t, d, c, path = cfg.train, cfg.diffusion, cfg.consistency, out_dir / RUN_CHECKPOINT
    # Data: the whole training split sits on the device; each rank samples from its own shard.
    x_all, _ = load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)
    data, batch = x_all[rt.rank :: rt.world_size].to(rt.device), t.batch_size // rt.world_size
    schedule = schedule_from_config(d).to(rt.device)  # its tables on the device: a step sends nothing from the host
    # Model, EMA copy (float32, never trained), optimizer, and the generator behind every random draw.
    torch.manual_seed(t.seed + rt.rank)  # the global RNG, dropout's masks: each rank its own (rank 0's, the seed)
    augment = cfg.model.augment if c is None else 0.0  # consistency tuning does not shift: it distils the ODE as is
    shift_embed = getattr(model, "shift_embed", None)  # the UNet's shift input; any other denoiser has none
    if augment and shift_embed is None:
        raise ConfigError(
            f"model.augment = {augment} tells the model each image's shift: {type(model).__name__} has no shift "
            "input (shift_embed; the UNet of such a config has); set model.augment=0"
        )
    if shift_embed is not None and not augment:
        log.info("consistency training shifts no image: model.augment = %s keeps the UNet's shift input, frozen",
                 cfg.model.augment)  # fmt: skip
        shift_embed.requires_grad_(False)  # told no shift, it gets no gradient, which DDP would refuse
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = adamw(model.parameters(), t.lr, weight_decay=t.weight_decay, betas=(0.9, t.adam_beta2))
    gen = torch.Generator(rt.device).manual_seed(t.seed * 1000 + rt.rank)
    # Rank 0 writes the checkpoint, so its generators are rank 0's: the others go on from seeds of their own.
    step, elapsed = load_training_state(path, model, ema, opt, gen, own_generators=rt.is_main) if resume else (0, 0.0)
    start_step, budget = step, Budget(t, rt, elapsed)
    ddp = model if rt.world_size == 1 else nn.parallel.DistributedDataParallel(model)
    # DDP compares the strides of size-1 dims too: a 1x1 conv's grad laid out (C, 1, C, C) warns every step
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    net = compiled(ddp, t.compile)  # the same module (and weights) behind torch.compile's kernels
    params, ema_params = list(model.parameters()), list(ema.parameters())  # walked once, not every step

    def one_step(stage: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch, loss, backward, clip, AdamW: (loss, gradient norm), both on the device."""
        # Batch: x0 from the data; t and eps are drawn inside the loss (Ho et al. Algorithm 1).
        x0 = data[torch.randint(0, len(data), (batch,), generator=gen, device=rt.device)]
        denoiser: Callable[..., torch.Tensor] = net
        if augment:  # model.augment: shifted images, and the UNet told the shift (sampling asks for none)
            x0, shift = random_shifts(x0, augment, gen)
            denoiser = functools.partial(net, shift=shift)
        if t.compile == "cudagraphs":
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the last step's graph outputs are spent
        with rt.autocast():
            if c is None:
                loss = training_loss(denoiser, x0, schedule, generator=gen, prediction=d.prediction,
                                     min_snr_gamma=d.min_snr_gamma, lognormal=d.lognormal)  # fmt: skip
            else:  # consistency: its r(t) moves towards t stage by stage
                loss = consistency_loss(net, x0, schedule, c, stage, teacher=teacher, generator=gen,
                                        prediction=d.prediction)  # fmt: skip
        # Backward, clip, step. DDP averages the gradients over ranks during backward().
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(params, t.grad_clip)
        with signals_held():  # Ctrl-C inside AdamW's update (its step count, then the weights) lands after it
            opt.step()
        return loss.detach(), grad_norm

    # train.compile: step-graph replays one_step as one CUDA graph (run_training checks: one process on CUDA)
    run_step = GraphedStep(one_step, opt, gen) if t.compile == "step-graph" else one_step
    done = budget.progress(step) >= 1  # a finished run resumed trains nothing more
    if done:  # (no progress bar past its end)
        log.info("step %d: the run is past its budget (%s): nothing more to train", step,
                 f"train.steps = {t.steps}" if t.steps else f"train.minutes = {t.minutes}")  # fmt: skip
    logbook = TrainingLog(out_dir if rt.is_main else None, t, step, elapsed, show=progress and not done)
    last_checkpoint, interrupted = time.time(), False
    lr, grad_norm = 0.0, torch.zeros(())  # the last step's, for the log's last line
    averaged = step  # the steps the EMA has taken in
    try:
        try:
            while not done:
                # Learning rate: linear warmup, then cosine decay over the budget (steps or the clock).
                used = budget.progress(step)
                lr = lr_at(used, step, t)
                set_lr(opt, lr)
                # The step; consistency's r(t) moves towards t in c.stages stages over the budget.
                loss, grad_norm = run_step(0 if c is None else min(int(used * c.stages), c.stages - 1))
                step += 1
                # EMA with warmup, so a short run averages its last part rather than its random start.
                update_ema(ema_params, params, step - 1, t.ema_decay)
                averaged = step
                # The loss stays on the device; the log reads it (and the gradient norm) at its lines only.
                logbook.step(step, loss, lr, grad_norm, budget.elapsed)
                # The budget; a look at the EMA every snapshot_every steps; a checkpoint every checkpoint_minutes.
                done = budget.progress(step) >= 1
                if callback is not None and callback(step, model, ema, loss):
                    break
                if rt.is_main and t.snapshot_every and step % t.snapshot_every == 0:
                    look, how = progress_snapshot(ema, cfg, rt)
                    caption = f"step {step}, EMA weights, {len(look)} samples, {how}"
                    save_samples_png(look, out_dir / f"snapshot_{step:06d}.png", nrow=8, caption=caption)
                    logbook.image("progress", look, step)
                if rt.is_main and not done and time.time() - last_checkpoint > 60 * t.checkpoint_minutes:
                    logbook.read(step, grad_norm, new_window=False)  # a checkpoint only of a finite loss
                    save_training_state(path, cfg.to_dict(), model, ema, opt, gen, step, budget.elapsed)
                    last_checkpoint = time.time()
        except KeyboardInterrupt:
            interrupted = True
            # A signal lands wherever Python is: a step whose AdamW update is done is finished (counted, averaged)
            if adamw_steps(opt, params) > step:
                step += 1
            if averaged < step:
                update_ema(ema_params, params, step - 1, t.ema_decay)
            if rt.is_main and step > start_step:
                log.warning("interrupted at step %d: saving %s", step, path)
        logbook.last_line(step, lr, grad_norm, budget.elapsed)  # the steps since the last line: each logged once
    finally:
        logbook.close()
    final_loss = logbook.read(step)[0] if step > start_step else None  # the last line's: the last steps' mean
    if rt.is_main and (step > start_step or not path.exists() and not interrupted):
        save_training_state(path, cfg.to_dict(), model, ema, opt, gen, step, budget.elapsed)
    stats = {
        "resumed_at": start_step,
        "train_steps": step,
        "train_seconds": round(budget.elapsed, 2),
        "steps_per_s": (step - start_step) / max(budget.elapsed - elapsed, 1e-9),
        "final_loss": final_loss,
        "interrupted": interrupted,
        "finished": done and not interrupted,
    }
    return ema, stats


# ----------------------------------------------------------------------------- the whole run
def run_training(
    config: RunConfig | str | Path | dict | None = DEFAULT_CONFIG,
    out_dir: str | Path | None = None,
    time_embedder: nn.Module | None = None,
    overrides=(),
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    callback: Callback | None = None,
    teacher: nn.Module | None = None,
) -> dict:
    """Train, sample (EMA weights), score; write the run folder; return the metrics dict.

    ``config``: a RunConfig, a shipped config's name, a YAML path or a dict (``overrides`` applied).
    ``time_embedder``: optional module t [B] -> [B, model.emb_dim] replacing the UNet's default.
    ``teacher``: a trained UNet of the config's shape: the run starts from its weights (and, with
    ``consistency.method`` cd, distils its ODE); [`distill_run`][timestep_embed.ddpm.distill_run] passes it.
    The run folder (see [`runfolder`][timestep_embed.ddpm.runfolder]) is never written into if it holds a run,
    unless ``resume`` (continue it, by default with its own config.yaml; only changes that leave the
    trained model the same are accepted) or ``overwrite`` (its run's files are removed first). A resume
    redoes exactly what is missing or no longer matches the config: training to the budget, the
    samples, the loss curve, the scores.
    """
    cfg = run_config_for(config, out_dir, overrides, resume)
    if out_dir is not None and not str(out_dir).strip():
        raise ValueError("out_dir = '': expected a folder for the run (e.g. runs/x)")
    out, start = Path(out_dir if out_dir is not None else cfg.train.out_dir), time.time()
    check_fits(load_mnist(cfg.data.source, "train", cfg.data.pad_to_32)[0], cfg.model)  # fails before any write
    if cfg.sample.spacing == "karras":  # the sampler's own check of its noise levels, now, not after the training
        try:
            karras_levels(schedule_from_config(cfg.diffusion), cfg.sample.steps, sigma_max=cfg.sample.sigma_max)
        except ValueError as exc:
            raise ConfigError(
                f"sample.sigma_max = {cfg.sample.sigma_max:g} with sample.spacing = 'karras': {exc}"
            ) from None
    if cfg.eval.enabled:  # what the scores need, found now, not after the training
        if cfg.sample.num_samples < 2:
            raise ConfigError(
                f"sample.num_samples = {cfg.sample.num_samples}: the run's evaluation needs at least 2 samples for "
                "its statistics; set eval.enabled=false to sample fewer"
            )
        load_mnist(cfg.data.source, "heldout", cfg.data.pad_to_32)  # the held-out digits
    rt = setup(cfg.train.device, cfg.train.bf16, cfg.train.threads)
    try:
        if cfg.train.batch_size % rt.world_size:
            raise ValueError(f"train.batch_size = {cfg.train.batch_size}: not divisible by {rt.world_size} processes")
        old_torch = torch_older_than(2, 4)  # no generators of ours in graphs
        if cfg.train.compile == "step-graph" and (rt.device.type != "cuda" or rt.world_size > 1 or old_torch):
            raise ConfigError(f"train.compile = 'step-graph' captures the training step as a CUDA graph: it needs one "
                              f"process on CUDA and torch >= 2.4, not {rt.world_size} on {rt.device.type} with torch "
                              f"{torch.__version__}; train.compile=false trains here")  # fmt: skip
        torch.manual_seed(cfg.train.seed)  # model init: identical on every rank
        model = UNet(cfg.model, time_embedder).to(rt.device)
        if teacher is not None:
            model.load_state_dict(teacher.state_dict())
            teacher = teacher.to(rt.device).requires_grad_(False).eval()
        n_params = sum(p.numel() for p in model.parameters())
        # Until the first step is trained, a failure leaves the folder as it was (runfolder.starting).
        with starting(out, cfg, resume=resume, overwrite=overwrite, main=rt.is_main) as begun:
            if rt.is_main:
                log.info("UNet %.2fM parameters on %s x%d, bf16=%s -> %s", n_params / 1e6, rt.device, rt.world_size,
                         rt.bf16, out)  # fmt: skip
                if not resume:
                    cfg.save(out / "config.yaml")
            ema, stats = train_loop(cfg, rt, model, out, resume=resume, progress=progress,
                                    callback=begun.watch(callback), teacher=teacher)  # fmt: skip
            if stats["interrupted"] and not resume and stats["train_steps"] == 0:
                raise KeyboardInterrupt  # before the first step (a compile, say): the folder is put back as it was
            begun.trained()  # trained, or a checkpoint of where it stopped: the folder holds this run
            metrics = {**stats, "num_params": n_params, "device": str(rt.device), "world_size": rt.world_size}
            metrics.update(bf16=rt.bf16, out_dir=str(out), versions=versions())
            if rt.is_main and stats["finished"]:
                try:
                    metrics = _finish(ema, cfg, rt, out, metrics, progress)
                except KeyboardInterrupt:
                    log.warning("interrupted after training; the checkpoint is complete: --resume samples, scores")
                    raise
                metrics["total_seconds"] = round(time.time() - start, 2)
    finally:
        cleanup()
    return metrics


def _finish(ema: nn.Module, cfg: RunConfig, rt: Runtime, out: Path, metrics: dict, progress: bool) -> dict:
    """The run's samples (``samples.npy``, ``samples.png``), loss curve and scores (``metrics.json``), each
    made again unless what is on disk was made by this model with this config; then ``config.yaml``."""
    done, samples = kept_results(out, cfg, metrics["train_steps"])
    if done is not None and samples is not None and (out / "loss_curve.png").is_file():
        log.info("%s is complete: nothing left to do", out)
        cfg.save(out / "config.yaml")
        return {**done, "interrupted": False, "finished": True}
    if samples is None:
        t0 = time.perf_counter()
        samples = generate(ema, cfg, rt, progress=progress)
        metrics["sample_seconds"] = round(time.perf_counter() - t0, 2)
        save_npy(out / "samples.npy", samples.numpy())
        caption = f"{len(samples[:100])} of {len(samples)} samples, EMA weights, {describe_sampling(cfg)}"
        save_samples_png(samples[:100], out / "samples.png", caption=caption)
    gamma, c = cfg.diffusion.min_snr_gamma, cfg.consistency
    if c is not None:
        title = f"consistency loss ({c.method}, pseudo-Huber / (t - r))"
    else:
        what = f"Min-SNR-{gamma:g} weighted MSE" if gamma is not None else "MSE"
        title = f"training loss ({what}, {cfg.diffusion.prediction})"
    save_loss_curve(out / "log.jsonl", out / "loss_curve.png", title)
    if cfg.eval.enabled:  # the mean of eval.samplings samplings, samples.npy the first (its seed sample.seed)
        t0 = time.perf_counter()
        seeds = range(cfg.sample.seed + 1, cfg.sample.seed + cfg.eval.samplings)
        more = [generate(ema, cfg.replace("sample", seed=seed), rt) for seed in seeds]
        metrics.update(score(cfg, [samples, *more]))
        metrics["eval_seconds"] = round(time.perf_counter() - t0, 2)
    metrics["config"] = cfg.to_dict()  # what kept_results compares on a resume
    atomic_write_bytes(out / "metrics.json", (json.dumps(metrics, indent=2, default=str) + "\n").encode())
    cfg.save(out / "config.yaml")  # now it describes what the folder holds
    return metrics


# ----------------------------------------------------------------------------- distill: a trained run, few steps
# What a distillation changes in the teacher's config before the user's overrides (docs/ddpm.md, few steps):
# 6 minutes at a quarter of the training learning rate (5e-4: FD 14.5 against 17.4-18.0 for 2e-4 on one teacher,
# never worse on two more), no warmup (the student starts trained), no dropout (a teacher trained with 0.3 tuned
# to 35.2 without, 47.2 with it), and a sampler of four consistency steps from the largest tuned noise level.
DISTILL_DEFAULTS = (
    "train.minutes=6",
    "train.lr=5e-4",
    "train.warmup_steps=0",
    "train.snapshot_every=0",
    "model.dropout=0",
    "sample.sampler=consistency",
    "sample.steps=4",
    "sample.sigma_max=10",
    "sample.last_sigma=0.5",
    "sample.noise_scale=0.9",
)
# The student is the teacher's UNet: its weights, data and diffusion stay; dropout (no weights) is the tuning's own.
SETTABLE_SECTIONS = ("train.", "sample.", "eval.", "consistency.")
SETTABLE = (*SETTABLE_SECTIONS, "model.dropout=")


def distill_config(teacher: RunConfig, overrides: Sequence[str] = ()) -> RunConfig:
    """The distillation's config: ``teacher``'s, with a ``consistency`` section (its defaults unless the teacher's
    config has one), ``DISTILL_DEFAULTS``, then ``overrides``."""
    fixed = [o for o in overrides if not str(o).startswith(SETTABLE)]
    if fixed:
        raise ConfigError(
            f"{fixed[0]!r}: a distillation keeps the teacher's model, data and diffusion; it takes "
            f"overrides of {', '.join(k + '*' for k in SETTABLE_SECTIONS)} and model.dropout"
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
