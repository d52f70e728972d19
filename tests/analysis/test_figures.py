"""`timestep-embed figures` writes valid PNGs; the MLP figure works from any embedder module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

from timestep_embed import cli  # noqa: E402
from timestep_embed.analysis import figures  # noqa: E402
from timestep_embed.nn import TimestepEmbedder  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = ["--dim", "32", "--positions", "300", "--dpi", "40"]  # the same figures, drawn fast


def assert_png(path: Path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000, path
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 100 and height > 100


def test_figures_command_writes_every_png(tmp_path, capsys):
    assert cli.main(["figures", "--out", str(tmp_path / "figs"), *SMALL]) == 0
    written = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert written == sorted(f"{name}.png" for name in figures.FIGURES)
    for path in (tmp_path / "figs").iterdir():
        assert_png(path)
    assert "no --checkpoint" in capsys.readouterr().out


def test_time_mlp_from_an_untrained_embedder(tmp_path):
    torch.manual_seed(0)
    path = figures.plot_time_mlp(TimestepEmbedder(64), tmp_path / "mlp.png", num_timesteps=200, dpi=40)
    assert_png(path)


def test_make_figures_with_an_embedder(tmp_path):
    torch.manual_seed(1)
    embedder = TimestepEmbedder(64, convention="vaswani")
    paths = figures.make_figures(tmp_path, "ddpm", 16, 300, embedder=embedder, dpi=40, names=["heatmap", "time_mlp"])
    assert [p.name for p in paths] == ["heatmap.png", "time_mlp.png"]
    assert_png(paths[-1])


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="positions must be an int >= 300"):
        figures.make_figures(tmp_path, positions=10)
    with pytest.raises(ValueError, match="unknown figure"):
        figures.make_figures(tmp_path, names=["heatmapp"])
    with pytest.raises(ValueError, match="convention must be one of"):
        figures.make_figures(tmp_path, "nope")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("dim", [2, 3, 4, 9])
def test_every_figure_at_the_narrowest_widths(tmp_path, dim):
    """A width below 10 gives sine_curves one or two rows, and h = 1 leaves inverse_frequency no shift-1 curve:
    each figure is drawn (they failed with a matplotlib message, after writing some files); a width of 1 has no
    sin/cos pair and is refused before anything is written."""
    out = tmp_path / str(dim)
    paths = figures.make_figures(out, "adm", dim, 300, dpi=40)
    assert sorted(p.name for p in paths) == sorted(f"{name}.png" for name in figures.FIGURES)
    with pytest.raises(ValueError, match="dim must be an int >= 2, got 1"):
        figures.make_figures(tmp_path / "one", "adm", 1, 300, dpi=40)
    assert not (tmp_path / "one").exists()
