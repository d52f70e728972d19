"""Test-session settings shared by every test file."""

import torch

# One intra-op thread: the test machines have 2 cores, and OpenMP threads spin-waiting on each
# other make tiny-model tests an order of magnitude slower when anything else runs.
torch.set_num_threads(1)
