"""Per-token timesteps [B, tokens]: the time path on the distinct values, against running it per token.

Diffusion forcing and Wan 2.2-style models give every token its own timestep; tokens of one frame
share it, so a batch of B x tokens holds only B x frames distinct values. Three contenders, the very
same weights (sinusoid 256 -> MLP 3072 -> 3072, SiLU, float32):

* ``diffusers per token``: ``Timesteps`` on the flattened timesteps, then ``TimestepEmbedding`` on
  every row (what diffusers' Wan does with ``timestep.ndim == 2``);
* ``ours per token``: our ``SinusoidalEmbedding`` + ``TimestepMLP`` on every row;
* ``ours distinct``: ``TimestepEmbedder(t)``: sinusoid and MLP on the distinct values, then a gather.

Time: median seconds of interleaved rounds, in this process. Peak memory: each contender runs once
in a fresh subprocess, started before this process allocates anything large; the number is the
growth of that process's peak RSS during the call (the weights and inputs are allocated before).
Modes: ``fwd`` under no_grad (sampling), ``fwd+bwd`` (training: ``sum().backward()`` into the weights).

    python scripts/bench_per_token.py                          # B=2, 32768 tokens, 16 frames
    python scripts/bench_per_token.py --tokens 4096 --rounds 3 # a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import diffusers
import torch
from _common import fail
from _timing import cpu_name, interleaved_medians
from diffusers.models.embeddings import TimestepEmbedding, Timesteps

from timestep_embed.nn import TimestepEmbedder

CONTENDERS = ("diffusers per token", "ours per token", "ours distinct")


def build(args):
    torch.manual_seed(0)
    proj, mlp = Timesteps(args.sinusoid, True, 0), TimestepEmbedding(args.sinusoid, args.emb)
    ours = TimestepEmbedder(args.emb, args.sinusoid, "adm")
    ours.time_embedding.load_state_dict(mlp.state_dict())
    gen = torch.Generator().manual_seed(0)
    if args.frames:  # every frame its own step, shared by its tokens
        frame_t = torch.randint(0, 1000, (args.batch, args.frames), generator=gen).float()
        t = frame_t.repeat_interleave(args.tokens // args.frames, dim=1)
    else:  # every token its own value: the distinct-value check must cost nothing
        t = torch.rand(args.batch, args.tokens, generator=gen) * 1000
    runs = {
        "diffusers per token": lambda: mlp(proj(t.flatten())),
        "ours per token": lambda: ours.time_embedding(ours.time_proj(t.flatten())),
        "ours distinct": lambda: ours(t),
    }
    return runs, [*mlp.parameters()], t


def timed(fn, params, mode):
    if mode == "fwd":

        def run():
            with torch.no_grad():
                fn()

        return run

    def run_bwd():
        for p in params:
            p.grad = None
        fn().sum().backward()

    return run_bwd


def peak_child(args, name: str, mode: str) -> float:
    """MiB of peak RSS growth of one call of ``name`` in a fresh process."""
    sizes = ("batch", "tokens", "frames", "sinusoid", "emb", "threads")
    cmd = [sys.executable, __file__, "--child", name, "--mode", mode]
    cmd += [x for key in sizes for x in (f"--{key}", str(getattr(args, key)))]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mib"]


def child(args) -> int:
    torch.set_num_threads(args.threads)
    runs, params, _ = build(args)
    run = timed(runs[args.child], params, args.mode)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": (after - before) / 1024}))  # ru_maxrss is KiB on Linux
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--frames", type=int, default=16, help="distinct steps per sample (0: every token its own)")
    parser.add_argument("--sinusoid", type=int, default=256)
    parser.add_argument("--emb", type=int, default=3072)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds per mode")
    parser.add_argument("--modes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="fwd", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = {k: getattr(args, k) for k in ("batch", "tokens", "sinusoid", "emb", "threads", "rounds")}
    bad = [f"--{k} {v}" for k, v in counts.items() if v < 1]
    if bad or args.frames < 0:
        fail(f"{', '.join(bad) or f'--frames {args.frames}'}: expected counts >= 1 (--frames >= 0)")
    if args.frames and args.tokens % args.frames:
        fail(f"--tokens {args.tokens} is not a multiple of --frames {args.frames} (each frame's tokens share its step)")
    if args.child:
        return child(args)
    torch.set_num_threads(args.threads)
    # Memory first: a child's peak RSS starts at its parent's RSS, so the parent must still be small.
    peaks = {(mode, name): peak_child(args, name, mode) for mode in args.modes for name in CONTENDERS}
    runs, params, t = build(args)
    with torch.no_grad():
        base, distinct = runs["diffusers per token"](), runs["ours distinct"]().reshape(-1, args.emb)
    print(
        f"torch {torch.__version__}, diffusers {diffusers.__version__}, {cpu_name()}, {args.threads} threads; "
        f"t [{args.batch}, {args.tokens}] with {torch.unique(t).numel()} distinct values; "
        f"MLP {args.sinusoid} -> {args.emb} -> {args.emb}; max |ours distinct - diffusers| "
        f"{float((distinct - base).abs().max()):.1e}"
    )
    del base, distinct
    header = f"{'mode':<8} {'contender':<20} {'median s':>9} {'ratio':>6} {'peak MiB':>9} {'ratio':>6}"
    print(header + "\n" + "-" * len(header))
    for mode in args.modes:
        fns = {name: timed(fn, params, mode) for name, fn in runs.items()}
        times = interleaved_medians(fns, min_rounds=args.rounds, max_rounds=args.rounds, budget_s=0, warmup=1)
        ref_t, ref_m = times[CONTENDERS[0]], peaks[(mode, CONTENDERS[0])]
        for name in CONTENDERS:
            peak = peaks[(mode, name)]
            print(
                f"{mode:<8} {name:<20} {times[name]:9.3f} {times[name] / ref_t:6.2f} "
                f"{peak:9.0f} {peak / ref_m if ref_m else float('nan'):6.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
