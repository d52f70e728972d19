"""The package on one device against diffusers, in one run: speed of the function and the module, host syncs, the
trainer's rate.

1. ``get_timestep_embedding`` (ours / diffusers', ``flip_sin_to_cos=True, downscale_freq_shift=0``) for N
   timesteps from 1 to 2^20, int64, float32 and bfloat16, eager and ``torch.compile``-d (a full graph per width);
2. ``TimestepEmbedder(1280, sinusoid_dim=320)`` / diffusers' ``Timesteps(320)`` + ``TimestepEmbedding(320, 1280)``
   with the same weights, under bf16 autocast (float32 on a CPU), eager and compiled;
3. on CUDA, the sync check: ``torch.cuda.set_sync_debug_mode("error")`` around the forward pass of the function,
   the module, a tiny diffusers ``UNet2DConditionModel`` before and after ``patch_diffusers_model``, and 50 training
   steps between two log lines of the real training loop, eager and replayed as a CUDA graph (each host sync raises);
4. the training loop's steps/s (``run_training`` of the default config on this device, the median rate of its log
   windows after the first) at batch 64 and 512, eager and with ``train.compile`` (on CUDA: ``cudagraphs``, the UNet
   compiled and replayed as CUDA graphs, and ``step-graph``, the whole step replayed as one CUDA graph).

Times are medians over interleaved rounds (CUDA events on CUDA, the wall clock elsewhere); ratios are ours /
diffusers' measured in the same run (below 1: ours is faster).

    python scripts/bench_gpu.py --device cuda --out bench_gpu.json
    python scripts/bench_gpu.py --device cpu --quick --modes eager --train-compile false   # a CPU, small sizes
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from _common import fail
from _timing import cpu_name

from timestep_embed import LowPrecisionTimestepWarning, TimestepEmbedder, get_timestep_embedding
from timestep_embed.ddpm import run_training
from timestep_embed.files import atomic_write_bytes
from timestep_embed.interop import patch_diffusers_model, require_diffusers

FUNCTION_CELLS = [(1, 320), (64, 320), (1024, 256), (4096, 256), (1 << 16, 256), (1 << 20, 256)]
MODULE_SIZES = [1, 2, 64, 1024, 4096, 1 << 16]
DTYPES = {"int64": torch.int64, "float32": torch.float32, "bfloat16": torch.bfloat16}
TINY_UNET = dict(  # diffusers' own UNet2DConditionModel test sizes
    block_out_channels=(8, 16), norm_num_groups=4, cross_attention_dim=8, attention_head_dim=2,
    in_channels=4, out_channels=4, layers_per_block=1, sample_size=8,
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
)  # fmt: skip


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_times(fns: dict[str, Callable], device: torch.device, rounds: int, inner: int) -> dict[str, float]:
    """Median seconds per call of each function, over ``rounds`` interleaved rounds of ``inner`` calls each."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up: compilation, cuDNN's choices, caches
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            synchronize(device)
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end) / 1e3 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                times[name].append((time.perf_counter() - t0) / inner)
    return {name: statistics.median(v) for name, v in times.items()}


def inner_calls(values: int) -> int:
    """Calls per timed round: about 2^21 output values, at least 1, at most 100."""
    return max(1, min(100, (1 << 21) // max(1, values)))


def timesteps(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    t = torch.randint(0, 1000, (n,), generator=g) if dtype == torch.int64 else torch.rand(n, generator=g) * 1000
    return t.to(dtype).to(device)


@functools.cache
def compiled_at(fn, dim: int):
    """``t -> fn(t, dim, True, 0)`` compiled with the width a constant (one graph per width; N turns dynamic after
    its second value): with the width an argument, dynamo makes it symbolic and the guards' check of it breaks
    the graph (131 us a call at N = 1 on a CPU, against 17)."""
    return torch.compile(lambda t: fn(t, dim, True, 0), fullgraph=True)


def bench_function(device, cells, modes: list[str], rounds: int) -> list[dict]:
    """Eager: every dtype; compiled (a graph per width, fullgraph: a break fails the row): float32."""
    theirs_fn = require_diffusers().models.embeddings.get_timestep_embedding
    variants = {"eager": DTYPES, "compiled": {"float32": torch.float32}}
    rows = []
    for mode, dtypes in variants.items():
        if mode not in modes:
            continue
        for dtype_name, dtype in dtypes.items():
            for n, dim in cells:
                t = timesteps(n, dtype, device)
                if mode == "eager":
                    calls = {"ours": functools.partial(get_timestep_embedding, t, dim, True, 0),
                             "diffusers": functools.partial(theirs_fn, t, dim, True, 0)}  # fmt: skip
                else:
                    calls = {"ours": functools.partial(compiled_at(get_timestep_embedding, dim), t),
                             "diffusers": functools.partial(compiled_at(theirs_fn, dim), t)}  # fmt: skip
                out = median_times(calls, device, rounds, inner_calls(n * dim))
                rows.append({"what": "function", "mode": mode, "dtype": dtype_name, "n": n, "dim": dim,
                             "ours_us": out["ours"] * 1e6, "diffusers_us": out["diffusers"] * 1e6,
                             "ratio": out["ours"] / out["diffusers"]})  # fmt: skip
                print_row(rows[-1])
    return rows


def module_pair(device: torch.device):
    """(ours, diffusers') time paths 320 -> 1280 with the same weights."""
    emb = require_diffusers().models.embeddings
    torch.manual_seed(0)
    theirs_proj, theirs_mlp = emb.Timesteps(320, True, 0), emb.TimestepEmbedding(320, 1280)
    ours = TimestepEmbedder(1280, sinusoid_dim=320)
    ours.time_embedding.load_state_dict(theirs_mlp.state_dict())
    theirs_mlp, ours = theirs_mlp.to(device), ours.to(device)
    return ours, lambda t: theirs_mlp(theirs_proj(t))


def bench_module(device, sizes, modes: list[str], rounds: int) -> list[dict]:
    """Eager: int64 and float32 timesteps; compiled: float32."""
    ours, theirs = module_pair(device)
    variants = {"eager": (ours, theirs, ("int64", "float32"))}
    if "compiled" in modes:
        variants["compiled"] = (torch.compile(ours, dynamic=True), torch.compile(theirs, dynamic=True), ("float32",))
    autocast = torch.autocast(device.type, torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    rows = []
    with torch.no_grad(), autocast:
        for mode, (mine, other, dtypes) in variants.items():
            if mode not in modes:
                continue
            for dtype_name in dtypes:
                for n in sizes:
                    t = timesteps(n, DTYPES[dtype_name], device)
                    calls = {"ours": functools.partial(mine, t), "diffusers": functools.partial(other, t)}
                    out = median_times(calls, device, rounds, inner_calls(n * 1280))
                    rows.append({"what": "module", "mode": mode, "dtype": dtype_name, "n": n, "dim": 1280,
                                 "ours_us": out["ours"] * 1e6, "diffusers_us": out["diffusers"] * 1e6,
                                 "ratio": out["ours"] / out["diffusers"]})  # fmt: skip
                    print_row(rows[-1])
    return rows


def print_row(r: dict) -> None:
    print(f"{r['what']:9} {r['mode']:9} {r['dtype']:9} N={r['n']:>8} dim={r['dim']:>5}  ours {r['ours_us']:10.1f} us"
          f"  diffusers {r['diffusers_us']:10.1f} us  ratio {r['ratio']:6.2f}", flush=True)  # fmt: skip


# ------------------------------------------------------------------------------------------------ host syncs
def no_sync(name: str, fn: Callable[[], object], device: torch.device) -> dict:
    """Run ``fn`` once to warm up, then again with every host sync an error; {"check", "ok", "error"}."""
    fn()
    synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        result = {"check": name, "ok": True, "error": None}
    except RuntimeError as exc:
        result = {"check": name, "ok": False, "error": where_it_failed(exc)}
    finally:
        torch.cuda.set_sync_debug_mode("default")
    synchronize(device)
    print(f"sync check  {name:44} {'ok' if result['ok'] else 'FAILED: ' + str(result['error'])}", flush=True)
    return result


def sync_checks(device: torch.device, folder: Path) -> list[dict]:
    if device.type != "cuda":
        print("sync check  skipped: torch.cuda.set_sync_debug_mode needs CUDA", flush=True)
        return []
    warnings.simplefilter("ignore", LowPrecisionTimestepWarning)
    results = []
    for dtype_name, dtype in DTYPES.items():
        t = timesteps(4096, dtype, device)
        results.append(no_sync(f"function, 4096 {dtype_name}", lambda t=t: get_timestep_embedding(t, 320, True, 0),
                               device))  # fmt: skip
    ours, _ = module_pair(device)
    for dtype_name in ("int64", "float32"):
        t = timesteps(4096, DTYPES[dtype_name], device)
        results.append(no_sync(f"TimestepEmbedder, 4096 {dtype_name}", lambda t=t: ours(t), device))
    torch.manual_seed(0)
    unet = require_diffusers().UNet2DConditionModel(**TINY_UNET).to(device).eval()
    inputs = {"sample": torch.randn(2, 4, 8, 8, device=device),
              "encoder_hidden_states": torch.randn(2, 3, 8, device=device)}  # fmt: skip
    step = torch.tensor([10, 500], device=device)
    with torch.no_grad():
        results.append(no_sync("UNet2DConditionModel, unpatched", lambda: unet(timestep=step, **inputs), device))
        patch_diffusers_model(unet)
        results.append(no_sync("UNet2DConditionModel, patched", lambda: unet(timestep=step, **inputs), device))
    results.extend(training_sync_check(device, folder, compile_) for compile_ in ("false", "step-graph"))
    return results


def training_sync_check(device: torch.device, folder: Path, compile_: str) -> dict:
    """Steps 21-70 of the default run's loop (log lines at steps 1 and 100) with every host sync an error."""
    state = {"error": None}

    def watch(step, *_):
        if step == 20:
            synchronize(device)
            torch.cuda.set_sync_debug_mode("error")
        if step == 70:
            torch.cuda.set_sync_debug_mode("default")
            return True
        return None

    overrides = ["train.steps=100", "train.log_every=100", "train.snapshot_every=0", f"train.device={device.type}",
                 "model.augment=0.5",  # the shifts mnist-gpu trains with
                 f"train.compile={compile_}", "eval.enabled=false", "sample.num_samples=8", "sample.batch_size=8",
                 "sample.steps=2"]  # fmt: skip
    what = f"training loop, steps 21-70, compile={compile_}"
    try:
        run_training("mnist", folder / f"sync_check_{compile_}", overrides=overrides, progress=False, callback=watch)
    except RuntimeError as exc:
        state["error"] = where_it_failed(exc)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ok = state["error"] is None
    print(f"sync check  {what:44} {'ok' if ok else 'FAILED: ' + str(state['error'])}", flush=True)
    return {"check": what, "ok": ok, "error": state["error"]}


# ------------------------------------------------------------------------------------------------ the trainer
def trainer_rate(device: torch.device, folder: Path, batch: int, compile_: str, steps: int) -> dict:
    """Median steps/s of the log windows after the first 200 steps of the default run at ``batch``."""
    name = f"rate_b{batch}_{compile_}"
    overrides = [f"train.steps={steps}", "train.log_every=100", "train.snapshot_every=0", f"train.batch_size={batch}",
                 f"train.device={device.type}", f"train.compile={compile_}", "eval.enabled=false",
                 "sample.num_samples=8", "sample.batch_size=8", "sample.steps=2"]  # fmt: skip
    torch.compiler.reset()
    t0 = time.perf_counter()
    try:
        run_training("mnist", folder / name, overrides=overrides, progress=False)
    except Exception as exc:  # report and go on: one failed setting must not hide the others
        print(f"trainer     batch {batch:4} compile={compile_:10} FAILED: {where_it_failed(exc)}", flush=True)
        return {"batch": batch, "compile": compile_, "steps_per_s": None, "error": where_it_failed(exc)}
    lines = [json.loads(x) for x in (folder / name / "log.jsonl").read_text().splitlines()]
    rates = [r["steps_per_s"] for r in lines if r["step"] > 200]
    rate = statistics.median(rates) if rates else lines[-1]["steps_per_s"]
    print(f"trainer     batch {batch:4} compile={compile_:10} {rate:8.1f} steps/s  "
          f"(run of {steps} steps: {time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    return {"batch": batch, "compile": compile_, "steps_per_s": rate, "seconds": time.perf_counter() - t0}


def diffusers_version() -> str:
    try:
        return require_diffusers().__version__
    except ImportError:  # the trainer rows need no diffusers
        return "not installed"


def write(out: Path | None, result: dict) -> None:
    if out is not None:
        atomic_write_bytes(out, (json.dumps(result, indent=1) + "\n").encode())


def where_it_failed(exc: BaseException) -> str:
    """The error's first line and the last frames of its traceback (a sync check's error alone says only that some
    operation synchronized): what a lease that cannot be repeated needs to find the cause."""
    frames = traceback.format_tb(exc.__traceback__)[-4:]
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
    return first + " | " + " ".join(f.strip() for f in frames)[-1500:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, help="write every row as JSON here")
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (a test of the script)")
    parser.add_argument("--parts", default="function,module,sync,trainer", help="which parts to run")
    parser.add_argument("--modes", default="eager,compiled", help="function and module rows: eager, compiled")
    parser.add_argument("--train-compile", help="train.compile values of the trainer rows (default: false, "
                        "cudagraphs and step-graph on CUDA, false and true elsewhere)")  # fmt: skip
    parser.add_argument("--train-steps", type=int, default=600, help="steps of each trainer run")
    args = parser.parse_args(argv)
    try:
        device = torch.device(args.device)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        fail(f"--device {args.device!r}: {exc}")
    parts, modes = args.parts.split(","), args.modes.split(",")
    if set(parts) - {"function", "module", "sync", "trainer"} or set(modes) - {"eager", "compiled"}:
        fail(f"--parts names function, module, sync, trainer and --modes eager, compiled; got {args.parts!r}, "
             f"{args.modes!r}")  # fmt: skip
    if args.train_steps < 1:
        fail(f"--train-steps must be >= 1, got {args.train_steps}")
    default_compile = "false,step-graph,cudagraphs" if device.type == "cuda" else "false,true"  # the new one early
    train_compile = (args.train_compile or default_compile).split(",")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(f"device {device} ({name}), torch {torch.__version__}, diffusers {diffusers_version()}", flush=True)
    cells = FUNCTION_CELLS[:3] if args.quick else FUNCTION_CELLS
    sizes = MODULE_SIZES[:3] if args.quick else MODULE_SIZES
    rounds = 3 if args.quick else 15
    result: dict = {"device": str(device), "device_name": name, "torch": torch.__version__,
                    "diffusers": diffusers_version()}  # fmt: skip
    warnings.simplefilter("ignore", LowPrecisionTimestepWarning)  # bfloat16 timesteps are a row of the table
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for part in parts:  # in the order given
            if part == "function":
                result["function"] = bench_function(device, cells, modes, rounds)
            elif part == "module":
                result["module"] = bench_module(device, sizes, modes, rounds)
            elif part == "sync":
                result["sync"] = sync_checks(device, folder)
            else:
                result["trainer"] = []
                for mode in train_compile:
                    for batch in (64, 512):
                        result["trainer"].append(trainer_rate(device, folder, batch, mode, args.train_steps))
                        write(args.out, result)  # after each row: a run stopped by a time limit keeps them
            write(args.out, result)  # after each part, too
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
