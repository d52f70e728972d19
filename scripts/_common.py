"""What the scripts share: the config arguments, one-line errors, scoring over sampling seeds, and
writing results as JSON and as a Markdown table.

Scripts run as ``python scripts/NAME.py``, so this module is importable as ``_common`` from them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from timestep_embed.ddpm import ConfigError, RunConfig, Runtime, generate, run_config, score, shipped_configs
from timestep_embed.files import atomic_write_bytes

SCORES = ("fd", "confidence", "entropy")


def fail(message: str):
    """One line on stderr and exit code 2, as the CLI does for what the user can fix."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def add_config_args(parser: argparse.ArgumentParser, out: str | None = None) -> None:
    """``--config`` (a shipped name or a YAML path), ``--set KEY=VALUE ...`` and, with ``out``, ``--out``."""
    names = ", ".join(shipped_configs())
    parser.add_argument("--config", default="mnist", help=f"the base config: a shipped name ({names}) or a path")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    if out is not None:
        parser.add_argument("--out", type=Path, default=Path(out), help=f"output folder (default {out})")


def load_config(args: argparse.Namespace, extra: Sequence[str] = ()) -> RunConfig:
    """``--config`` with the script's ``extra`` overrides, then the user's ``--set`` ones (which win); a
    config mistake exits with one line."""
    try:
        return RunConfig.load(args.config, extra).with_overrides(args.set)
    except ConfigError as err:
        fail(str(err))


def score_seeds(model: torch.nn.Module, cfg: RunConfig, rt: Runtime, seeds: Iterable[int]) -> list[dict]:
    """For each sampling seed: ``cfg.sample.num_samples`` digits from ``model``, scored by the run's
    evaluator; ``{"seed", "seconds", "fd", "confidence", "entropy"}`` per seed."""
    rows = []
    for seed in seeds:
        c = cfg.with_overrides([f"sample.seed={seed}"])
        t0 = time.perf_counter()
        x = generate(model, c, rt)
        seconds = time.perf_counter() - t0
        s = score(c, x, references=False)
        rows.append({"seed": seed, "seconds": seconds, **{k: s[k] for k in SCORES}})
    return rows


def mean_spread(rows: Sequence[dict], key: str) -> tuple[float, float]:
    """The mean of ``key`` over rows and its spread (max - min)."""
    values = [r[key] for r in rows]
    return statistics.fmean(values), max(values) - min(values)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A Markdown table; floats with 4 significant digits."""
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def write_json(path: Path, data) -> Path:
    """``data`` as indented JSON at ``path``, atomically."""
    return atomic_write_bytes(path, (json.dumps(data, indent=2, default=str) + "\n").encode())


def finished_with(run: Path, cfg: RunConfig) -> bool:
    """Whether the run folder ``run`` holds a finished run (its metrics.json) of this very config: a sweep reuses it,
    and trains again a run of other settings, or one whose checkpoint cannot be read (half-written, removed)."""
    if not (run / "metrics.json").is_file():
        return False
    try:
        return run_config(run) == cfg
    except (OSError, ValueError):  # CheckpointError and ConfigError are ValueErrors: not this config's finished run
        return False


def command_line() -> str:
    """This script's command line, as a reader would type it again."""
    return "python " + " ".join(["scripts/" + Path(sys.argv[0]).name, *sys.argv[1:]])
