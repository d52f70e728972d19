"""The port-bug zoo: every bug class of tests/fixtures/zoo.py planted into every family it applies to,
checked with verify_port on random weights and random timesteps; then the correct pairs (no alarm expected).

    python scripts/port_bug_zoo.py                 # the whole zoo, markdown on stdout
    python scripts/port_bug_zoo.py --bugs xy_swapped halves_swapped --families sd3

Prints the summary table, the class x family grid, the false alarms, and the time per check (median
and max, diffusers imported before the first one is timed). Exit code 1 when a bug goes undetected
or a correct pair raises an alarm.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the zoo is a test fixture
from tests.fixtures.zoo import ZOO, ZOO_FAMILIES, false_alarms, run_zoo, zoo_table  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bugs", nargs="*", choices=[b.name for b in ZOO], help="bug classes (default: all)")
    parser.add_argument("--families", nargs="*", choices=list(ZOO_FAMILIES), help="families (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and timesteps")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # the planted bugs round timesteps on purpose; diffusers' cast notes
    logging.disable(logging.WARNING)
    results = run_zoo(args.bugs, args.families, args.seed)
    alarms = false_alarms(args.families, args.seed)
    print(zoo_table(results, alarms))
    times = [r.seconds for r in results]
    missed = [r for r in results if not (r.detected and r.expected)]
    print(f"{len(results)} checks ({len({r.bug for r in results})} bug classes x their families): "
          f"{len(results) - len(missed)} detected with the expected stage and cause; "
          f"{sum(not v.agree for *_, v in alarms)} false alarms in {len(alarms)} correct pairs; "
          f"seconds per check: median {statistics.median(times):.2f}, max {max(times):.2f}")  # fmt: skip
    return 1 if missed or any(not v.agree for *_, v in alarms) else 0


if __name__ == "__main__":
    sys.exit(main())
