#!/usr/bin/env python
"""Make the evaluator's classifier that ships with the package: timestep_embed/ddpm/evaluator.safetensors.

    python scripts/make_evaluator.py            # train, write the file, print its digest for classifier.py
    python scripts/make_evaluator.py --check    # train again and compare with the shipped file

The default ``ClassifierConfig`` (seed 0) trained on the 4000 built-in training digits on one CPU thread
(``torch.set_num_threads(1)``: one order of every reduction), then its floating-point tensors rounded to
float16 (half the file; the evaluator computes in float32 from these values). The held-out accuracy is
measured on the rounded weights, on the 1000 built-in held-out digits. The digest printed is
``weights_digest`` of the stored tensors: ``SHIPPED_SHA256`` in timestep_embed/ddpm/classifier.py must
be it, and a test checks that the file matches.

``--check`` retrains and compares. Bit for bit only on the CPU family and torch build that made the file
(float reductions are ordered by the CPU's vector kernels, so another family trains slightly different
weights from the same seed); elsewhere it reports the held-out accuracy and how often the two classifiers
agree, and passes when they are equivalent (accuracy within ``--tolerance``, the same class for at least
``--min-agreement`` of the held-out digits). The FD of a run does not depend on this: every machine scores
with the shipped file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch
from _common import fail

from timestep_embed.ddpm import ClassifierConfig, load_mnist
from timestep_embed.ddpm.checkpoint import save_checkpoint
from timestep_embed.ddpm.classifier import (
    SHIPPED,
    MnistClassifier,
    cache_key,
    classify,
    shipped_classifier,
    train_classifier,
    weights_digest,
)
from timestep_embed.files import versions


def make(progress: bool) -> tuple[dict[str, torch.Tensor], dict, MnistClassifier]:
    """The stored (float16) tensors, their metadata and the float32 classifier made from them."""
    torch.set_num_threads(1)
    config = ClassifierConfig()
    images, labels = load_mnist("builtin", "train")
    start = time.perf_counter()
    model = train_classifier(images, labels, config, progress=progress)
    seconds = time.perf_counter() - start
    stored = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    rounded = MnistClassifier(config.width, config.feature_dim)
    rounded.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in stored.items()})
    held_x, held_y = load_mnist("builtin", "heldout")
    accuracy = (classify(rounded, held_x)[0].argmax(1) == held_y).double().mean().item()
    info = {
        "config": dataclasses.asdict(config),
        "data": "builtin",
        "key": cache_key(images, labels, config),
        "heldout_accuracy": accuracy,
        "heldout_num": len(held_x),
        "threads": 1,
        "stored_dtype": "float16",
        "train_seconds": round(seconds, 1),
        "weights_sha256": weights_digest(stored),
        "versions": versions(),
    }
    return stored, info, rounded.eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SHIPPED, help="where to write (default: the shipped file)")
    parser.add_argument("--check", action="store_true", help="train again and compare with the shipped file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--tolerance", type=float, default=0.01, help="--check: largest held-out accuracy gap")
    parser.add_argument("--min-agreement", type=float, default=0.97, help="--check: least held-out agreement")
    args = parser.parse_args(argv)
    tensors, info, retrained = make(progress=not args.quiet)
    print(f"held-out accuracy {info['heldout_accuracy']:.4f} on {info['heldout_num']} digits, "
          f"trained in {info['train_seconds']} s on 1 thread")  # fmt: skip
    if args.check:
        shipped, shipped_info = shipped_classifier()
        print(f"shipped   {shipped_info['weights_sha256']} (made with {shipped_info['versions']})\n"
              f"retrained {info['weights_sha256']}")  # fmt: skip
        if shipped_info["weights_sha256"] == info["weights_sha256"]:
            print("the same, bit for bit")
            return 0
        held_x, _ = load_mnist("builtin", "heldout")
        agree = (classify(shipped, held_x)[0].argmax(1) == classify(retrained, held_x)[0].argmax(1)).double().mean()
        gap = abs(info["heldout_accuracy"] - shipped_info["heldout_accuracy"])
        print(f"not bit for bit on this CPU and torch: held-out accuracy {info['heldout_accuracy']:.4f} against "
              f"the shipped {shipped_info['heldout_accuracy']:.4f}, the same class for {agree:.1%} of the held-out "
              "digits")  # fmt: skip
        if gap > args.tolerance or agree < args.min_agreement:
            fail(f"the retrained classifier is not equivalent (accuracy gap {gap:.4f} > {args.tolerance} "
                 f"or agreement {agree:.4f} < {args.min_agreement})")  # fmt: skip
        print("equivalent")
        return 0
    save_checkpoint(args.out, tensors, info)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")
    print(f'SHIPPED_SHA256 = "{info["weights_sha256"]}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
