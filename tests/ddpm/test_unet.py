"""ResBlock and the small UNet: shapes, the time path, zero-initialised residual branches, errors."""

import dataclasses

import pytest
import torch
from torch import nn

from timestep_embed.ddpm import UNetConfig
from timestep_embed.ddpm.unet import AttentionBlock, ResBlock, UNet, count_parameters

TINY = UNetConfig(channels=(16, 32), num_res_blocks=1, emb_dim=32)


def _perturb_zero_inits(model: nn.Module) -> None:
    """Give the zero-initialised layers random weights, as after some training."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("injection", ["add", "scale_shift"])
@pytest.mark.parametrize("in_ch,out_ch", [(8, 8), (8, 16)])
def test_resblock_shape_and_zero_residual(injection, in_ch, out_ch):
    block = ResBlock(in_ch, out_ch, emb_dim=12, injection=injection, dropout=0.1)
    x, emb = torch.randn(3, in_ch, 7, 7), torch.randn(3, 12)
    assert block(x, emb).shape == (3, out_ch, 7, 7)
    assert torch.equal(block.residual(x, emb), torch.zeros(3, out_ch, 7, 7))  # conv2 is zero-initialised
    if in_ch == out_ch:
        assert torch.equal(block(x, emb), x)


@pytest.mark.parametrize("injection", ["add", "scale_shift"])
def test_resblock_uses_the_embedding(injection):
    block = ResBlock(8, 8, emb_dim=12, injection=injection)
    _perturb_zero_inits(block)
    x = torch.randn(2, 8, 5, 5)
    assert not torch.allclose(block(x, torch.zeros(2, 12)), block(x, torch.ones(2, 12)))
    assert block.emb_proj.out_features == (16 if injection == "scale_shift" else 8)


def test_resblock_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="injection='film'"):
        ResBlock(8, 8, 12, injection="film")
    with pytest.raises(ValueError, match="out_ch=0"):
        ResBlock(8, 0, 12)
    with pytest.raises(ValueError, match="dropout=1.5"):
        ResBlock(8, 8, 12, dropout=1.5)


@pytest.mark.parametrize(
    "config",
    [
        TINY,
        dataclasses.replace(TINY, image_size=32),
        dataclasses.replace(TINY, unshuffle=1, channels=(8, 16, 16)),
        dataclasses.replace(TINY, injection="add", attention_levels=(0, 1), num_res_blocks=2),
    ],
    ids=["28", "32", "no-unshuffle-3-levels", "additive-injection-attention"],
)
def test_unet_output_shape_equals_input_shape(config):
    model = UNet(config)
    x = torch.randn(2, 1, config.image_size, config.image_size)
    assert model(x, torch.tensor([0, 999])).shape == x.shape


def test_presets_build():
    for cfg in (UNetConfig(), UNetConfig(image_size=32, channels=(64, 128))):
        model = UNet(cfg)
        assert model(torch.randn(1, 1, cfg.image_size, cfg.image_size), torch.tensor([5])).shape[-1] == cfg.image_size
    assert 0.8e6 < count_parameters(UNet(UNetConfig())) < 0.95e6  # the 0.87M the docs state for the default run


def test_every_residual_branch_and_the_output_are_zero_at_init():
    model = UNet(TINY)
    emb = torch.randn(2, TINY.emb_dim)
    blocks = model.residual_blocks()
    assert sum(isinstance(b, ResBlock) for b in blocks) == 2 + 2 + 4 and any(
        isinstance(b, AttentionBlock) for b in blocks
    )
    for b in blocks:
        ch = b.conv1.in_channels if isinstance(b, ResBlock) else b.qkv.in_channels
        x = torch.randn(2, ch, 7, 7)
        out = b.residual(x, emb) if isinstance(b, ResBlock) else b.residual(x)
        assert torch.equal(out, torch.zeros_like(out)), type(b).__name__
    assert torch.equal(model(torch.randn(2, 1, 28, 28), torch.tensor([3, 700])), torch.zeros(2, 1, 28, 28))


def test_output_changes_when_only_t_changes():
    torch.manual_seed(0)
    model = UNet(TINY)
    _perturb_zero_inits(model)
    x = torch.randn(2, 1, 28, 28)
    a, b = model(x, torch.tensor([10, 10])), model(x, torch.tensor([500, 500]))
    assert (a - b).abs().max() > 1e-4
    assert torch.equal(model(x, torch.tensor([10, 10])), a)  # and is deterministic


def test_gradients_reach_the_time_mlp():
    model = UNet(TINY)
    _perturb_zero_inits(model)  # at init the zero convs block every gradient upstream of them
    model(torch.randn(2, 1, 28, 28), torch.tensor([1, 900])).pow(2).mean().backward()
    mlp = model.time_embedder.time_embedding
    for name in ("linear_1", "linear_2"):
        assert getattr(mlp, name).weight.grad.abs().sum() > 0, name


def test_a_model_trained_with_shifts_is_told_them_and_samples_as_told_none():
    """model.augment: a bias-free Linear of the shift (dy, dx) joins the time embedding; no shift is shift 0."""
    assert UNet(TINY).shift_embed is None and "shift_embed.weight" not in UNet(TINY).state_dict()
    torch.manual_seed(0)
    model = UNet(dataclasses.replace(TINY, augment=0.5))
    assert not model.shift_embed.weight.any()  # zero at init (EDM's DhariwalUNet): no shift drowns the time signal
    _perturb_zero_inits(model)
    x, t = torch.randn(2, 1, 28, 28), torch.tensor([10, 500])
    assert model.state_dict()["shift_embed.weight"].shape == (TINY.emb_dim, 2)
    assert torch.equal(model(x, t), model(x, t, torch.zeros(2, 2)))
    assert (model(x, t, torch.tensor([[0.5, -1.0], [1.0, 0.0]])) - model(x, t)).abs().max() > 1e-4
    with pytest.raises(ValueError, match=r"shift has shape \(2, 2\); this UNet takes no shift \(model.augment = 0\)"):
        UNet(TINY)(x, t, torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"shift has shape \(2,\); this UNet takes a shift \[B, 2\]"):
        model(x, t, torch.zeros(2))


def test_embedding_computed_once_per_forward():
    calls = []

    class Counting(nn.Module):
        def forward(self, t):
            calls.append(t.shape)
            return torch.zeros(t.shape[0], TINY.emb_dim)

    model = UNet(TINY, time_embedder=Counting())
    model(torch.randn(3, 1, 28, 28), torch.tensor([1, 2, 3]))
    assert calls == [torch.Size([3])]


def test_time_embedder_override_and_scalar_t():
    emb = nn.Sequential(nn.Unflatten(0, (-1, 1)), nn.Linear(1, TINY.emb_dim))
    model = UNet(TINY, time_embedder=emb)
    assert model.time_embedder is emb
    assert model(torch.randn(2, 1, 28, 28), torch.tensor(4.0)).shape == (2, 1, 28, 28)
    with pytest.raises(ValueError, match=r"time_embedder returned \(2, 5\)"):
        UNet(TINY, time_embedder=nn.Sequential(nn.Unflatten(0, (-1, 1)), nn.Linear(1, 5)))(
            torch.randn(2, 1, 28, 28), torch.tensor([1.0, 2.0])
        )


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"image_size": 27}, "model.unshuffle"),
        ({"channels": (8, 16, 32)}, "model.channels"),
        ({"channels": ()}, "model.channels"),
        ({"attention_levels": (2,)}, "model.attention_levels"),
        ({"injection": "film"}, "model.injection"),
        ({"emb_dim": 0}, "model.emb_dim"),
        ({"time_embedding": {"nonsense": 1}}, "model.time_embedding"),
    ],
)
def test_config_that_cannot_be_built_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        UNet(dataclasses.replace(TINY, **changes))


def test_wrong_input_shape_is_explained():
    with pytest.raises(ValueError, match=r"expects \[B, 1, 28, 28\]"):
        UNet(TINY)(torch.randn(2, 1, 32, 32), torch.tensor([1, 2]))
