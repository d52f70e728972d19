"""Train, sample and evaluate the MNIST DDPM: the same as ``timestep-embed train``.

    python scripts/train_ddpm_mnist.py                              # configs/ddpm_mnist.yaml, <= 15 min on 2 CPU cores
    python scripts/train_ddpm_mnist.py --config configs/ddpm_mnist_smoke.yaml --out-dir runs/smoke
    python scripts/train_ddpm_mnist.py train.minutes=3 sample.steps=250
    torchrun --nproc_per_node 2 scripts/train_ddpm_mnist.py train.steps=2000 train.minutes=null

Run folder: config.yaml, checkpoint.safetensors, log.jsonl, loss_curve.png, samples.npy, samples.png,
metrics.json. Ctrl-C saves a checkpoint; continue with --resume.
"""

import argparse
import sys

from timestep_embed.train import add_cli_arguments, run_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cli_arguments(parser)
    sys.exit(run_cli(parser.parse_args()))
