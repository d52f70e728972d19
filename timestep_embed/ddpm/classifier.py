"""The evaluator's MNIST classifier, trained on the training split only: shipped with the package.

A small CNN (3 conv blocks, a 128-d penultimate layer whose features the Frechet distance uses),
trained with shift augmentation and outlier exposure (pixel noise -> uniform prediction) so that
noise gets confidence ~0.1, not ~1.0.

The default classifier on the built-in digits is the file `SHIPPED` (made by
``scripts/make_evaluator.py`` on one CPU thread, weights stored in float16, its digest
`SHIPPED_SHA256` checked at every load): the same samples get the same scores on every machine.
Other settings (a ``ClassifierConfig`` of your own, or full MNIST from IDX files) are trained on first
use, seeded, and cached as safetensors under ``$TIMESTEP_EMBED_CACHE`` (default
``~/.cache/timestep_embed/``); the cache key hashes the training data, the hyperparameters and
`CLASSIFIER_VERSION`. Scoring runs on the CPU on one thread, so its arithmetic is the same
whatever the machine's thread count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..progress import progress as progress_bar
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .data import load_mnist
from .schema import SEEDS, check_section

__all__ = [
    "ClassifierConfig",
    "CLASSIFIER_VERSION",
    "SHIPPED",
    "SHIPPED_SHA256",
    "shipped_classifier",
    "MnistClassifier",
    "train_classifier",
    "default_cache_dir",
    "cache_key",
    "load_classifier",
    "classify",
    "weights_digest",
]

log = logging.getLogger(__name__)

CLASSIFIER_VERSION = 1  # bump when the architecture or training loop changes (part of the cache key)
SHIPPED = Path(__file__).with_name("evaluator.safetensors")  # the default classifier, built-in digits
SHIPPED_SHA256 = (
    "1d592f18a92e01784cb39ebcb1a0e42bc2b91fb198a1cdfd56593e5a63dbd84f"  # weights_digest of SHIPPED (make_evaluator.py)
)


@dataclass(frozen=True)
class ClassifierConfig:
    """The evaluator's MNIST classifier (``eval.classifier``); changing any field trains (and caches) a new one."""

    KEY: ClassVar[str] = "eval.classifier"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("width", "epochs", "batch_size", "lr", "feature_dim", "max_train"), "> 0"),
        **dict.fromkeys(("weight_decay", "negatives"), ">= 0"),
        "seed": SEEDS,
    }
    width: int = 32  # channels of the first conv; then 2x and 4x
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3  # one-cycle peak
    weight_decay: float = 1e-4
    feature_dim: int = 128  # penultimate features used for the Frechet distance
    seed: int = 0
    max_train: int = 12000  # cap for full MNIST (60k), a seeded subset
    negatives: int = 16  # non-digit images per batch trained towards the uniform distribution (0 = off)

    def __post_init__(self) -> None:
        check_section(self)


class MnistClassifier(nn.Module):
    """3 conv blocks (28 -> 14 -> 7 -> 3) and a 2-layer head. forward -> (logits [B,10], features [B,F])."""

    def __init__(self, width: int = 32, feature_dim: int = 128):
        super().__init__()
        w, layers, c_in = width, [], 1
        for c_out in (w, 2 * w, 4 * w):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c_out
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.features = nn.Sequential(nn.Linear(4 * w * 9, feature_dim), nn.ReLU())
        self.head = nn.Linear(feature_dim, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = self.features(self.body(x))
        return self.head(feats), feats


def _random_shift(x: torch.Tensor, generator: torch.Generator, max_shift: int = 2) -> torch.Tensor:
    # Augmentation: shift each digit by up to 2 px (background -1 fills in); one gather, no loop.
    n, s = x.shape[0], max_shift
    padded = F.pad(x, (s, s, s, s), value=-1.0)
    dy, dx = torch.randint(0, 2 * s + 1, (2, n), generator=generator)
    rows = (dy[:, None] + torch.arange(28))[:, None, :, None].expand(n, 1, 28, 28 + 2 * s)
    padded = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(28))[:, None, None, :].expand(n, 1, 28, 28)
    return padded.gather(3, cols)


def _negatives(n: int, generator: torch.Generator) -> torch.Tensor:
    """n non-digits in [-1, 1]: N(0, s^2) pixel noise clipped, s ~ U(0.3, 1.5), some with a random offset."""
    scale = 0.3 + 1.2 * torch.rand(n, 1, 1, 1, generator=generator)
    offset = torch.rand(n, 1, 1, 1, generator=generator) * 2 - 1
    return (offset * 0.5 + scale * torch.randn(n, 1, 28, 28, generator=generator)).clamp(-1, 1)


def train_classifier(
    images: torch.Tensor, labels: torch.Tensor, config: ClassifierConfig | None = None, progress: bool = False
) -> MnistClassifier:
    """Train on CPU, seeded (init, shuffling and augmentation all from ``config.seed``)."""
    config = config or ClassifierConfig()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = MnistClassifier(config.width, config.feature_dim)
    g = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = max(1, len(images) // config.batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch)
    bar = progress_bar(config.epochs * steps_per_epoch, "training the MNIST evaluator", "step", enabled=progress)
    model.train()
    for _ in range(config.epochs):
        order = torch.randperm(len(images), generator=g)
        for k in range(steps_per_epoch):
            idx = order[k * config.batch_size : (k + 1) * config.batch_size]
            x = _random_shift(images[idx], g)
            if config.negatives:
                # Outlier exposure (Hendrycks et al. 2019): pixel noise -> uniform prediction, so
                # that "confidence" separates digits from garbage (without it noise scores ~1.0).
                # One batch, so BatchNorm's statistics see digits and negatives in a fixed ratio.
                x = torch.cat([x, _negatives(config.negatives, g)])
            logits = model(x)[0]
            loss = F.cross_entropy(logits[: len(idx)], labels[idx])
            if config.negatives:
                loss = loss + 0.5 * -logits[len(idx) :].log_softmax(1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    return model.eval()


def default_cache_dir() -> Path:
    """``$TIMESTEP_EMBED_CACHE`` or ``~/.cache/timestep_embed``."""
    return Path(os.environ.get("TIMESTEP_EMBED_CACHE") or Path.home() / ".cache" / "timestep_embed")


def _training_set(data: str, config: ClassifierConfig) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = load_mnist(data, "train")
    if len(images) > config.max_train:  # seeded subset (full MNIST only)
        keep = torch.randperm(len(images), generator=torch.Generator().manual_seed(config.seed))[: config.max_train]
        images, labels = images[keep.sort().values], labels[keep.sort().values]
    return images, labels


def cache_key(images: torch.Tensor, labels: torch.Tensor, config: ClassifierConfig) -> str:
    """sha256 over the training pixels, labels, hyperparameters and the code version."""
    h = hashlib.sha256()
    h.update(images.numpy().tobytes())
    h.update(labels.numpy().tobytes())
    h.update(json.dumps({**dataclasses.asdict(config), "version": CLASSIFIER_VERSION}, sort_keys=True).encode())
    return h.hexdigest()


def load_classifier(
    data_source: str = "builtin",
    config: ClassifierConfig | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    threads: int = 2,
) -> tuple[MnistClassifier, dict]:
    """The classifier for ``data_source``'s training split: the shipped one for the built-in digits and
    the default config, else trained on first use (at most ``threads`` threads) and cached. Returns
    (model in eval mode on CPU, info dict with heldout_accuracy, key, cache_file, cached, and
    weights_sha256)."""
    data, config = data_source, config or ClassifierConfig()
    if data == "builtin" and config == ClassifierConfig():
        return shipped_classifier()
    images, labels = _training_set(data, config)
    key = cache_key(images, labels, config)
    path = Path(cache_dir or default_cache_dir()) / f"mnist_classifier_{key[:20]}.safetensors"
    model = MnistClassifier(config.width, config.feature_dim)
    if path.is_file():
        cached = _trusted(path, key, model)
        if cached is not None:
            return model.eval(), {**cached, "cache_file": str(path), "cached": True}
    old_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, old_threads)))
    try:
        start = time.perf_counter()
        model = train_classifier(images, labels, config, progress)
        seconds = time.perf_counter() - start
        held_x, held_y = load_mnist(data, "heldout")
        logits, _ = classify(model, held_x)
    finally:
        torch.set_num_threads(old_threads)
    info = {
        "heldout_accuracy": (logits.argmax(1) == held_y).double().mean().item(),
        "key": key,
        "config": dataclasses.asdict(config),
        "train_seconds": round(seconds, 2),
        "data": str(data),
        "weights_sha256": weights_digest(model.state_dict()),
    }
    save_checkpoint(path, model.state_dict(), info)
    return model, {**info, "cache_file": str(path), "cached": False}


def shipped_classifier() -> tuple[MnistClassifier, dict]:
    """The shipped classifier (`SHIPPED`) in float32, after checking its weights' digest."""
    tensors, info = load_checkpoint(SHIPPED)
    if weights_digest(tensors) != SHIPPED_SHA256:
        raise CheckpointError(f"{SHIPPED}: its weights are not the shipped evaluator's; reinstall timestep-embed")
    config = ClassifierConfig(**info["config"])
    model = MnistClassifier(config.width, config.feature_dim)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()})
    return model.eval(), {**info, "cache_file": str(SHIPPED), "cached": True}


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over the names, shapes, dtypes and bytes of a state dict (what the cache file must hold)."""
    h = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{list(tensor.shape)}:{tensor.dtype}".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-d num_batches_tracked too
    return h.hexdigest()


def _trusted(path: Path, key: str, model: MnistClassifier) -> dict | None:
    """The cached classifier's info when the file is this classifier (its key) with the weights it was
    saved with (their digest), loaded into ``model``; None (and a warning) otherwise."""
    try:
        tensors, info = load_checkpoint(path)
        if info.get("key") != key or info.get("weights_sha256") != weights_digest(tensors):
            raise CheckpointError(f"{path}: not the classifier its name says, or its weights changed")
        model.load_state_dict(tensors)
    except (CheckpointError, RuntimeError) as exc:
        log.warning("the cached evaluator classifier is not trusted (%s): training it again", exc)
        return None
    return info


@torch.no_grad()
def classify(model: MnistClassifier, images: torch.Tensor, batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N, 10], features [N, F]) as float64 for images [N, 1, 28, 28] in [-1, 1], on the CPU on
    one thread (so the reductions run in one order whatever the machine's thread count)."""
    model, threads = model.eval(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        outs = [model(images[i : i + batch_size].float().cpu()) for i in range(0, len(images), batch_size)]
    finally:
        torch.set_num_threads(threads)
    return torch.cat([o[0] for o in outs]).double(), torch.cat([o[1] for o in outs]).double()
