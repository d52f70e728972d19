"""Coverage of the installed diffusers' model zoo: every model class whose forward takes a timestep,
its tiny random-weight model, and four checks (contract, patch_diffusers_model, trace_time_path,
TimestepEmbedder.from_state_dict), each "ok" or the precise reason it is not.

    python scripts/diffusers_coverage.py                    # markdown on stdout
    python scripts/diffusers_coverage.py --classes FluxTransformer2DModel SD3Transformer2DModel
    python scripts/diffusers_coverage.py --json coverage.json

Prints "covered / found" first. Exit code 0 (the report is the product; CI reads the numbers).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tiny models are test fixtures
from tests.fixtures.coverage import CHECKS, coverage, coverage_table  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--classes", nargs="*", help="diffusers class names (default: all with a time argument)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # diffusers' deprecation and dtype notes on tiny configs
    logging.disable(logging.WARNING)
    rows = coverage(args.classes)
    print(coverage_table(rows))
    if args.json:
        data = [{"class": r.name, "arguments": list(r.arguments), **{c: r.results[c] for c in CHECKS}} for r in rows]
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
