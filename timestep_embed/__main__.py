"""``python -m timestep_embed``: the same command line as ``timestep-embed``."""

import sys

from .cli import main

sys.exit(main())
