"""Cost of the time path a model owns: our TimestepEmbedder vs diffusers' Timesteps + TimestepEmbedding.

Same sizes on both sides (sinusoid width -> embedding width, e.g. 320 -> 1280 as Stable Diffusion),
the very same weights, the same timesteps, one thread. For batch 1, 64 and 256 and integer and
float timesteps, the contenders run interleaved (scripts/_timing.py); the table
reports median times and the ratio ours / diffusers for

* ``sinusoid fwd``: ``time_proj`` alone (our SinusoidalEmbedding vs diffusers' Timesteps);
* ``embedder fwd``: sinusoid + MLP under ``torch.no_grad()`` (a sampling step);
* ``embedder fwd+bwd``: forward, then ``sum().backward()`` into the MLP weights (a training step).

The MLP is the same nn.Linear/SiLU on both sides; where it dominates (320 -> 1280 is a
1280 x 1280 GEMV per sample) no sinusoid can move the ratio far from 1.

    python scripts/bench_modules.py                 # 320->1280 and 32->128
    python scripts/bench_modules.py --sizes 320:1280 --budget 1.0
"""

from __future__ import annotations

import argparse

import diffusers
import torch
from _common import fail
from _timing import cpu_name, interleaved_medians
from diffusers.models.embeddings import TimestepEmbedding, Timesteps

from timestep_embed.nn import TimestepEmbedder


def build(in_dim: int, emb_dim: int):
    torch.manual_seed(0)
    proj, mlp = Timesteps(in_dim, True, 0), TimestepEmbedding(in_dim, emb_dim)  # diffusers UNet defaults
    ours = TimestepEmbedder(emb_dim, sinusoid_dim=in_dim, convention="adm")
    for name in ("linear_1", "linear_2"):  # the very same Parameters: equal memory placement, equal work
        layer = getattr(ours.time_embedding, name)
        layer.weight, layer.bias = getattr(mlp, name).weight, getattr(mlp, name).bias
    return proj, mlp, ours


def measure(in_dim: int, emb_dim: int, batch: int, kind: str, budget: float) -> list[tuple]:
    """Rows (mode, diffusers seconds, ours seconds, max abs difference of the outputs; of the weights' gradients for
    fwd+bwd)."""
    proj, mlp, ours = build(in_dim, emb_dim)
    gen = torch.Generator().manual_seed(batch)
    t = torch.randint(0, 1000, (batch,), generator=gen)
    if kind == "float":
        t = t.float() + torch.rand(batch, generator=gen)

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn(t)

        return run

    def theirs(x):
        return mlp(proj(x))

    groups = {
        "sinusoid fwd": (no_grad(proj), no_grad(ours.time_proj)),
        "embedder fwd": (no_grad(theirs), no_grad(ours)),
        "embedder fwd+bwd": (lambda: theirs(t).sum().backward(), lambda: ours(t).sum().backward()),
    }
    params = list(mlp.parameters())  # ours uses these very Parameters

    def gradients(step):
        for p in params:
            p.grad = None
        step()
        return [p.grad.clone() for p in params]

    rows = []
    for mode, (d, o) in groups.items():
        if "bwd" in mode:  # the weights' gradients, which the backward pass computes
            err = max(float((a - b).abs().max()) for a, b in zip(gradients(o), gradients(d), strict=True))
        else:
            err = float((o() - d()).abs().max())
        times = interleaved_medians({"diffusers": d, "ours": o}, min_rounds=15, budget_s=budget)
        rows.append((mode, times["diffusers"], times["ours"], err))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="320:1280,32:128", help="IN:EMB pairs, comma separated")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing per cell and mode")
    args = parser.parse_args(argv)
    try:
        sizes = [tuple(int(x) for x in size.split(":")) for size in args.sizes.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        fail(f"--sizes {args.sizes} --batches {args.batches}: expected IN:EMB pairs and batch sizes, comma separated")
    if any(len(s) != 2 or min(s) < 1 for s in sizes) or min(batches) < 1:
        fail(f"--sizes {args.sizes} --batches {args.batches}: widths and batch sizes must be >= 1, sizes IN:EMB")
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, diffusers {diffusers.__version__}, {cpu_name()}, 1 thread; "
        "median us of interleaved rounds; ratio = ours / diffusers"
    )
    header = (
        f"{'size':>9} {'batch':>5} {'t':>5}  {'mode':<17} {'diffusers':>10} {'ours':>10} {'ratio':>6} {'max|d|':>8}"
    )
    print(header + "\n" + "-" * len(header))
    for in_dim, emb_dim in sizes:
        size = f"{in_dim}:{emb_dim}"
        for batch in batches:
            for kind in ("int", "float"):
                for mode, d, o, err in measure(in_dim, emb_dim, batch, kind, args.budget):
                    print(
                        f"{size:>9} {batch:>5} {kind:>5}  {mode:<17} {d * 1e6:10.1f} {o * 1e6:10.1f} "
                        f"{o / d:6.2f} {err:8.1e}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
