"""Score generated digits with a small MNIST classifier trained here, on the training split only.

Reported for the samples, and for two references at the SAME sample count so the scale is clear:

* ``fd``: Frechet distance between Gaussians fitted to the classifier's penultimate features
  (128-d) of the samples and of the held-out digits (1000 built-in, or the 10k IDX test set):
  |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)), in float64 (FID's formula on our features);
* ``confidence``: mean max-softmax probability (does each sample look like some digit?);
* ``entropy``: entropy in nats of the histogram of predicted classes (varied? max ln 10 = 2.303);
* ``real_*``: N training digits (seeded random subset, N = number of samples) scored the same way
  against the held-out digits: what a generator reproducing real digits gets at this N;
* ``noise_*``: N images of N(0, 1) noise clipped to [-1, 1]: what an untrained sampler gets;
* ``copies``: the fraction of samples that sit nearer to a training digit (L2 in pixels) than all but 1% of the
  held-out digits do (``copy_distance``, the held-out digits' 1st percentile of their own nearest-training
  distances); digits drawn like the held-out ones give about ``heldout_copies`` (0.01), a model that reproduces
  its training digits far more. ``nearest_ratio``: the samples' median nearest-training distance over the
  held-out digits' (below 1: closer to the training set than unseen digits are).

FD is biased upwards at small N, hence references at the same N. The classifier is
[`classifier`][timestep_embed.ddpm.classifier]'s, trained on the training split only and cached.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch

from ..checks import real_array
from .classifier import ClassifierConfig, classify, load_classifier
from .data import crop_to_28, data_stamp, load_mnist

__all__ = [
    "frechet_distance",
    "nearest_distances",
    "copy_scores",
    "prepare_samples",
    "evaluate_samples",
    "score",
    "format_report",
]

COPY_QUANTILE = 0.01  # a sample is a copy when nearer to a training digit than 99% of the held-out digits are
# The report flags copies above this multiple of the held-out rate: at 500 samples and a true rate of 1%, chance
# alone goes past 2% (11 samples or more) 1.3% of the time (binomial tail).
COPIES_FLAGGED = 2.0


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
    fd = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * tr_sqrt)
    return max(fd, 0.0)  # a distance: rounding of two equal sets can leave -1e-5


def nearest_distances(x: torch.Tensor, reference: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Each image's L2 distance to its nearest image of ``reference`` (float64 [N]; images [N, ...] and
    [M, ...] of one shape), in float64 on the CPU, ``chunk`` rows at a time."""
    ref = reference.flatten(1).double().cpu()
    ref_sq = (ref * ref).sum(1)
    out = []
    for start in range(0, len(x), chunk):
        a = x[start : start + chunk].flatten(1).double().cpu()
        sq = (a * a).sum(1, keepdim=True) + ref_sq[None] - 2 * a @ ref.T  # |a - r|^2 for every pair
        out.append(sq.min(1).values.clamp(min=0).sqrt())
    return torch.cat(out)


def copy_scores(samples: torch.Tensor, train: torch.Tensor, held: torch.Tensor) -> dict:
    """``copies``, ``copy_distance``, ``heldout_copies`` and ``nearest_ratio`` of ``samples`` against the ``train``
    digits (see the module docstring), both [N, 1, 28, 28] in [-1, 1]; ``held``: the held-out digits'
    nearest-training distances ``[M]`` (`nearest_distances` of them against ``train``; `heldout_distances`)."""
    threshold = float(torch.quantile(held, COPY_QUANTILE))
    mine = nearest_distances(samples, train)
    return {
        "copies": float((mine < threshold).double().mean()),
        "copy_distance": threshold,
        "heldout_copies": float((held < threshold).double().mean()),
        "nearest_ratio": float(mine.median() / held.median()),
    }


def heldout_distances(data_source: str) -> torch.Tensor:
    """The held-out digits' nearest-training distances for a data source (computed once per process and state of
    its files: the same for every sampling it scores)."""
    return _heldout_distances(data_source, data_stamp(data_source))


@functools.lru_cache(maxsize=4)
def _heldout_distances(data_source: str, _stamp: tuple) -> torch.Tensor:
    train, _ = load_mnist(data_source, "train")
    held, _ = load_mnist(data_source, "heldout")
    return nearest_distances(crop_to_28(held), crop_to_28(train))


def _scores(prefix: str, logits: torch.Tensor, feats: torch.Tensor, ref_feats: torch.Tensor) -> dict:
    probs = logits.softmax(1)
    hist = torch.bincount(probs.argmax(1), minlength=10).double()
    p = hist[hist > 0] / hist.sum()
    return {
        f"{prefix}fd": frechet_distance(feats, ref_feats),
        f"{prefix}confidence": probs.max(1).values.mean().item(),
        f"{prefix}entropy": 0.0 - float((p * p.log()).sum()),  # 0.0 - x: one class gives 0.0, not -0.0
        f"{prefix}class_histogram": hist.long().tolist(),
    }


def prepare_samples(samples: torch.Tensor | np.ndarray) -> torch.Tensor:
    """[N, 1, 28|32, 28|32] or [N, 28|32, 28|32] real numbers in [-1, 1] -> float32 [N, 1, 28, 28] (center crop)."""
    x = torch.as_tensor(real_array(samples, "samples")).float()
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.shape[1] != 1 or x.shape[-1] not in (28, 32) or x.shape[-2] != x.shape[-1]:
        raise ValueError(f"samples of shape {tuple(x.shape)}: expected [N, 1, 28|32, 28|32] or [N, 28|32, 28|32]")
    if len(x) < 2:
        raise ValueError(f"samples: need at least 2 images, got {len(x)}")
    broken = int((~torch.isfinite(x.flatten(1))).any(1).sum())
    if broken:
        raise ValueError(f"samples: {broken} of {len(x)} images hold NaN or inf values")
    if x.min() < -1 or x.max() > 1:  # what a sampler gives is clipped to [-1, 1]: other values are another scale
        raise ValueError(
            f"samples range [{x.min():.3g}, {x.max():.3g}]: expected [-1, 1] (pixel / 127.5 - 1); clip them first"
        )
    return crop_to_28(x)


def evaluate_samples(
    samples,
    config: ClassifierConfig | None = None,
    data_source: str = "builtin",
    cache_dir: str | Path | None = None,
    references: bool = True,
    progress: bool = False,
) -> dict:
    """Score ``samples`` [N, 1, 28|32, 28|32] in [-1, 1] (see the module docstring).

    ``config``: the evaluator's [`ClassifierConfig`][timestep_embed.ddpm.ClassifierConfig] (None: the defaults). Returns
    a flat JSON-able dict: ``fd``, ``confidence``, ``entropy``, ``class_histogram`` for the samples; the same with
    prefixes ``real_`` (N training digits, at most all of them, vs held-out) and ``noise_`` (N clipped N(0,1) images);
    ``copies``, ``copy_distance``, ``heldout_copies``, ``nearest_ratio`` (the memorisation check);
    ``num_samples``, ``max_entropy`` (ln 10), ``classifier_accuracy`` (held-out), ``heldout_source``,
    ``heldout_num``, ``classifier_cache_file``, ``classifier_cached``."""
    x = prepare_samples(samples)
    model, info = load_classifier(data_source, config, cache_dir, progress)
    held_x, _ = load_mnist(data_source, "heldout")
    train_x, _ = load_mnist(data_source, "train")
    _, held_feats = classify(model, held_x)
    result = {"num_samples": len(x), **_scores("", *classify(model, x), held_feats)}
    result.update(copy_scores(x, crop_to_28(train_x), heldout_distances(str(data_source))))
    if references:
        g = torch.Generator().manual_seed(1234)
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


def score(cfg, samplings, references: bool = True, progress: bool = False) -> dict:
    """A run's scores with its own evaluator settings (``cfg``: a ``RunConfig``: its classifier and data
    source). ``samplings``: one set of samples, or several (one per sampling seed): ``fd``,
    ``confidence`` and ``entropy`` are then the means over the sets, ``*_spread`` their max - min, and
    ``samplings`` lists each set's scores; the references (``real_*``, ``noise_*``) are computed once."""
    sets = [samplings] if isinstance(samplings, (torch.Tensor, np.ndarray)) else list(samplings)
    each = [
        evaluate_samples(x, cfg.eval.classifier, cfg.data.source, references=references and not i, progress=progress)
        for i, x in enumerate(sets)
    ]
    result = dict(each[0])
    for key in ("fd", "confidence", "entropy", "copies", "nearest_ratio"):
        values = [e[key] for e in each]
        result[key], result[f"{key}_spread"] = sum(values) / len(values), max(values) - min(values)
    kept = ("fd", "confidence", "entropy", "copies", "nearest_ratio", "class_histogram")
    result["samplings"] = [{k: e[k] for k in kept} for e in each]
    return result


def format_report(m: dict) -> str:
    """A small table: samples (each sampling and their mean, when there are several), real-vs-real and
    noise rows (those present in ``m``)."""
    each = m.get("samplings", [])
    rows = [(f"sampling {k + 1}", s) for k, s in enumerate(each)] if len(each) > 1 else []
    rows.append(("samples" if len(each) < 2 else f"mean of {len(each)}", m))
    rows += [(name, {k[len(p) :]: v for k, v in m.items() if k.startswith(p)}) for name, p in
             (("real_vs_real", "real_"), ("noise", "noise_")) if p + "fd" in m]  # fmt: skip
    lines = [f"{'':14}{'N':>6}{'Frechet dist.':>15}{'confidence':>12}{'class entropy':>15}"]
    lines += [
        f"{name:14}{m['num_samples']:>6}{r['fd']:>15.2f}{r['confidence']:>12.3f}{r['entropy']:>15.3f}"
        for name, r in rows
    ]
    lines.append(
        f"(entropy max ln 10 = 2.303; evaluator held-out accuracy {m['classifier_accuracy']:.2%}"
        f" on {m['heldout_num']} digits)"
    )
    if "copies" in m:
        lines.append(
            f"copies of training digits: {m['copies']:.2%} of the samples (held-out digits: {m['heldout_copies']:.2%});"
            f" median nearest-training distance {m['nearest_ratio']:.2f}x the held-out digits'"
        )
        if m["copies"] > COPIES_FLAGGED * m["heldout_copies"]:
            lines.append(
                f"  over {COPIES_FLAGGED:g}x the held-out digits' rate: the model draws training digits back, which "
                "lowers the Frechet distance without drawing new digits"
            )
    return "\n".join(lines)
