"""A run's log and pictures: ``log.jsonl`` as training writes it
([`TrainingLog`][timestep_embed.ddpm.runlog.TrainingLog], with its progress bar and TensorBoard events) and as a
resume reads it back, the loss curve drawn from it, and the tiled samples with a caption.

Pictures are drawn on matplotlib's Agg canvas ([`new_figure`][timestep_embed.analysis.figures.new_figure]: no
display, no pyplot state) and written atomically.
"""

from __future__ import annotations

import json
import logging
import math
import textwrap
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ..analysis.figures import new_figure
from ..files import atomic_write_bytes, save_figure
from ..progress import progress as progress_bar

__all__ = ["tile_samples", "save_samples_png", "save_loss_curve", "drop_log_lines_after", "TrainingLog",
           "TrainingDiverged"]  # fmt: skip

log = logging.getLogger(__name__)


class LogSettings(Protocol):
    """What the log reads of the run's ``TrainConfig`` (``cfg.train``)."""

    steps: int | None
    log_every: int
    tensorboard: bool
    lr: float

    @property
    def seconds(self) -> float: ...


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or inf (read at a log line): the run stops, and its checkpoint
    keeps the last state read finite."""


def tile_samples(samples, nrow: int = 10) -> np.ndarray:
    """``samples`` [N, 1, H, W] in [-1, 1] as one image [rows * (H + 2) + 2, nrow * (W + 2) + 2]."""
    x = np.asarray(samples, dtype=np.float32)[:, 0]
    n, h, w = x.shape
    rows = -(-n // nrow)
    tiled = np.full((rows * (h + 2) + 2, nrow * (w + 2) + 2), -1.0, dtype=np.float32)
    for i in range(n):
        r, c = divmod(i, nrow)
        tiled[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + c * (w + 2) : 2 + c * (w + 2) + w] = x[i]
    return tiled


def save_samples_png(samples, path, nrow: int = 10, caption: str = "", zoom: int = 2) -> Path:
    """A PNG of ``samples`` [N, 1, H, W] in [-1, 1] (white digits on black, as MNIST), ``zoom``
    screen pixels per image pixel, with ``caption`` above the tiles, wrapped onto as many lines as the
    image's width needs."""
    tiled = tile_samples(samples, nrow)
    dpi, points = 100, 7.0
    width, height = tiled.shape[1] * zoom / dpi, tiled.shape[0] * zoom / dpi  # inches
    # 0.6 em a character is wider than DejaVu Sans on average (digits 0.64 em, lowercase ~0.55, space
    # 0.32), so a wrapped line stays inside the figure.
    lines = textwrap.wrap(caption, max(12, int(0.95 * width * 72 / (0.6 * points))))
    head = (len(lines) * 1.25 * points + 5) / 72 if lines else 0.0
    fig = new_figure(width, height + head)
    fig.set_layout_engine("none")  # the tiles fill the width pixel for pixel; the caption band sits above
    ax = fig.add_axes((0, 0, 1, height / (height + head)))
    ax.imshow((tiled + 1) / 2, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.set_axis_off()
    if lines:
        fig.text(0.5, 1 - 2.5 / 72 / (height + head), "\n".join(lines), ha="center", va="top", fontsize=points)
    return save_figure(fig, path, dpi)


def save_loss_curve(log_path, png_path, ylabel: str = "training loss (MSE)") -> Path | None:
    """Loss against step from a training ``log.jsonl``, with a running geometric mean (the mean of
    log-loss over a centred window, which is what a log axis shows); None for an empty log."""
    recs = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not recs:
        return None
    steps, loss = np.array([r["step"] for r in recs]), np.array([r["loss"] for r in recs])
    fig = new_figure(6, 3.5)
    ax = fig.add_subplot()
    ax.plot(steps, loss, lw=1, alpha=0.5, label="loss (mean over the log interval)")
    k = max(1, len(loss) // 10) | 1  # odd, so the window is centred on a logged step
    if k >= 3:
        smooth = np.exp(np.convolve(np.log(np.maximum(loss, 1e-12)), np.ones(k) / k, mode="valid"))
        ax.plot(steps[k // 2 : len(loss) - k // 2], smooth, lw=2, label=f"running geometric mean ({k} points)")
    ax.set(xlabel="step", ylabel=ylabel, yscale="log", title="DDPM training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, png_path, 120)


def _step_of(line: str) -> int | None:
    """The step of a log line, None for a line that is not a JSON object with an integer step."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step", 0) if isinstance(record, dict) else None
    return step if isinstance(step, int) else None


def drop_log_lines_after(path: Path, step: int) -> None:
    """Before a resume: rewrite ``log.jsonl`` (atomically) without its lines past ``step``, which the
    resumed run trains and logs again, so every step appears once; the log is then appended to. A torn line
    (what a kill leaves where appends are not atomic) is dropped with a warning: the checkpoint says where the run
    is, not the log."""
    if not path.is_file():
        return
    text = path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    kept = []
    for number, line in enumerate(lines, 1):
        logged = _step_of(line)
        if logged is None:
            log.warning("%s: line %d is not a log record (%.60s): dropped", path, number, line)
        elif logged <= step:
            kept.append(line)
    if len(kept) != len(lines) or (text and not text.endswith("\n")):
        atomic_write_bytes(path, "".join(line + "\n" for line in kept).encode())


class TrainingLog:
    """``log.jsonl`` (a line every ``train.log_every`` steps and one where training ends or stops, appended and
    flushed: each step's loss in one line's mean), the progress bar and,
    with ``train.tensorboard``, TensorBoard's events; on rank 0 (``out`` None elsewhere).

    The losses are summed on the device; the sum and the gradient norm are read (one host sync) at each
    log line only, where a NaN or inf loss or gradient norm stops the run
    ([`TrainingDiverged`][timestep_embed.ddpm.train.TrainingDiverged]).
    """

    def __init__(self, out: Path | None, t: LogSettings, step: int, elapsed: float, show: bool):
        self.t, self.window, self.file, self.board = t, (time.perf_counter(), step), None, None
        self.loss_sum: torch.Tensor | None = None  # since the last log line, on the device
        self.last_loss: float | None = None
        total, done, unit = (t.steps, step, "step") if t.steps else (round(t.seconds), round(elapsed), "s")
        fmt = None if t.steps else "{l_bar}{bar}| {n:.0f}/{total_fmt} s [{elapsed}<{remaining}{postfix}]"
        self.bar = progress_bar(total, "train", unit, initial=done, enabled=show and out is not None, bar_format=fmt)
        if out is not None:
            drop_log_lines_after(out / "log.jsonl", step)  # steps past the checkpoint are trained again
            self.file = open(out / "log.jsonl", "a")  # noqa: SIM115 - closed in close()
            if t.tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter  # optional dependency (the tensorboard extra)
                except ImportError as exc:
                    raise ImportError("train.tensorboard needs: pip install 'timestep-embed[tensorboard]'") from exc
                self.board = SummaryWriter(str(out / "tensorboard"))

    def read(self, step: int, grad_norm: torch.Tensor | float = 0.0, new_window: bool = True) -> tuple[float, float]:
        """The mean loss of the steps since the last log line, and ``grad_norm``: one read from the device.
        Starts a new window (``new_window``; a checkpoint's check does not, so the next line covers its
        steps); TrainingDiverged when the loss is NaN or inf."""
        if self.loss_sum is None:  # no step since the last read
            return (math.nan if self.last_loss is None else self.last_loss), float(grad_norm)
        first, steps = self.window[1] + 1, max(1, step - self.window[1])
        norm = torch.as_tensor(grad_norm, dtype=torch.float32, device=self.loss_sum.device)
        loss, norm = torch.stack([self.loss_sum.float() / steps, norm]).tolist()
        if new_window:
            self.loss_sum, self.window = None, (time.perf_counter(), step)
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise TrainingDiverged(
                f"the loss is {loss:.4g} (the mean of steps {first}-{step}) and the gradient norm {norm:.4g} "
                f"at step {step}: the run diverged; lower train.lr (now {self.t.lr:g}) and start again (--overwrite)"
            )
        self.last_loss = loss
        return loss, norm

    def step(self, step: int, loss: torch.Tensor, lr: float, grad_norm, elapsed: float) -> None:
        """After each step: the loss added on the device; at a log line (every rank reads, rank 0 writes) the
        window's mean loss, the gradient norm and the rate."""
        # a copy: a step replayed as a CUDA graph writes its next loss into the same tensor
        self.loss_sum = loss.detach().clone() if self.loss_sum is None else self.loss_sum + loss.detach()
        if step % self.t.log_every == 0 or step == 1:
            self._line(step, lr, grad_norm, elapsed)
        self.bar.update(1 if self.t.steps else min(round(elapsed), self.bar.total) - self.bar.n)

    def last_line(self, step: int, lr: float, grad_norm, elapsed: float) -> None:
        """At the end of training (finished or interrupted): a line for the steps since the last one, if any, so
        that every step's loss is in the log once (a resume goes on from the checkpoint, which is this step)."""
        if self.loss_sum is not None and step > self.window[1]:
            self._line(step, lr, grad_norm, elapsed)

    def _line(self, step: int, lr: float, grad_norm, elapsed: float) -> None:
        start = self.window
        mean, norm = self.read(step, grad_norm)
        if self.file is None:
            return
        rec = {"step": step, "loss": mean, "lr": lr, "grad_norm": norm}
        rec.update(steps_per_s=(step - start[1]) / max(1e-9, self.window[0] - start[0]), elapsed_s=elapsed)
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        self.bar.set_postfix(loss=f"{rec['loss']:.4f}", steps_s=f"{rec['steps_per_s']:.2f}", refresh=False)
        if self.board is not None:
            for key in ("loss", "lr", "grad_norm", "steps_per_s"):
                self.board.add_scalar(f"train/{key}", rec[key], step)

    def image(self, tag: str, samples: torch.Tensor, step: int) -> None:
        if self.board is not None:
            self.board.add_images(tag, (samples + 1) / 2, step)

    def close(self) -> None:
        self.bar.close()
        for handle in (self.file, self.board):
            if handle is not None:
                handle.close()
