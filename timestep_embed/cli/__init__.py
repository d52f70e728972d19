"""The ``timestep-embed`` command line (also ``python -m timestep_embed``).

Thin: it parses, calls one library function per subcommand, and prints. Every failure a user can
cause or meet ends with one line on stderr and exit code 2 (bad input, missing file or device, full
disk); 1 means "detect found no match", 130 "interrupted". ``-v`` / ``--verbose`` (or the environment
variable ``TIMESTEP_EMBED_DEBUG=1``) shows the traceback instead, and debug messages.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ..analysis.detect import detect_convention
from ..analysis.dump import timestep_range
from ..analysis.figures import FIGURES, make_figures, plot_time_mlp
from ..ddpm import (
    CheckpointError,
    ClassifierConfig,
    ConfigError,
    DataError,
    RunConfig,
    TrainingDiverged,
    distill_run,
    evaluate_samples,
    export_run,
    format_report,
    load_model,
    run_training,
    sample_run,
    score,
)
from ..ddpm.config import check_not_a_run_file, run_config
from ..ddpm.runtime import launch
from ..ddpm.schema import dump_yaml
from ..files import atomic_write_bytes, check_writable, load_npy
from ..interop.compare import run_comparison, summary, to_markdown, write_report
from ..interop.inspect import inspect_checkpoint
from .parser import build_parser

log = logging.getLogger("timestep_embed")
USER_ERRORS = (ConfigError, CheckpointError, DataError, TrainingDiverged, ValueError, TypeError, OSError, ImportError)


# ---------------------------------------------------------------------------------- commands
def _overrides(args) -> list[str]:
    """The command's ``KEY=VALUE`` overrides, with ``--device`` as ``train.device``."""
    return [*args.overrides, *([f"train.device={args.device}"] if args.device else [])]


def _train(args) -> int:
    overrides = _overrides(args)
    if args.print_config:
        print(dump_yaml(RunConfig.load(args.config, overrides).to_dict()), end="")
        return 0
    if args.nproc_per_node > 1 and "RANK" not in os.environ:  # the launcher: these arguments, in N processes
        RunConfig.load(args.config, overrides)  # a config error is one line from here, not one from each process
        return launch(args.nproc_per_node, args.argv)
    metrics = run_training(
        args.config, args.out_dir, overrides=overrides, resume=args.resume, overwrite=args.overwrite,
        progress=not args.quiet,
    )  # fmt: skip
    return _report(metrics)


def _distill(args) -> int:
    if args.nproc_per_node > 1 and "RANK" not in os.environ:
        return launch(args.nproc_per_node, args.argv)
    metrics = distill_run(
        args.run, args.out_dir, _overrides(args), resume=args.resume, overwrite=args.overwrite, progress=not args.quiet
    )
    return _report(metrics)


def _report(metrics: dict) -> int:
    """What train and distill print at the end: the scores and the run folder (130 when interrupted)."""
    if metrics.get("interrupted"):
        log.warning(
            "stopped at step %d; continue with --resume --out-dir %s", metrics["train_steps"], metrics["out_dir"]
        )
        return 130
    if int(os.environ.get("RANK", "0")) > 0:  # the other ranks of torchrun: rank 0 reports
        return 0
    if "fd" in metrics:
        print(format_report(metrics))
    print(f"run folder: {metrics['out_dir']}")
    return 0


def _sample(args) -> int:
    bf16: bool | str = {"on": True, "off": False}.get(args.bf16, "auto")
    t0 = time.perf_counter()
    npy, png = sample_run(
        args.run, args.overrides, args.out, raw=args.raw, device=args.device or "auto", bf16=bf16,
        overwrite=args.overwrite, progress=not args.quiet,
    )  # fmt: skip
    print(f"samples in {time.perf_counter() - t0:.1f} s -> {npy}, {png}")
    return 0


def _load_npy(path: str, what: str, mmap_mode=None) -> np.ndarray:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    return load_npy(path, mmap_mode)


def _evaluate(args) -> int:
    if args.out:  # before the scoring, not after it
        check_writable(Path(args.out).parent, "--out's folder")
        check_not_a_run_file(Path(args.out), "--out")
    if Path(args.samples).is_dir():  # a run folder: its samples, scored by the run's own evaluator
        cfg = run_config(args.samples)
        metrics = score(cfg, _load_npy(str(Path(args.samples) / "samples.npy"), "samples"), not args.no_references)
    else:
        config = ClassifierConfig(width=args.classifier_width, epochs=args.classifier_epochs, seed=args.classifier_seed)
        samples = _load_npy(args.samples, "samples")
        metrics = evaluate_samples(
            samples, config, args.data, args.cache_dir, references=not args.no_references, progress=not args.quiet
        )
    print(format_report(metrics))
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(metrics, indent=2) + "\n").encode())
        print(f"wrote {args.out}")
    return 0


def _compare(args) -> int:
    # writable before the rows, which take a while: its nearest existing folder, so that nothing is made yet
    check_writable(next(p for p in (Path(args.out), *Path(args.out).absolute().parents) if p.exists()), "--out")
    rows = run_comparison(args.presets, args.dims, args.n, progress=not args.quiet)
    print(to_markdown(rows))
    print(summary(rows))
    md, js = write_report(rows, args.out)
    print(f"wrote {md} and {js}")
    return 0


def _inspect(args) -> int:
    result = inspect_checkpoint(args.path, prefix=args.prefix)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.summary())
    return 0


def parse_timesteps(spec: str) -> np.ndarray:
    """``T.npy`` (any shape, flattened) or ``start:stop[:step]`` (``numpy.arange``), float64."""
    if spec.endswith(".npy"):
        return _load_npy(spec, "timesteps", mmap_mode="r").reshape(-1)
    parts = spec.split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(parts) not in (2, 3) or len(numbers) != len(parts) or (len(numbers) == 3 and numbers[2] == 0):
        raise ValueError(f"--timesteps must be a .npy file or start:stop[:step] with a non-zero step, got {spec!r}")
    return timestep_range(*numbers)  # refuses more than MAX_TIMESTEPS values before allocating


def _detect(args) -> int:
    embeddings = _load_npy(args.embeddings, "embeddings", mmap_mode="r")  # detect reads 2048 rows of it
    result = detect_convention(embeddings, parse_timesteps(args.timesteps), tol=args.tol)
    if args.json:
        data = dataclasses.asdict(result)
        print(json.dumps(data, indent=2))
    else:
        print(result.summary())
    return 0 if result.matched else 1


def _figures(args) -> int:
    names = args.only
    if names and "time_mlp" in names and args.checkpoint is None:
        raise ValueError("--only time_mlp: the embedding after a trained MLP needs --checkpoint RUN")
    paths = make_figures(
        args.out,
        args.convention,
        args.dim,
        args.positions,
        dpi=args.dpi,
        names=[n for n in names if n != "time_mlp"] if names else list(FIGURES),
    )
    if args.checkpoint is not None and (names is None or "time_mlp" in names):
        model, cfg = load_model(args.checkpoint)
        title = f"trained: {args.checkpoint} (EMA weights)"
        png = args.out / "time_mlp.png"
        steps = cfg.diffusion.num_timesteps
        paths.append(plot_time_mlp(model.time_embedder.cpu(), png, num_timesteps=steps, title=title, dpi=args.dpi))
    for path in paths:
        print(path)
    if args.checkpoint is None:
        print("(no --checkpoint: time_mlp.png, the embedding after a trained MLP, not drawn)")
    return 0


def _export(args) -> int:
    existing = [p for p in (args.out / "config.json", args.out / "model.safetensors") if p.exists()]
    if existing and not args.overwrite:
        raise FileExistsError(f"{existing[0]} exists: pass --overwrite to replace it, or choose another --out")
    folder = export_run(args.run, args.out)
    size = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    print(f"EMA weights and config -> {folder} ({size:.1f} MB)")
    return 0


COMMANDS = {
    "train": _train,
    "distill": _distill,
    "sample": _sample,
    "evaluate": _evaluate,
    "compare": _compare,
    "inspect": _inspect,
    "detect": _detect,
    "figures": _figures,
    "export": _export,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # overrides placed after an option: `sample RUN --out X key=value`
        if getattr(args, "overrides", None) is not None and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    args.argv = argv  # what the launcher of --nproc-per-node runs again in each process
    handler = logging.StreamHandler(sys.stderr)  # the package's messages, one a line, on stderr
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    verbose = args.verbose or bool(os.environ.get("TIMESTEP_EMBED_DEBUG"))
    log.setLevel(logging.DEBUG if verbose else logging.WARNING if args.quiet else logging.INFO)
    if int(os.environ.get("RANK", "0")) > 0:  # under torchrun, rank 0 speaks for all
        log.setLevel(logging.ERROR)
    previous = _stop_once()
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"timestep-embed {args.command}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if verbose:
            raise
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"timestep-embed {args.command}: error: {message[:2000]}", file=sys.stderr)
        return 2
    finally:
        log.removeHandler(handler)
        for signum, handler_before in (previous or {}).items():
            signal.signal(signum, handler_before)


def _stop_once() -> dict | None:
    """Ctrl-C (SIGINT) and SIGTERM (torchrun stopping its workers, a scheduler's kill) stop the command once:
    training saves its checkpoint and stops. A second signal while it stops (a launcher passing on the Ctrl-C its
    processes got too, a second key press) is ignored, so the save completes. Returns the previous handlers (None
    off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    stopping: list[int] = []

    def interrupt(signum, frame):
        if not stopping:
            stopping.append(signum)
            raise KeyboardInterrupt

    return {signum: signal.signal(signum, interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}


if __name__ == "__main__":
    sys.exit(main())
