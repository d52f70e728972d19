"""Cost of the time path a UNet owns: our TimestepEmbedder vs diffusers' Timesteps + TimestepEmbedding.

Same sizes on both sides (sinusoid width -> embedding width, e.g. 320 -> 1280 as Stable
Diffusion), same weights, same timesteps; one thread. For batch 1, 64 and 256 and integer
and float timesteps, the contenders run interleaved (timestep_embed/timing.py) and the table
reports median times and the ratio ours / diffusers for

* ``sinusoid fwd``: ``time_proj`` alone (our SinusoidalEmbedding vs diffusers' Timesteps);
* ``embedder fwd``: sinusoid + MLP under ``torch.no_grad()`` (sampling);
* ``embedder fwd+bwd``: forward, ``sum().backward()`` into the MLP weights (training);
* ``cached fwd`` (integer t): after ``TimestepEmbedder.cache_integer_steps()``, a row gather.

The MLP is the same nn.Linear/SiLU on both sides; where it dominates (320 -> 1280 is a
1280 x 1280 GEMV per sample), no sinusoid can move the ratio far from 1.

Target: ratio <= 1.0 everywhere and <= 0.5 at batch 1.

    python scripts/bench_modules.py                 # 320->1280 and 32->128, ~1 min
    python scripts/bench_modules.py --sizes 320:1280 --budget 1.0
"""

from __future__ import annotations

import argparse
import platform
import random
import time

import numpy as np
import torch

from timestep_embed.embedding import TimestepEmbedder

TARGET_ALL, TARGET_BATCH1 = 1.0, 0.5


def interleaved_samples(contenders: dict, budget_s: float, min_rounds: int = 15, warmup: int = 3) -> dict:
    """Seconds per call of each contender, in rounds that call every contender once in a fresh
    random order (as timestep_embed/timing.py), so machine drifts hit all alike."""
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    samples = {name: [] for name in names}
    rng, start, rounds = random.Random(0), time.perf_counter(), 0
    while rounds < min_rounds or time.perf_counter() - start < budget_s:
        rng.shuffle(names)
        for name in names:
            begin = time.perf_counter()
            contenders[name]()
            samples[name].append(time.perf_counter() - begin)
        rounds += 1
    return samples


def quantile(values, q: float) -> float:
    return float(np.quantile(np.asarray(values), q))


def build(in_dim: int, emb_dim: int):
    from diffusers.models.embeddings import TimestepEmbedding, Timesteps

    torch.manual_seed(0)
    proj, mlp = Timesteps(in_dim, True, 0), TimestepEmbedding(in_dim, emb_dim)  # diffusers UNet defaults
    ours = TimestepEmbedder(emb_dim, sinusoid_dim=in_dim, convention="adm")
    for name in ("linear_1", "linear_2"):  # the very same Parameters: equal memory placement, equal work
        layer = getattr(ours.time_embedding, name)
        layer.weight, layer.bias = getattr(mlp, name).weight, getattr(mlp, name).bias
    cached = TimestepEmbedder(emb_dim, sinusoid_dim=in_dim, convention="adm")
    cached.load_state_dict(ours.state_dict())
    cached.cache_integer_steps()
    return proj, mlp, ours, cached


def measure(in_dim: int, emb_dim: int, batch: int, kind: str, budget: float) -> list[tuple]:
    """Rows (mode, diffusers samples [s], ours samples [s], max abs difference of the outputs)."""
    proj, mlp, ours, cached = build(in_dim, emb_dim)
    gen = torch.Generator().manual_seed(batch)
    t = torch.randint(0, 1000, (batch,), generator=gen)
    if kind == "float":
        t = t.float() + torch.rand(batch, generator=gen)

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn(t)

        return run

    def train_step(fn):
        return lambda: fn(t).sum().backward()

    def theirs(x):
        return mlp(proj(x))

    groups = {
        "sinusoid fwd": (no_grad(proj), no_grad(ours.time_proj)),
        "embedder fwd": (no_grad(theirs), no_grad(ours)),
        "embedder fwd+bwd": (train_step(theirs), train_step(ours)),
    }
    if kind == "int":
        groups["cached fwd"] = (no_grad(theirs), no_grad(cached))
    rows = []
    for mode, (d, o) in groups.items():
        err = float((o() - d()).abs().max()) if "bwd" not in mode else 0.0
        samples = interleaved_samples({"diffusers": d, "ours": o}, budget)
        rows.append((mode, samples["diffusers"], samples["ours"], err))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="320:1280,32:128", help="IN:EMB pairs, comma separated")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing per cell and mode")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import diffusers

    print(
        f"torch {torch.__version__}, diffusers {diffusers.__version__}, {platform.machine()}, 1 thread; "
        "median us of interleaved rounds; ratio = ours / diffusers"
    )
    header = f"{'size':>9} {'batch':>5} {'t':>5}  {'mode':<17} {'diffusers':>10} {'ours':>10} {'ratio':>6}"
    header += f" {'p10 ratio':>9} {'max|d|':>8}"
    print(header + "\n" + "-" * len(header))
    failures = []
    for size in args.sizes.split(","):
        in_dim, emb_dim = (int(x) for x in size.split(":"))
        for batch in (int(b) for b in args.batches.split(",")):
            for kind in ("int", "float"):
                for mode, d, o, err in measure(in_dim, emb_dim, batch, kind, args.budget):
                    dm, om = quantile(d, 0.5), quantile(o, 0.5)
                    ratio, ratio10 = om / dm, quantile(o, 0.1) / quantile(d, 0.1)
                    print(
                        f"{size:>9} {batch:>5} {kind:>5}  {mode:<17} {dm * 1e6:10.1f} {om * 1e6:10.1f} "
                        f"{ratio:6.2f} {ratio10:9.2f} {err:8.1e}"
                    )
                    limit = TARGET_BATCH1 if batch == 1 else TARGET_ALL
                    if ratio > limit and mode != "sinusoid fwd":
                        failures.append(f"{size} batch {batch} {kind} {mode}: {ratio:.2f} > {limit}")
    print("\ntargets (embedder rows): ratio <= 1.0 everywhere, <= 0.5 at batch 1")
    print("all targets met" if not failures else "missed:\n  " + "\n  ".join(failures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
