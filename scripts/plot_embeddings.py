#!/usr/bin/env python
"""Draw the embedding figures: the same code as ``timestep-embed figures``.

python scripts/plot_embeddings.py --out docs/figures [--checkpoint runs/x/checkpoint.safetensors]
"""

from __future__ import annotations

import argparse
import sys

from timestep_embed.figures import add_cli_arguments, run_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cli_arguments(parser)
    sys.exit(run_cli(parser.parse_args()))
