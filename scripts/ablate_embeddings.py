#!/usr/bin/env python
"""Ablation: the small MNIST DDPM trained with each time embedding, everything else equal.

    python scripts/ablate_embeddings.py --quick            # 12 variants x 1 seed, a small budget
    python scripts/ablate_embeddings.py --seeds 0 1 2      # full: the default config, 1000 updates each

Every variant gets the same config, seed, data and number of updates (``train.steps``; a wall-clock
budget would favour cheap embedders). Only ``UNet.time_embedder`` changes (``t [B] -> [B, emb_dim]``):

* ``adm``: sinusoid concat [cos | sin], then the MLP (the default); ``vaswani``: interleaved [sin, cos, ...];
* ``sine_only``: the same width of sines only (twice as many frequencies, no cosines);
* ``one_pair``: one sin/cos pair at frequency 1 (wraps every 2 pi steps: t and t + 710 nearly coincide);
* ``raw_t``: the scalar index t straight into the MLP; ``lookup``: a learned table of T rows;
* ``fourier``: Gaussian Fourier features of t / T (scale 16); ``none``: zeros (the model never sees t);
* ``adm_v``, ``none_v``, ``adm_flow``, ``none_flow``: ``adm`` and ``none`` under v-prediction and under
  rectified flow: does a model need to be told the noise level at all? (an eps-predictor cannot tell
  x0 from eps at high noise without it; v and flow targets might be inferred from x_t alone).

Reports: final training loss, held-out loss per timestep band (the same held-out digits, t and noise for
every variant; the ``_v`` and ``_flow`` variants' losses are v-prediction and velocity losses, comparable
within their objective, not with the eps rows), the run's evaluation metrics (comparable across all
rows); writes ``results.json``, ``results.md`` and two figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import add_config_args, load_config
from torch import nn

from timestep_embed.analysis.figures import new_figure
from timestep_embed.conventions import Convention
from timestep_embed.ddpm import load_mnist, load_model, run_training, schedule_from_config, training_loss
from timestep_embed.files import atomic_write_bytes, save_figure
from timestep_embed.nn import FourierEmbedding, TimestepEmbedder, TimestepMLP, default_sinusoid_dim
from timestep_embed.sinusoidal import sinusoidal_embedding

QUICK = [  # a narrower time MLP (emb_dim 128; same for every variant), 1000 updates of 32, 200 samples
    "model.channels=[32,64]", "model.emb_dim=128", "train.minutes=null", "train.steps=1000",
    "train.batch_size=32", "train.warmup_steps=50", "train.log_every=100",
    "sample.steps=50", "sample.num_samples=200", "sample.batch_size=200",
    "diffusion.schedule=linear",  # the schedule of the recorded runs (docs/theory.md); the default run's is cosine
]  # fmt: skip
FULL = ["train.minutes=null", "train.steps=1000"]  # the default config's model, batch and sampler; equal updates
BANDS = 10


class FeaturesMLP(nn.Module):
    """``t [B] -> features(t) [B, in_dim] -> TimestepMLP -> [B, emb_dim]`` (features may hold parameters)."""

    def __init__(self, features: nn.Module, in_dim: int, emb_dim: int):
        super().__init__()
        self.features = features
        self.time_embedding = TimestepMLP(in_dim, emb_dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.time_embedding(self.features(t).to(self.time_embedding.linear_1.weight.dtype))


class Fn(nn.Module):
    """A parameter-free feature map of t as a module; ``factor`` multiplies t first."""

    def __init__(self, fn, factor: float = 1.0):
        super().__init__()
        self.fn, self.factor = fn, factor

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.fn(t if self.factor == 1.0 else t.double() * self.factor)


class Lookup(nn.Module):
    """A learned table with one row per integer timestep 0..T-1."""

    def __init__(self, num_timesteps: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(num_timesteps, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.table(t.round().long().clamp(0, self.table.num_embeddings - 1))


class Zeros(nn.Module):
    """The "no embedding" baseline: ``[B, emb_dim]`` zeros, whatever t is."""

    def __init__(self, emb_dim: int):
        super().__init__()
        self.emb_dim = emb_dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(t.shape[0], self.emb_dim, device=t.device)


VARIANTS = (
    *("adm", "vaswani", "sine_only", "one_pair", "raw_t", "lookup", "fourier", "none"),
    *("adm_v", "none_v", "adm_flow", "none_flow"),
)
_FLOW = ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"]
VARIANT_OVERRIDES = {
    "adm_v": ["diffusion.prediction=v"],
    "none_v": ["diffusion.prediction=v"],
    "adm_flow": _FLOW,
    "none_flow": _FLOW,
}


def build_variant(name: str, emb_dim: int, num_timesteps: int, seed: int = 0) -> nn.Module:
    """The time embedder of variant ``name``: a module ``t [B] -> [B, emb_dim]``."""
    torch.manual_seed(seed)
    d = default_sinusoid_dim(emb_dim)
    sines = Convention(layout="concat", first="sin", freq_shift=0.0)
    if name in ("adm", "vaswani", "adm_v", "adm_flow"):
        return TimestepEmbedder(emb_dim, convention=name.split("_")[0])
    if name == "sine_only":  # the sin half of a 2d-wide sinusoid: d sines over the same frequency range
        return FeaturesMLP(Fn(lambda t: sinusoidal_embedding(t, 2 * d, sines)[..., :d]), d, emb_dim)
    if name == "one_pair":  # the fastest pair of the grid, w = 1
        return FeaturesMLP(Fn(lambda t: sinusoidal_embedding(t, 2, sines)), 2, emb_dim)
    if name == "raw_t":
        return FeaturesMLP(Fn(lambda t: t.float()[..., None]), 1, emb_dim)
    if name == "lookup":
        return FeaturesMLP(Lookup(num_timesteps, d), d, emb_dim)
    if name == "fourier":  # score_sde-style Gaussian Fourier features, of t / T in [0, 1]
        fourier = FourierEmbedding(d, 16.0, generator=torch.Generator().manual_seed(seed))
        return FeaturesMLP(nn.Sequential(Fn(lambda t: t, 1.0 / num_timesteps), fourier), d, emb_dim)
    if name in ("none", "none_v", "none_flow"):
        return Zeros(emb_dim)
    raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")


# ----------------------------------------------------------------------------- evaluation
@torch.no_grad()
def heldout_band_loss(model: nn.Module, schedule, x0: torch.Tensor, prediction: str = "eps", seed: int = 1234):
    """Mean held-out loss in each of :data:`BANDS` equal timestep bands, ``[BANDS]``.

    The same digits ``x0``, timesteps and noise for every variant (seeded): differences come from
    the models only. Continuous schedules get t in the band's slice of (0, 1].
    """
    g = torch.Generator().manual_seed(seed)
    T, out = schedule.T, []  # noqa: N806
    for b in range(BANDS):
        lo, hi = b * T // BANDS, (b + 1) * T // BANDS
        if prediction == "flow":  # rectified flow: t in the band's slice of (0, 1)
            t = (lo + (hi - lo) * torch.rand(x0.shape[0], generator=g, dtype=torch.float64)).clamp(min=1) / T
        elif schedule.continuous is None:
            t = torch.randint(lo, hi, (x0.shape[0],), generator=g)
        else:
            t = (lo + (hi - lo) * torch.rand(x0.shape[0], generator=g, dtype=torch.float64)).clamp(min=1) / T
        noise = torch.randn(x0.shape, generator=g)
        out.append(float(training_loss(model, x0, schedule, prediction=prediction, t=t, noise=noise)))
    return out


def variant_config(name: str, seed: int, args):
    """The run config of a variant and seed: the budget, the seed, the variant's own overrides."""
    base = [*(QUICK if args.quick else FULL), f"train.seed={seed}"]
    return load_config(args, base).with_overrides(VARIANT_OVERRIDES.get(name, []))


def run_variant(name: str, seed: int, args, heldout: torch.Tensor, config) -> dict:
    """Train a variant with ``config`` (`variant_config`), then its held-out loss per timestep band."""
    emb_dim, T = config.model.emb_dim, config.diffusion.num_timesteps  # noqa: N806
    run_dir = args.out / name / f"seed{seed}"
    start = time.time()
    embedder = build_variant(name, emb_dim, T, seed)
    metrics = run_training(config, run_dir, time_embedder=embedder, overwrite=True, progress=False)
    model, _ = load_model(run_dir, time_embedder=build_variant(name, emb_dim, T, seed))  # the EMA weights
    bands = heldout_band_loss(model, schedule_from_config(config.diffusion), heldout, config.diffusion.prediction)
    keep = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return {
        "variant": name,
        "seed": seed,
        "prediction": config.diffusion.prediction,
        **keep,
        "heldout_band_loss": bands,
        "heldout_loss": float(np.mean(bands)),
        "wall_seconds": time.time() - start,
    }


# -------------------------------------------------------------------------------- report
COLUMNS = ("final_loss", "heldout_loss", "fd", "entropy", "confidence", "num_params", "train_seconds")


def summarize(results: list[dict]) -> list[dict]:
    """One row per variant: mean (and std over seeds) of every number in :data:`COLUMNS`."""
    rows = []
    for name in dict.fromkeys(r["variant"] for r in results):
        runs = [r for r in results if r["variant"] == name]
        row = {"variant": name, "seeds": len(runs)}
        for col in COLUMNS:
            values = [r[col] for r in runs if isinstance(r.get(col), (int, float))]
            row[col] = (float(np.mean(values)), float(np.std(values))) if values else None
        row["bands"] = np.mean([r["heldout_band_loss"] for r in runs], axis=0).tolist()
        row["prediction"] = runs[0].get("prediction")
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    def cell(value):
        if value is None:
            return "-"
        mean, std = value
        return f"{mean:.4g}" + (f" ± {std:.2g}" if std else "")

    lines = ["| variant | seeds | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    lines += [f"| {r['variant']} | {r['seeds']} | " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


LOSS_NAMES = {"eps": "eps-prediction loss", "v": "v-prediction loss", "flow": "velocity loss (flow)"}


def objective(row: dict) -> str:
    """The training objective of a row (``diffusion.prediction``); results saved without it: the variant's."""
    if row.get("prediction"):
        return row["prediction"]
    overrides = VARIANT_OVERRIDES.get(row["variant"], [])
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("diffusion.prediction=")), "eps")


def plot(rows: list[dict], out: Path, budget: str) -> list[Path]:
    """Two figures: held-out loss per timestep band, one panel per objective (eps, v and flow losses are
    different quantities: only one objective's share an axis), and the headline metrics per variant: each
    objective's final and held-out loss in its own panel, FD (comparable across all rows) below. Error bars
    only where a variant ran with two or more seeds: the spread over seeds."""
    groups = {key: [r for r in rows if objective(r) == key] for key in LOSS_NAMES}
    groups = {key: group for key, group in groups.items() if group}
    fig = new_figure(4.6 * len(groups) + 0.8, 5.2)
    centers = (np.arange(BANDS) + 0.5) / BANDS
    markers = "osD^v<>ph*Xd"  # distinct markers: equal curves stay visible
    for ax, (key, group) in zip(np.atleast_1d(fig.subplots(1, len(groups))), groups.items(), strict=True):
        for i, r in enumerate(group):
            label = f"{r['variant']} ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''})"
            ax.plot(centers, r["bands"], marker=markers[i % len(markers)], mfc="none", ms=7, label=label)
        ax.set(yscale="log", title=LOSS_NAMES[key], xlabel="timestep band (fraction of T, noisier to the right)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.axes[0].set_ylabel("held-out loss (mean over the band)")
    fig.suptitle(f"Held-out loss per timestep band, each panel its own objective\n{budget}", fontsize=10)
    paths = [save_figure(fig, out / "heldout_loss_by_band.png", 110)]

    fig = new_figure(max(8.0, 0.75 * len(rows) + 2), 8)
    axes = fig.subplot_mosaic([list(groups), ["fd"] * len(groups)], width_ratios=[len(g) + 1 for g in groups.values()])
    for key, group in groups.items():
        x = np.arange(len(group))
        for shift, col, label in ((-0.2, "final_loss", "final training loss"), (0.2, "heldout_loss", "held-out loss")):
            means = [r[col][0] if r[col] else np.nan for r in group]
            axes[key].bar(x + shift, means, 0.4, label=label, yerr=_spread(group, col), capsize=3)
        axes[key].set_xticks(x, [r["variant"] for r in group], rotation=45, ha="right")
        axes[key].set_title(LOSS_NAMES[key], fontsize=10)
    axes[next(iter(groups))].legend(fontsize=8)
    shown = [r for r in rows if r["fd"] is not None]
    colors = {key: f"C{i + 2}" for i, key in enumerate(LOSS_NAMES)}
    bars = axes["fd"].bar([r["variant"] for r in shown], [r["fd"][0] for r in shown], yerr=_spread(shown, "fd"),
                          capsize=3, color=[colors[objective(r)] for r in shown])  # fmt: skip
    firsts = {objective(r): bar for r, bar in zip(shown, bars, strict=True)}
    axes["fd"].legend(firsts.values(), [f"trained on the {LOSS_NAMES[k]}" for k in firsts], fontsize=8)
    axes["fd"].tick_params(axis="x", rotation=45)
    axes["fd"].set(title="FD to held-out digits (comparable across objectives)", ylabel="Frechet distance")
    seeds = max(r["seeds"] for r in rows)
    note = "error bars: std over seeds" if seeds > 1 else "one seed: no error bars"
    fig.suptitle(f"Time-embedding ablation, DDPM on MNIST ({note})\n{budget}", fontsize=10)
    paths.append(save_figure(fig, out / "ablation_metrics.png", 110))
    return paths


def _spread(rows: list[dict], col: str) -> list[float] | None:
    spread = [r[col][1] if r[col] and r["seeds"] > 1 else 0.0 for r in rows]
    return spread if any(spread) else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"a small budget: {' '.join(QUICK)}")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="NAME")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    add_config_args(parser)
    parser.add_argument("--heldout", type=int, default=None, help="held-out digits per band (32 quick, 500 full)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (runs/ablation[_quick])")
    args = parser.parse_args(argv)
    args.out = args.out or Path("runs/ablation_quick" if args.quick else "runs/ablation")
    args.out.mkdir(parents=True, exist_ok=True)
    config = load_config(args, QUICK if args.quick else FULL)
    t, m = config.train, config.model
    steps = f"train.steps={t.steps}" if t.steps else f"train.minutes={t.minutes}"
    budget = f"{steps}, batch {t.batch_size}, UNet channels {list(m.channels)}, emb_dim {m.emb_dim}"
    runs = len(args.variants) * len(args.seeds)
    total = f" = {runs * t.minutes:g} min of training" if t.minutes else ""
    print(
        f"budget: {len(args.variants)} variants x {len(args.seeds)} seeds, each {budget}{total}, plus "
        f"sampling ({config.sample.num_samples} x {config.sample.steps} steps) and evaluation",
        flush=True,
    )
    heldout = load_mnist(config.data.source, "heldout", config.data.pad_to_32)[0]
    heldout = heldout[: args.heldout or (32 if args.quick else 500)]
    results = []
    for seed in args.seeds:
        for name in args.variants:
            done = args.out / name / f"seed{seed}" / "ablation.json"
            previous = json.loads(done.read_text()) if done.is_file() else {}
            # resume: a run finished with this very config and held-out set is not repeated; another is
            config = variant_config(name, seed, args)
            key = {"config": json.loads(json.dumps(config.to_dict())), "heldout": len(heldout)}
            if previous.get("done_with") == key:
                results.append(previous)
                continue
            results.append({**run_variant(name, seed, args, heldout, config), "done_with": key})
            atomic_write_bytes(done, json.dumps(results[-1], indent=1).encode())  # never a half-written marker
            print(
                f"{name} seed {seed}: final loss {results[-1].get('final_loss')}, held-out "
                f"{results[-1]['heldout_loss']:.4f}, fd {results[-1].get('fd')}",
                flush=True,
            )
    rows = summarize(results)
    table = markdown(rows)
    summary = {"budget": budget, "runs": results, "rows": rows}
    atomic_write_bytes(args.out / "results.json", json.dumps(summary, indent=1).encode())
    command = "python scripts/ablate_embeddings.py " + " ".join(sys.argv[1:] if argv is None else argv)
    atomic_write_bytes(args.out / "results.md", f"`{command}` ({budget})\n\n{table}\n".encode())
    print(table)
    for path in plot(rows, args.out, budget):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
