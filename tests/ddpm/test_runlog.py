"""Tiled samples: the image pixel for pixel, the caption whole inside the figure for every caption the runs write."""

import pytest
import torch

from timestep_embed.ddpm import RunConfig, describe_sampling
from timestep_embed.ddpm.runlog import save_samples_png, tile_samples

image = pytest.importorskip("matplotlib.image")

SAMPLERS = [
    [],  # ancestral, noise x0.95
    ["sample.sampler=ddim", "sample.eta=0.5"],
    ["sample.sampler=dpm++2m", "sample.spacing=karras", "sample.steps=25"],
    ["sample.sampler=heun", "sample.spacing=karras"],
    ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"],
]
# The captions of train.py (samples.png and snapshot_<step>.png) and trained.py (PREFIX.png).
TEMPLATES = [
    (10, "100 of 10000 samples, EMA weights, {}"),
    (10, "100 of 10000 samples, raw weights, {}"),
    (8, "step 1234567, EMA weights, 16 samples, {}"),
]


@pytest.mark.parametrize("overrides", SAMPLERS, ids=lambda o: o[0] if o else "ddpm")
@pytest.mark.parametrize(("nrow", "template"), TEMPLATES, ids=["train", "sample", "progress"])
def test_caption_fits_inside_the_figure(tmp_path, overrides, nrow, template):
    caption = template.format(describe_sampling(RunConfig.load("mnist", overrides)))
    samples = torch.rand(2 * nrow, 1, 28, 28) * 2 - 1
    png = image.imread(save_samples_png(samples, tmp_path / "grid.png", nrow=nrow, caption=caption))
    grid = tile_samples(samples, nrow)
    assert png.shape[1] == 2 * grid.shape[1] and png.shape[0] > 2 * grid.shape[0]  # zoom 2, a band on top
    band = png[: png.shape[0] - 2 * grid.shape[0], :, :3]
    ink = band.min(axis=2) < 0.5
    assert ink.any()  # the caption is drawn
    assert not ink[:2].any() and not ink[:, :3].any() and not ink[:, -3:].any()  # and not cut at any edge


def test_a_long_caption_wraps_onto_more_lines(tmp_path):
    samples = torch.zeros(4, 1, 28, 28)
    short = image.imread(save_samples_png(samples, tmp_path / "a.png", nrow=4, caption="one line"))
    long = image.imread(save_samples_png(samples, tmp_path / "b.png", nrow=4, caption="word " * 40))
    assert long.shape[1] == short.shape[1] and long.shape[0] > short.shape[0]
    bare = image.imread(save_samples_png(samples, tmp_path / "c.png", nrow=4))
    assert bare.shape[0] == 2 * tile_samples(samples, 4).shape[0]  # no caption, no band
