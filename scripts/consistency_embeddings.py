#!/usr/bin/env python
"""The time embedding under the few-step objective: consistency training of the MNIST UNet from scratch with each
embedding, everything else equal; the final FD (4 consistency steps) and the gradient-norm spikes.

    python scripts/consistency_embeddings.py                       # 4 embeddings x 3 seeds, 600 updates each
    python scripts/consistency_embeddings.py --steps 200 --seeds 0 # a quick look

sCM (Lu & Song 2024, sec. 4) reports that the time embedding decides whether continuous-time consistency training is
stable: positional embeddings of ``1000 t`` or Fourier features of scale 16 blow up, Fourier features of scale 1 or a
positional embedding of the identity time ``t`` do not. The variants (only ``UNet.time_embedder`` changes):

* ``sinusoid_index``: the default UNet's sinusoid of the index 0..999 (what diffusers' UNets are fed);
* ``fourier16``: Gaussian Fourier features of t / T with std 16 (score_sde's and diffusers' Fourier UNets);
* ``fourier1``: the same with std 1;
* ``sinusoid_unit``: the sinusoid of t / T in [0, 1] (TrigFlow's ``c_noise(t) = t``).

Each run is ``consistency.method=ect`` from a random start (``run_training`` with a ``consistency`` section), for
``--steps`` updates (equal updates, not equal time), the gradient norm logged at every step. A spike is a step whose
gradient norm (before clipping) exceeds ``--spike`` times the median of the previous ``--window`` steps. This is
discrete-time consistency training with gradient clipping at 1, not sCM's continuous-time objective: it tests
whether the claim carries over to that setting, at this scale. The table's last column is each embedding's feature
speed (``feature_speed``), the factor through which sCM's time derivative sees the embedding. A finished run of the
same config is reused (``--fresh`` trains it again). Writes ``results.json``, ``results.md`` and
``embeddings.png`` (gradient norms over training, one panel per embedding) in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from _common import add_config_args, command_line, load_config, markdown_table, mean_spread, write_json
from ablate_embeddings import FeaturesMLP, Fn
from torch import nn

from timestep_embed.analysis.figures import new_figure
from timestep_embed.ddpm import distill_config, run_training
from timestep_embed.files import save_figure
from timestep_embed.nn import FourierEmbedding, TimestepEmbedder, default_sinusoid_dim
from timestep_embed.sinusoidal import sinusoidal_embedding

VARIANTS = ("sinusoid_index", "fourier16", "fourier1", "sinusoid_unit")


def build_embedder(name: str, emb_dim: int, num_timesteps: int, seed: int) -> nn.Module:
    """The time embedder of variant ``name``, ``t [B] -> [B, emb_dim]`` (t: the UNet's time input, 0..T-1)."""
    torch.manual_seed(seed)
    d = default_sinusoid_dim(emb_dim)
    if name == "sinusoid_index":
        return TimestepEmbedder(emb_dim)
    if name in ("fourier16", "fourier1"):
        fourier = FourierEmbedding(
            d, 16.0 if name == "fourier16" else 1.0, generator=torch.Generator().manual_seed(seed)
        )
        return FeaturesMLP(nn.Sequential(Fn(lambda t: t, 1.0 / num_timesteps), fourier), d, emb_dim)
    if name == "sinusoid_unit":
        return FeaturesMLP(Fn(lambda t: sinusoidal_embedding(t, d), 1.0 / num_timesteps), d, emb_dim)
    raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")


def feature_speed(embedder: nn.Module, num_timesteps: int) -> float:
    """How fast the features before the MLP move along the continuous time s = t / T in [0, 1]: the root mean square
    over s of ||d features / ds|| (central differences). sCM's training signal, the time derivative of the network's
    output, passes through this factor; the discrete-time loss here does not differentiate in t."""
    features = embedder.time_proj if isinstance(embedder, TimestepEmbedder) else embedder.features
    s, h = torch.linspace(0.01, 0.99, 99, dtype=torch.float64), 1e-4
    with torch.no_grad():
        diff = features(num_timesteps * (s + h)).double() - features(num_timesteps * (s - h)).double()
    return float((diff / (2 * h)).norm(dim=1).pow(2).mean().sqrt())


def spikes(norms: list[float], factor: float, window: int) -> int:
    """How many steps have a gradient norm above ``factor`` x the median of the ``window`` steps before them."""
    return sum(1 for i in range(window, len(norms)) if norms[i] > factor * statistics.median(norms[i - window : i]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add_config_args(parser, out="runs/consistency_embeddings")
    parser.add_argument("--steps", type=int, default=600, help="updates per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--spike", type=float, default=10.0, help="a spike: this many times the running median")
    parser.add_argument("--window", type=int, default=50, help="steps in the running median")
    parser.add_argument(
        "--fresh", action="store_true", help="train again where a finished run of the same config exists"
    )
    args = parser.parse_args()
    # distill's config (its consistency section and 4-call sampler) with a from-scratch budget and learning rate, and
    # iCT's (ECT's) broad noise levels and 4 stages, the from-scratch choice (distill's defaults centre on the sampler)
    base = distill_config(load_config(args), [f"train.steps={args.steps}", "train.log_every=1", "eval.samplings=1",
                                              "train.lr=1e-3", "train.warmup_steps=100", "consistency.sigma_mean=-1.1",
                                              "consistency.sigma_std=2.0", "consistency.stages=4"])  # fmt: skip
    rows, curves = [], {}
    for name in args.variants:
        for seed in args.seeds:
            cfg = base.with_overrides([f"train.seed={seed}"])
            embedder = build_embedder(name, cfg.model.emb_dim, cfg.diffusion.num_timesteps, seed)
            out = args.out / f"{name}_s{seed}"
            speed = feature_speed(embedder, cfg.diffusion.num_timesteps)
            done = out / "metrics.json"
            metrics = json.loads(done.read_text()) if done.is_file() and not args.fresh else {}
            if metrics.get("config") != json.loads(json.dumps(cfg.to_dict())):  # not a finished run of this config
                metrics = run_training(cfg, out, embedder, overwrite=True, progress=sys.stderr.isatty())
            log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]
            norms = [r["grad_norm"] for r in log]
            curves[f"{name}_s{seed}"] = norms
            row = {"variant": name, "seed": seed, "fd": metrics["fd"], "confidence": metrics["confidence"],
                   "entropy": metrics["entropy"], "spikes": spikes(norms, args.spike, args.window),
                   "max_grad_norm": max(norms), "final_loss": metrics["final_loss"],
                   "feature_speed": speed}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = []
    for name in args.variants:
        mine = [r for r in rows if r["variant"] == name]
        fd, fd_spread = mean_spread(mine, "fd")
        table.append([name, " / ".join(f"{r['fd']:.1f}" for r in mine), fd, fd_spread,
                      mean_spread(mine, "confidence")[0], " / ".join(str(r["spikes"]) for r in mine),
                      max(r["max_grad_norm"] for r in mine), mine[0]["feature_speed"]])  # fmt: skip
    header = ["embedding", "FD per seed", "FD mean", "FD spread", "confidence", "spikes per seed", "max grad norm",
              "feature speed"]  # fmt: skip
    md = f"`{command_line()}`\n\n" + markdown_table(header, table) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(md)
    write_json(args.out / "results.json", {"command": command_line(), "rows": rows, "grad_norms": curves})
    fig = new_figure(3.2 * len(args.variants), 2.8)
    axes = fig.subplots(1, len(args.variants), sharey=True, squeeze=False)[0]
    for ax, name in zip(axes, args.variants, strict=True):
        for key, norms in curves.items():
            if key.startswith(name + "_s"):
                ax.plot(norms, lw=0.7, label=key.rsplit("_", 1)[1])
        ax.set_yscale("log")
        speed = next(r["feature_speed"] for r in rows if r["variant"] == name)
        ax.set_title(f"{name} (feature speed {speed:.3g})", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("gradient norm (before clipping)")
    save_figure(fig, args.out / "embeddings.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
