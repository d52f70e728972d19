"""`timestep-embed figures` writes valid PNGs; the MLP figure works from a module and a checkpoint."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

from timestep_embed import cli, figures  # noqa: E402
from timestep_embed.checkpoint import save_checkpoint, with_prefix  # noqa: E402
from timestep_embed.embedding import TimestepEmbedder  # noqa: E402

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


def _fake_checkpoint(path: Path) -> TimestepEmbedder:
    """What a training run saves: the UNet's weights under model./ema., the config as metadata."""
    torch.manual_seed(1)
    model, ema = TimestepEmbedder(64, convention="vaswani"), TimestepEmbedder(64, convention="vaswani")
    tensors = {
        **with_prefix(model.state_dict(), "model.time_embedder."),
        **with_prefix(ema.state_dict(), "ema.time_embedder."),
        "model.conv_in.weight": torch.zeros(3),
    }
    meta = {"config": {"model": {"emb_dim": 64, "time_embedding": {"convention": "vaswani"}}}, "step": 7}
    save_checkpoint(path, tensors, meta)
    return ema


def test_time_mlp_from_a_checkpoint(tmp_path):
    ckpt = tmp_path / "run" / "checkpoint.safetensors"
    ema = _fake_checkpoint(ckpt)
    embedder, source = figures.load_time_embedder(ckpt)
    assert source == "checkpoint.safetensors (EMA, step 7)"
    assert embedder.time_proj.convention.layout == "interleaved"
    t = torch.arange(10)
    assert torch.equal(embedder(t), ema(t))
    paths = figures.make_figures(
        tmp_path / "out", "ddpm", 16, 300, checkpoint=ckpt, dpi=40, names=["heatmap", "time_mlp"]
    )
    assert [p.name for p in paths] == ["heatmap.png", "time_mlp.png"]
    assert_png(paths[-1])


def test_checkpoint_without_embedder_is_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "c.safetensors", {"model.conv_in.weight": torch.zeros(3)}, {})
    with pytest.raises(ValueError, match="no time-embedding MLP"):
        figures.load_time_embedder(tmp_path / "c.safetensors")


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="positions must be an int >= 300"):
        figures.make_figures(tmp_path, positions=10)
    with pytest.raises(ValueError, match="unknown figure"):
        figures.make_figures(tmp_path, names=["heatmapp"])
    with pytest.raises(ValueError, match="convention must be one of"):
        figures.make_figures(tmp_path, "nope")
    assert not any(tmp_path.iterdir())


def test_script_uses_the_same_cli(monkeypatch, capsys):
    script = Path(__file__).resolve().parents[1] / "scripts" / "plot_embeddings.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_info.value.code == 0 and "--checkpoint" in capsys.readouterr().out
