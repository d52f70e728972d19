"""Compare every preset with diffusers (accuracy and speed); same as `timestep-embed compare`.

python scripts/compare_diffusers.py --out runs/compare
"""

import sys

from timestep_embed.cli import main

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
