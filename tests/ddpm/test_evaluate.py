"""The evaluator: Frechet distance, sample checks, the cached classifier, references, the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from timestep_embed.cli import main
from timestep_embed.ddpm import RunConfig, classifier, evaluate
from timestep_embed.ddpm.classifier import ClassifierConfig
from timestep_embed.ddpm.data import load_mnist

from .test_data import write_mnist

TINY = ClassifierConfig(width=4, epochs=1, feature_dim=16, batch_size=128, negatives=8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("classifier_cache")


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# --------------------------------------------------------------------------- Frechet distance
def test_frechet_distance_against_scipy_sqrtm():
    linalg = pytest.importorskip("scipy.linalg")
    rng = np.random.default_rng(0)
    a = rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8))
    b = rng.normal(size=(200, 8)) @ rng.normal(size=(8, 8)) + 0.5
    mu1, mu2, s1, s2 = a.mean(0), b.mean(0), np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    ref = ((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * linalg.sqrtm(s1 @ s2).real)
    assert evaluate.frechet_distance(a, b) == pytest.approx(ref, rel=1e-8)
    assert evaluate.frechet_distance(a, b) == pytest.approx(evaluate.frechet_distance(b, a), rel=1e-8)


def test_frechet_distance_properties():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(500, 5))
    assert abs(evaluate.frechet_distance(a, a)) < 1e-8
    shift = np.array([1.0, 2.0, 0, 0, 0])
    assert evaluate.frechet_distance(a, a + shift) == pytest.approx(5.0, rel=1e-8)  # same cov: |mu1 - mu2|^2
    one_d = evaluate.frechet_distance(a[:, :1], 3 * a[:, :1])  # 1-D: (mu1 - mu2)^2 + (s1 - s2)^2, s2 = 3 s1
    assert one_d == pytest.approx(4 * a[:, 0].mean() ** 2 + 4 * a[:, 0].var(ddof=1), rel=1e-8)
    # rank-deficient covariances (fewer samples than features) stay finite and >= 0
    assert 0 <= evaluate.frechet_distance(rng.normal(size=(5, 20)), rng.normal(size=(7, 20))) < 1e3
    with pytest.raises(ValueError, match="N >= 2"):
        evaluate.frechet_distance(a[:1], a)


# --------------------------------------------------------------------------- input checks
def test_prepare_samples_shapes_and_ranges():
    x = torch.rand(3, 1, 32, 32) * 2 - 1
    assert torch.equal(evaluate.prepare_samples(x), x[..., 2:30, 2:30])
    assert evaluate.prepare_samples(np.zeros((4, 28, 28), np.float32)).shape == (4, 1, 28, 28)
    with pytest.raises(ValueError, match=r"expected \[-1, 1\]"):
        evaluate.prepare_samples(torch.full((2, 1, 28, 28), 255.0))
    with pytest.raises(ValueError, match=r"expected \[N, 1, 28\|32, 28\|32\] or \[N, 28\|32, 28\|32\]"):
        evaluate.prepare_samples(torch.zeros(2, 3, 28, 28))
    with pytest.raises(ValueError, match="2 of 2 images hold NaN or inf"):
        evaluate.prepare_samples(torch.full((2, 1, 28, 28), float("nan")))
    one_pixel = torch.zeros(3, 1, 28, 28)
    one_pixel[1, 0, 5, 5] = float("inf")
    with pytest.raises(ValueError, match="1 of 3 images hold NaN or inf"):
        evaluate.prepare_samples(one_pixel)
    with pytest.raises(ValueError, match="need at least 2 images, got 1"):
        evaluate.prepare_samples(torch.zeros(1, 1, 28, 28))


# --------------------------------------------------------------------------- classifier and cache
def test_classifier_is_seeded_and_cached(cache, monkeypatch):
    model, info = classifier.load_classifier("builtin", TINY, cache)
    assert not info["cached"] and 0.3 < info["heldout_accuracy"] <= 1.0
    again, info2 = classifier.load_classifier("builtin", TINY, cache)
    assert info2["cached"] and info2["key"] == info["key"] and info2["heldout_accuracy"] == info["heldout_accuracy"]
    for (k, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    # the key covers hyperparameters and the training data
    x, y = load_mnist("builtin", "train")
    assert classifier.cache_key(x, y, TINY) != classifier.cache_key(x, y, ClassifierConfig(width=5, epochs=1))
    y2 = y.clone()
    y2[0] = (y2[0] + 1) % 10
    assert classifier.cache_key(x, y, TINY) != classifier.cache_key(x, y2, TINY)
    # the environment variable picks the default cache folder
    monkeypatch.setenv("TIMESTEP_EMBED_CACHE", str(cache / "env"))
    assert classifier.default_cache_dir() == cache / "env"


def test_training_is_deterministic():
    x, y = load_mnist("builtin", "train")
    cfg = ClassifierConfig(width=2, epochs=1, feature_dim=8, batch_size=256, negatives=4)
    a, b = classifier.train_classifier(x[:1024], y[:1024], cfg), classifier.train_classifier(x[:1024], y[:1024], cfg)
    for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q)


def test_random_shift_keeps_digits_and_background():
    x = torch.full((5, 1, 28, 28), -1.0)
    x[:, :, 10:18, 10:18] = 1.0
    shifted = classifier._random_shift(x, torch.Generator().manual_seed(0))
    assert shifted.shape == x.shape and torch.equal(shifted.sum((1, 2, 3)), x.sum((1, 2, 3)))
    moves = {(dy, dx) for a, b in zip(x, shifted, strict=True) for dy in range(-2, 3) for dx in range(-2, 3)
             if torch.equal(b, a.roll((dy, dx), (1, 2)))}  # fmt: skip
    assert len(moves) > 1  # each digit moved by its own draw of up to 2 px (all 5 in place: 25^-4)


# --------------------------------------------------------------------------- evaluate_samples and CLI
def test_evaluate_samples_orders_real_above_noise(cache):
    classifier.load_classifier("builtin", TINY, cache)  # trained here when no earlier test on this worker did
    held, _ = load_mnist("builtin", "heldout")
    m = evaluate.evaluate_samples(held[::4], TINY, "builtin", cache)
    json.dumps(m)  # JSON-able
    assert m["num_samples"] == 250 and sum(m["class_histogram"]) == sum(m["noise_class_histogram"]) == 250
    assert m["fd"] < m["noise_fd"] / 5 and m["real_fd"] < m["noise_fd"] / 5
    assert 0 <= m["entropy"] <= math.log(10) + 1e-9 and m["entropy"] > 1.5  # 25 of each class
    assert m["max_entropy"] == pytest.approx(math.log(10)) and m["classifier_cached"]
    assert 0 < m["confidence"] <= 1 and 0 < m["classifier_accuracy"] <= 1 and m["heldout_num"] == 1000
    one_class = evaluate.evaluate_samples(held[:100], TINY, "builtin", cache, references=False)  # rows sorted by label
    assert one_class["entropy"] < 1.0 and "real_fd" not in one_class


def test_cli_evaluate_writes_metrics(cache, tmp_path, capsys):
    held, _ = load_mnist("builtin", "heldout", pad_to_32=True)
    np.save(tmp_path / "s.npy", held[::10].numpy())
    options = ["--cache-dir", str(cache), "--classifier-epochs", "1", "--classifier-width", "4"]
    # feature_dim and the rest are defaults: a different cached classifier from TINY
    assert main(["evaluate", str(tmp_path / "s.npy"), "--out", str(tmp_path / "m.json"), *options]) == 0
    out = capsys.readouterr().out
    assert "real_vs_real" in out and "held-out accuracy" in out
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["num_samples"] == 100 and {"fd", "real_fd", "noise_fd"} <= set(metrics)
    np.save(tmp_path / "bad.npy", np.full((4, 28, 28), 255.0))
    assert main(["evaluate", str(tmp_path / "bad.npy"), *options]) == 2
    assert "expected [-1, 1]" in capsys.readouterr().err


@pytest.mark.slow
def test_default_classifier_is_accurate(tmp_path):
    """The real evaluator (about a minute on one CPU thread): >= 97% on the held-out digits."""
    _, info = classifier.load_classifier("builtin", ClassifierConfig(), tmp_path)
    assert info["heldout_accuracy"] >= 0.97


# --------------------------------------------------------------------------- the shipped evaluator
def test_the_shipped_evaluator_is_the_file_its_digest_says_and_accurate():
    tensors, info = classifier.load_checkpoint(classifier.SHIPPED)
    assert classifier.weights_digest(tensors) == classifier.SHIPPED_SHA256 == info["weights_sha256"]
    assert classifier.SHIPPED.stat().st_size < 600_000  # a few hundred kB: float16 weights
    model, info = classifier.load_classifier()  # the default: the shipped file, nothing trained or cached
    assert info["cache_file"] == str(classifier.SHIPPED) and info["config"] == dataclasses.asdict(ClassifierConfig())
    held_x, held_y = load_mnist("builtin", "heldout")
    accuracy = (classifier.classify(model, held_x)[0].argmax(1) == held_y).double().mean().item()
    assert accuracy == info["heldout_accuracy"] >= 0.98


def test_the_shipped_evaluator_gives_the_same_scores_on_any_thread_count(tmp_path):
    x, _ = load_mnist("builtin", "train")
    samples = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(3))[:300]]
    scores = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        scores.append(evaluate.evaluate_samples(samples, cache_dir=tmp_path))
    assert {k: scores[0][k] for k in ("fd", "confidence", "entropy", "real_fd")} == {
        k: scores[1][k] for k in ("fd", "confidence", "entropy", "real_fd")
    }
    assert not list(tmp_path.iterdir())  # nothing trained, nothing cached


def test_a_changed_shipped_file_is_refused(tmp_path, monkeypatch):
    tensors, info = classifier.load_checkpoint(classifier.SHIPPED)
    tensors["head.bias"] = tensors["head.bias"] + 1
    classifier.save_checkpoint(tmp_path / "evaluator.safetensors", tensors, info)
    monkeypatch.setattr(classifier, "SHIPPED", tmp_path / "evaluator.safetensors")
    with pytest.raises(classifier.CheckpointError, match="reinstall"):
        classifier.load_classifier()


def test_a_run_scores_the_mean_of_its_samplings():
    cfg = RunConfig()
    held, _ = load_mnist("builtin", "heldout")
    sets = [held[:200], held[200:400], held[400:600]]
    result = evaluate.score(cfg, sets)
    each = [evaluate.evaluate_samples(s, references=False)["fd"] for s in sets]
    assert [s["fd"] for s in result["samplings"]] == each
    assert result["fd"] == pytest.approx(sum(each) / 3) and result["fd_spread"] == pytest.approx(max(each) - min(each))
    assert "real_fd" in result and "mean of 3" in evaluate.format_report(result)


@pytest.mark.slow
def test_make_evaluator_reproduces_the_shipped_file():
    """The script trains the same weights again (bit for bit on the torch and CPU family that made the file, an
    equivalent classifier on others: about a minute)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "make_evaluator.py"
    proc = subprocess.run([sys.executable, str(script), "--check", "--quiet"], capture_output=True, text=True)
    verdict = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0 and verdict in ("the same, bit for bit", "equivalent"), proc.stdout + proc.stderr


def test_the_copy_check_tells_training_digits_from_unseen_ones():
    train, _ = load_mnist("builtin", "train")
    held, _ = load_mnist("builtin", "heldout")
    distances = evaluate.nearest_distances(held, train)  # the held-out digits' own nearest-training distances
    assert torch.equal(distances, evaluate.heldout_distances("builtin"))
    copied = evaluate.copy_scores(train[:300], train, distances)  # a model that draws its training digits back
    unseen = evaluate.copy_scores(held, train, distances)  # digits drawn like the held-out ones
    assert copied["copies"] == 1.0 and copied["nearest_ratio"] < 1e-5  # float64 rounding of |a - a|
    assert unseen["copies"] == unseen["heldout_copies"] and 0.005 <= unseen["copies"] <= 0.015
    assert unseen["nearest_ratio"] == 1.0
    noisy = evaluate.copy_scores((train[:300] + 0.05 * torch.randn(300, 1, 28, 28)).clamp(-1, 1), train, distances)
    assert noisy["copies"] > 0.9  # a copy under a little noise is still a copy
    report = {"num_samples": 300, "fd": 1.0, "confidence": 0.9, "entropy": 2.3, "classifier_accuracy": 0.98,
              "heldout_num": 1000}  # fmt: skip
    assert "draws training digits back" in evaluate.format_report({**report, **copied})
    assert "draws training digits back" not in evaluate.format_report({**report, **unseen})


def test_nearest_distances_match_a_brute_force_search():
    g = torch.Generator().manual_seed(0)
    x, ref = torch.rand(50, 1, 4, 4, generator=g), torch.rand(70, 1, 4, 4, generator=g)
    brute = torch.cdist(x.flatten(1).double(), ref.flatten(1).double()).min(1).values
    assert torch.allclose(evaluate.nearest_distances(x, ref, chunk=16), brute, atol=1e-12)


def test_the_copy_checks_held_out_distances_follow_the_data_folders_files(tmp_path):
    write_mnist(tmp_path, n_train=6, n_test=4)
    before = evaluate.heldout_distances(str(tmp_path)).clone()
    write_mnist(tmp_path, n_train=2, n_test=4)  # fewer training digits: held-out 2 and 3 lose their exact copies
    train, held = load_mnist(str(tmp_path), "train")[0], load_mnist(str(tmp_path), "heldout")[0]
    assert torch.equal(evaluate.heldout_distances(str(tmp_path)), evaluate.nearest_distances(held, train))
    assert not torch.equal(evaluate.heldout_distances(str(tmp_path)), before)
