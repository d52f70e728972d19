"""A trained model: read back from a run (or an exported folder), exported, and sampled from.

Python use:

    model, cfg = load_model("runs/ddpm_mnist")                # EMA weights, eval mode
    x = generate(model, cfg, Runtime.create())                # [N, 1, 28, 28] in [-1, 1]

``timestep-embed sample RUN`` is [`sample_run`][timestep_embed.ddpm.sample_run]: new samples into files of their own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..checks import check_memory
from ..files import check_writable, save_npy
from ..nn import build_to_fit
from .checkpoint import RUN_CHECKPOINT, CheckpointError, load_checkpoint, strip_prefix
from .config import RunConfig, check_not_a_run_file, run_config
from .diffusion import schedule_from_config
from .runlog import save_samples_png
from .runtime import Runtime
from .samplers import sample
from .schema import ConfigError
from .unet import UNet

__all__ = ["generate", "describe_sampling", "load_model", "export_run", "sample_run", "progress_snapshot"]


def describe_sampling(cfg) -> str:
    """A one-line caption of how ``cfg.sample`` draws: sampler, steps, noise scale (where it applies), seed."""
    s = cfg.sample
    names = {"ddpm": "ancestral DDPM", "ddim": f"DDIM (eta {s.eta:g})", "dpm++2m": "DPM-Solver++(2M)", "heun": "Heun"}
    if s.sampler == "euler":
        return f"rectified flow, Euler, {s.steps} steps, seed {s.seed}"
    if s.sampler == "consistency":
        calls = f"{s.steps} model call" + ("s" if s.steps > 1 else "")
        return (
            f"consistency, {calls}, sigma {s.sigma_max:g} to {s.last_sigma:g}, noise x{s.noise_scale:g}, seed {s.seed}"
        )
    name = names[s.sampler]
    if s.spacing == "karras":
        return f"{name}, {s.steps} Karras noise levels from sigma {s.sigma_max:g}, seed {s.seed}"
    stochastic = s.sampler == "ddpm" or (s.sampler == "ddim" and s.eta > 0)
    noise = f", noise x{s.noise_scale:g}" if stochastic and s.noise_scale != 1 else ""
    return f"{name}, {s.steps} of {cfg.diffusion.num_timesteps} steps ({s.spacing}){noise}, seed {s.seed}"


@torch.no_grad()
def generate(model: nn.Module, cfg, rt: Runtime, progress: bool = False) -> torch.Tensor:
    """``cfg.sample.num_samples`` samples (float32 CPU ``[N, C, H, W]`` in [-1, 1]) with ``cfg.sample``'s
    sampler, steps and seed, in batches of ``cfg.sample.batch_size`` drawn from one generator, on
    ``rt.device`` under ``rt.autocast()``. ``cfg``: a ``RunConfig``."""
    s, m = cfg.sample, cfg.model
    image = m.in_channels * m.image_size**2 * 4  # bytes of one float32 sample: sizes refused before the allocator
    check_memory("sample.num_samples", s.num_samples, "samples (kept on the host)", image)
    check_memory("sample.batch_size", min(s.batch_size, s.num_samples), "samples of a batch", image, rt.device)
    schedule = schedule_from_config(cfg.diffusion)
    gen = torch.Generator(rt.device).manual_seed(s.seed)
    was_training = model.training
    model.eval()
    out = []
    with rt.autocast():
        for start in range(0, s.num_samples, s.batch_size):
            n = min(s.batch_size, s.num_samples - start)
            x = sample(
                model,
                (n, m.in_channels, m.image_size, m.image_size),
                schedule,
                sampler=s.sampler,
                steps=s.steps,
                spacing=s.spacing,
                sigma_max=s.sigma_max,
                last_sigma=s.last_sigma,
                eta=s.eta,
                noise_scale=s.noise_scale,
                generator=gen,
                prediction=cfg.diffusion.prediction,
                clip_x0=s.clip_x0,
                device=rt.device,
                progress=progress,
            )
            out.append(x.float().clamp(-1, 1).cpu())
    model.train(was_training)
    return torch.cat(out)


def load_model(path, time_embedder: nn.Module | None = None, ema: bool = True, device="cpu") -> tuple[UNet, RunConfig]:
    """``(UNet in eval mode, RunConfig)`` from a run folder, its ``checkpoint.safetensors``, or a folder
    written by [`export_run`][timestep_embed.ddpm.export_run].

    ``ema``: the EMA weights (what sampling uses) or the raw ones (run checkpoints only).
    ``time_embedder``: as in [`UNet`][timestep_embed.ddpm.UNet] (its state must match the checkpoint's).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run folder, run checkpoint or exported folder")
    file = path / RUN_CHECKPOINT if path.is_dir() else path
    cfg = run_config(path)
    if path.is_dir() and not file.is_file():  # an exported folder
        if not ema or time_embedder is not None:
            raise CheckpointError(f"{path}: an exported folder holds the EMA weights of the default UNet only")
        return UNet.from_pretrained(path).to(device), cfg
    tensors, _ = load_checkpoint(file)
    prefix = "ema." if ema else "model."
    try:  # checked on the meta device first: an edited model config is refused before it allocates
        model = build_to_fit(lambda: UNet(cfg.model, time_embedder), strip_prefix(tensors, prefix), "the UNet")
    except ValueError as exc:
        raise CheckpointError(f"{file}: the {prefix!r} weights do not fit the stored model config: {exc}") from exc
    return model.to(device).eval(), cfg


def export_run(run, out) -> Path:
    """The EMA weights of a run as a pretrained folder (``config.json`` with the run's config and the
    versions, ``model.safetensors``): a fraction of the run checkpoint, which also holds the raw
    weights, the optimizer and the RNG state. ``UNet.from_pretrained(out)`` and
    [`load_model`][timestep_embed.ddpm.load_model] read it."""
    run, out = Path(run), Path(out)
    folder = run if run.is_dir() else run.parent
    if out.resolve() == folder.resolve() or (out / RUN_CHECKPOINT).exists():
        raise ValueError(f"--out {str(out)!r} is a run folder: export into a folder of its own")
    model, cfg = load_model(run, ema=True)
    return model.save_pretrained(out, run_config=cfg)


def sample_run(
    run,
    overrides: Sequence[str] = (),
    out: str | Path | None = None,
    *,
    raw: bool = False,
    device: str = "auto",
    bf16: bool | str = "auto",
    overwrite: bool = False,
    progress: bool = True,
) -> tuple[Path, Path]:
    """Draw samples from a run folder (or its checkpoint, or an exported folder) with ``sample.*``
    overrides into ``PREFIX.npy`` and a captioned ``PREFIX.png``; returns their paths.

    ``out``: the prefix; default ``<run>/samples-<sampler>-<steps>-seed<seed>`` (``-raw`` added for the
    raw weights), never the run's own scored ``samples.*``; a folder (one that exists, or a name ending in ``/``)
    gets the default names inside it. Existing files are refused unless ``overwrite``,
    also when another sampling writes the same name meanwhile (the write never replaces a file then).
    """
    bad = [o for o in overrides if not str(o).startswith("sample.")]
    if bad:
        raise ConfigError(f"only sample.* overrides apply to sampling, got {bad[0]!r}")
    rt = Runtime.create(device, bf16)
    model, cfg = load_model(run, ema=not raw, device=rt.device)
    cfg = cfg.with_overrides(overrides)
    src, s = Path(run), cfg.sample
    folder = src if src.is_dir() else src.parent
    default = f"samples-{s.sampler}-{s.steps}-seed{s.seed}" + ("-raw" if raw else "")
    if out is None or str(out).endswith(("/", os.sep)) or Path(out).is_dir():
        prefix = (folder if out is None else Path(out)) / default
    else:
        prefix = Path(out)
    npy, png = prefix.parent / (prefix.name + ".npy"), prefix.parent / (prefix.name + ".png")
    for path in (npy, png):  # even with --overwrite: a run's scored samples stay those its metrics are of
        check_not_a_run_file(path, "--out")
    existing = [p for p in (npy, png) if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace it, or choose another --out")
    check_writable(prefix.parent, "the samples' folder")  # before the sampling, not after it
    x = generate(model, cfg, rt, progress=progress)
    save_npy(npy, x.numpy(), exclusive=not overwrite)  # of two samplings racing for one name, one wins
    weights = "raw weights" if raw else "EMA weights"
    caption = f"{min(len(x), 100)} of {len(x)} samples, {weights}, {describe_sampling(cfg)}"
    save_samples_png(x[:100], png, caption=caption)
    return npy, png


def progress_snapshot(ema: nn.Module, cfg: RunConfig, rt: Runtime, n: int = 16, steps: int = 20):
    """A quick look during training: ``n`` EMA samples with ``steps`` ancestral (flow: Euler) steps, or the run's
    own consistency sampler, from their own generator (``sample.seed``), so the training's random stream is
    untouched; (samples, how)."""
    if cfg.sample.sampler == "consistency":
        quick = cfg.replace("sample", num_samples=n, batch_size=n)
    else:
        sampler = "euler" if cfg.diffusion.prediction == "flow" else "ddpm"
        steps = min(steps, cfg.diffusion.num_timesteps)
        quick = cfg.replace("sample", sampler=sampler, num_samples=n, batch_size=n, steps=steps, spacing="evenly")
    return generate(ema, quick, rt), describe_sampling(quick)
