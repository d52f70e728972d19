"""Time and peak memory of the core's two compute paths against diffusers, for large outputs.

For each size N x dim (fractional float32 timesteps in [0, 1000)) three contenders:
diffusers' ``get_timestep_embedding`` (the UNet flags), ``sinusoidal_embedding`` (the float32
path) and ``sinusoidal_embedding(..., precise=True)`` (float64 phases, rounded once to float32).

* time: median of interleaved rounds in one process (scripts/_timing.py), as a
  ratio to diffusers' median in the same run;
* memory: the peak resident memory one call adds, measured in a fresh process per contender
  (``ru_maxrss`` after the call minus before it, after a warm-up on a small batch), as a multiple of
  the output's size (N * dim * 4 bytes). 1.0x is the output itself.

    python scripts/bench_precise.py                      # 80 MiB, 320 MiB and 1.1 GiB outputs (~2 min)
    python scripts/bench_precise.py --sizes 65536x320    # one size
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys

import torch
from _common import command_line, fail
from _timing import cpu_name, interleaved_medians

CONTENDERS = ("diffusers", "float32", "precise")
SIZES = ("65536x320", "65536x1280", "262144x1152")


def _call(name: str, n: int, dim: int):
    """The contender ``name`` as a function of the timesteps (imports inside: the child imports only it)."""
    if name == "diffusers":
        from diffusers.models.embeddings import get_timestep_embedding

        return lambda t: get_timestep_embedding(t, dim, True, 0)
    from timestep_embed import sinusoidal_embedding

    return lambda t: sinusoidal_embedding(t, dim, "adm", precise=name == "precise")


def _timesteps(n: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(n)) * 1000


def _peak_rss() -> int:
    """This process's peak resident memory in bytes. Linux: VmHWM, which starts afresh at exec
    (ru_maxrss keeps the parent's peak across fork and exec); elsewhere ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def child(name: str, n: int, dim: int) -> None:
    """In a fresh process: the peak resident memory one call adds, in bytes (printed as JSON)."""
    torch.set_num_threads(1)
    fn, t = _call(name, n, dim), _timesteps(n)
    fn(t[:1024])  # imports, caches and allocator warmed up on a small batch
    before = _peak_rss()
    out = fn(t)
    print(json.dumps({"peak_bytes": _peak_rss() - before, "output_bytes": out.numel() * out.element_size()}))


def peak_memory(name: str, n: int, dim: int) -> dict:
    cmd = [sys.executable, __file__, "--child", name, str(n), str(dim)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), help="NxDIM, e.g. 65536x1280")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of timing per size (after 3 rounds)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    try:
        sizes = [tuple(int(v) for v in size.lower().split("x")) for size in args.sizes]
    except ValueError:
        sizes = []
    if not sizes or any(len(s) != 2 or min(s) < 1 for s in sizes):
        fail(f"--sizes {' '.join(args.sizes)}: expected NxDIM sizes (4096x320), each number >= 1")
    torch.set_num_threads(1)
    import diffusers

    rows = [
        f"Measured by `{command_line()}` on {cpu_name()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, diffusers {diffusers.__version__}, 1 thread. Time: median over interleaved "
        "rounds / diffusers' median in the same run; memory: peak resident memory a call adds (a fresh process "
        "each) / the output's size.",
        "",
        "| N x dim | output | diffusers | float32 time | precise time | diffusers memory | float32 memory "
        "| precise memory |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, dim in sizes:
        t = _timesteps(n)
        calls = {name: _call(name, n, dim) for name in CONTENDERS}
        fns = {name: functools.partial(call, t) for name, call in calls.items()}
        times = interleaved_medians(fns, min_rounds=3, budget_s=args.budget, warmup=1)
        memory = {name: peak_memory(name, n, dim) for name in CONTENDERS}
        output = memory["diffusers"]["output_bytes"]
        ratio = {name: memory[name]["peak_bytes"] / output for name in CONTENDERS}
        rows.append(
            f"| {n} x {dim} | {output / 2**20:.0f} MiB | {times['diffusers']:.3f} s | "
            f"{times['float32'] / times['diffusers']:.2f}x | {times['precise'] / times['diffusers']:.2f}x | "
            f"{ratio['diffusers']:.2f}x | {ratio['float32']:.2f}x | {ratio['precise']:.2f}x |"
        )
        print(rows[-1], flush=True)
    print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
