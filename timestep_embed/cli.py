"""The `timestep-embed` command line.

Each subcommand lives in the module that owns its work; that module provides two functions,
``add_cli_arguments(parser)`` and ``run_cli(args) -> int``. This file only routes, importing the
owner lazily so ``timestep-embed --help`` stays fast and optional dependencies stay optional.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (owning module, one-line help)
SUBCOMMANDS = {
    "train": ("timestep_embed.train", "train, sample and evaluate a DDPM on MNIST (the main job)"),
    "sample": ("timestep_embed.sample", "draw samples from a checkpoint into a .npy and a PNG grid"),
    "evaluate": ("timestep_embed.evaluate", "score samples with the MNIST classifier (Frechet distance...)"),
    "compare": ("timestep_embed.compare", "compare every preset with diffusers: accuracy and speed"),
    "detect": ("timestep_embed.detect", "identify the convention of a dumped [N, dim] embedding matrix"),
    "figures": ("timestep_embed.figures", "draw the figures that show the embedding's properties"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="timestep-embed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
        if name in _requested_commands():
            importlib.import_module(module_name).add_cli_arguments(sub_parser)
    return parser


def _requested_commands() -> set[str]:
    # Only the module of the subcommand actually named on the command line is imported.
    return {arg for arg in sys.argv[1:] if arg in SUBCOMMANDS}


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    parser = build_parser()
    args = parser.parse_args()
    if args.command is None:
        parser.print_help()
        return 2
    return int(importlib.import_module(args._module).run_cli(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
