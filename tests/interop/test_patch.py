"""Swapping our modules into diffusers' UNets (built from tiny configs) and back; weight mapping."""

from __future__ import annotations

import builtins
import importlib

import pytest
import torch
from safetensors.torch import load_file

from timestep_embed.interop import (
    convention_from_unet_config,
    embedder_from_diffusers_unet,
    export_to_diffusers,
    patch_diffusers_model,
    require_diffusers,
    to_diffusers_modules,
)
from timestep_embed.nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP

diffusers = pytest.importorskip("diffusers")


TINY = dict(
    sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4
)


def unet2d(**config):
    torch.manual_seed(0)
    return diffusers.UNet2DModel(
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"), **TINY, **config
    ).eval()


def unet2d_condition(**config):
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=8,
        attention_head_dim=2,
        **TINY,
        **config,
    ).eval()


TIMESTEPS = [torch.tensor([0, 999]), torch.tensor([3.25, 640.5]), 17, 2.5, torch.tensor(999), torch.tensor(0.75)]


def _outputs(unet, extra, timesteps):
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return [unet(x, t, **extra).sample for t in timesteps]


def _assert_patch_keeps_outputs(unet, extra, timesteps=TIMESTEPS):
    before = _outputs(unet, extra, timesteps)
    keys = set(unet.state_dict())
    patch_diffusers_model(unet)
    assert isinstance(unet.time_embedding, TimestepMLP)
    assert set(unet.state_dict()) == keys
    for a, b in zip(before, _outputs(unet, extra, timesteps), strict=True):
        assert (a - b).abs().max() <= 1e-5


@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("shift", [0, 1])
def test_patch_unet2d_positional_keeps_outputs(flip, shift):
    unet = unet2d(flip_sin_to_cos=flip, freq_shift=shift)
    _assert_patch_keeps_outputs(unet, {})
    assert isinstance(unet.time_proj, SinusoidalEmbedding)
    assert unet.time_proj.convention == convention_from_unet_config(unet.config)
    assert unet.time_proj.convention.first == ("cos" if flip else "sin")


def test_patch_keeps_outputs_in_float64():
    unet = unet2d().double()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        before = unet(x, torch.tensor([3.5, 999.0])).sample
        patch_diffusers_model(unet)
        assert unet.time_embedding.linear_1.weight.dtype == torch.float64
        assert (unet(x, torch.tensor([3.5, 999.0])).sample - before).abs().max() <= 1e-12


def test_patch_unet2d_fourier_and_class_timestep_embedding():
    unet = unet2d(time_embedding_type="fourier")
    _assert_patch_keeps_outputs(unet, {}, [torch.tensor([0.002, 80.0]), torch.tensor(1.5)])
    assert isinstance(unet.time_proj, FourierEmbedding) and unet.time_proj.log
    unet = unet2d(class_embed_type="timestep")  # class labels go through time_proj too
    _assert_patch_keeps_outputs(unet, {"class_labels": torch.tensor([3, 7])})


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"flip_sin_to_cos": False, "freq_shift": 1, "act_fn": "mish", "timestep_post_act": "silu"},
        {"time_embedding_type": "fourier", "flip_sin_to_cos": False},
        {"time_embedding_type": "fourier"},
    ],
)
def test_patch_unet2d_condition_keeps_outputs(config):
    unet = unet2d_condition(**config)
    extra = {"encoder_hidden_states": torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))}
    _assert_patch_keeps_outputs(unet, extra)


def test_patch_unet2d_condition_with_timestep_cond():
    unet = unet2d_condition(time_cond_proj_dim=4)
    extra = {"encoder_hidden_states": torch.randn(2, 3, 8), "timestep_cond": torch.randn(2, 4)}
    _assert_patch_keeps_outputs(unet, extra, TIMESTEPS[:3])
    assert unet.time_embedding.cond_proj.bias is None


def test_patch_sdxl_style_added_time_ids():
    unet = unet2d_condition(
        addition_embed_type="text_time", addition_time_embed_dim=4, projection_class_embeddings_input_dim=8 + 6 * 4
    )
    added = {"text_embeds": torch.randn(2, 8), "time_ids": torch.tensor([[8, 8, 0, 0, 8, 8]] * 2)}
    extra = {"encoder_hidden_states": torch.randn(2, 3, 8), "added_cond_kwargs": added}
    _assert_patch_keeps_outputs(unet, extra, TIMESTEPS[:2])
    assert isinstance(unet.add_time_proj, SinusoidalEmbedding) and isinstance(unet.add_embedding, TimestepMLP)


def test_export_our_embedder_into_diffusers_unet():
    unet = unet2d(flip_sin_to_cos=False, freq_shift=1)
    torch.manual_seed(5)
    ours = TimestepEmbedder(32, sinusoid_dim=8, convention="ddpm")
    export_to_diffusers(ours, unet)
    t = torch.tensor([1, 250, 999])
    with torch.no_grad():
        assert (unet.time_embedding(unet.time_proj(t)) - ours(t)).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="outputs would differ"):
        export_to_diffusers(TimestepEmbedder(32, sinusoid_dim=8, convention="adm"), unet)
    with pytest.raises(ValueError, match="missing keys"):
        export_to_diffusers(TimestepEmbedder(32, sinusoid_dim=8, convention="ddpm", cond_dim=3), unet)


def test_roundtrip_diffusers_embedder_diffusers():
    unet = unet2d_condition(time_embedding_type="fourier", timestep_post_act="silu")
    embedder = embedder_from_diffusers_unet(unet)
    proj, mlp = to_diffusers_modules(embedder)
    t = torch.tensor([0.5, 7.0])
    with torch.no_grad():
        expected = unet.time_embedding(unet.time_proj(t))
        assert torch.equal(mlp(proj(t)), expected)
        assert (embedder(t) - expected).abs().max() <= 1e-6


def test_to_diffusers_modules_refuses_what_diffusers_cannot_express():
    with pytest.raises(ValueError, match="only has the concatenated layout"):
        to_diffusers_modules(TimestepEmbedder(32, convention="vaswani"))
    with pytest.raises(ValueError, match="time_input"):
        to_diffusers_modules(TimestepEmbedder(32, time_input="quarter_log"))
    with pytest.raises(ValueError, match="no diffusers equivalent"):
        to_diffusers_modules(TimestepEmbedder(32, time_proj=FourierEmbedding.edm(8)))


def test_to_diffusers_modules_refuses_options_whose_outputs_would_differ():
    for proj, named in [
        (SinusoidalEmbedding(8, precise=True), "precise=True"),
        (SinusoidalEmbedding(9, pad_odd=False), "pad_odd=False"),
        (SinusoidalEmbedding(8, scale=1000.0, scale_in_input_dtype=True), "scale_in_input_dtype=True"),
        (SinusoidalEmbedding(8, max_period=100.0), "max_period=100.0"),
        (FourierEmbedding(16, include_input=True), "include_input=True"),
        (FourierEmbedding(16, in_features=1), "in_features=1"),
    ]:
        embedder = TimestepEmbedder(32, time_proj=proj)
        with pytest.raises(ValueError, match=f"{named} has no diffusers equivalent"):
            to_diffusers_modules(embedder)
        with pytest.raises(ValueError, match=named):
            export_to_diffusers(embedder, unet2d())
    to_diffusers_modules(TimestepEmbedder(32, time_proj=SinusoidalEmbedding(8, scale_in_input_dtype=True)))  # scale 1


def test_to_diffusers_modules_keeps_a_bfloat16_fourier_projection_in_bfloat16():
    torch.manual_seed(0)
    embedder = TimestepEmbedder(32, time_proj=FourierEmbedding(16)).to(torch.bfloat16)
    proj, mlp = to_diffusers_modules(embedder)
    assert proj.weight.dtype == torch.bfloat16
    t = torch.tensor([0.37, 3.0, 81.5], dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(mlp(proj(t)), embedder(t))


def test_export_into_a_fourier_unet_refuses_other_fourier_flags():
    unet = unet2d(time_embedding_type="fourier")  # log=True, sin first
    for flags in ({"log": False}, {"log": True, "first": "cos"}):
        with pytest.raises(ValueError, match="log=True, flip_sin_to_cos=False.*outputs would differ"):
            export_to_diffusers(TimestepEmbedder(32, time_proj=FourierEmbedding(16, **flags)), unet)
    export_to_diffusers(TimestepEmbedder(32, time_proj=FourierEmbedding(16, log=True)), unet)


@pytest.mark.parametrize("config", [{}, {"time_embedding_type": "fourier"}])
def test_patch_keeps_the_parameters_themselves_and_the_mode(config):
    unet = unet2d_condition(**config)
    unet.requires_grad_(False)
    unet.time_embedding.linear_2.requires_grad_(True)  # a fine-tune of one layer
    params = {name: id(p) for name, p in unet.named_parameters()}
    optimizer = torch.optim.SGD([p for p in unet.parameters() if p.requires_grad], lr=0.1)
    patch_diffusers_model(unet)
    assert {name: id(p) for name, p in unet.named_parameters()} == params  # the same objects, the same names
    assert [name for name, p in unet.named_parameters() if p.requires_grad] == [
        "time_embedding.linear_2.weight",
        "time_embedding.linear_2.bias",
    ]
    assert not any(m.training for m in unet.modules())
    x = torch.randn(2, 1, 8, 8)
    unet(x, torch.tensor([3.0, 50.0]), encoder_hidden_states=torch.randn(2, 3, 8)).sample.sum().backward()
    before = unet.time_embedding.linear_2.weight.clone()
    optimizer.step()  # built before the patch, it trains the patched model
    assert not torch.equal(unet.time_embedding.linear_2.weight, before)


def test_patch_keeps_diffusers_layerwise_casting():
    unet = unet2d()
    unet.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    (before,) = _outputs(unet, {}, [torch.tensor([3, 917])])
    patch_diffusers_model(unet)
    assert unet.time_embedding.linear_1.weight.dtype == torch.float8_e4m3fn
    assert torch.equal(_outputs(unet, {}, [torch.tensor([3, 917])])[0], before)
    lcm = unet2d_condition(time_cond_proj_dim=4)  # the condition goes through a float8 cond_proj too
    lcm.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    extra = {"encoder_hidden_states": torch.randn(2, 3, 8), "timestep_cond": torch.randn(2, 4)}
    (before,) = _outputs(lcm, extra, [torch.tensor([3, 917])])
    patch_diffusers_model(lcm)
    assert torch.equal(_outputs(lcm, extra, [torch.tensor([3, 917])])[0], before)


def test_a_refused_patch_leaves_the_model_as_it_was():
    unet = unet2d()
    unet.time_embedding.act = torch.nn.Tanh()
    with pytest.raises(ValueError, match="unsupported activation Tanh"):
        patch_diffusers_model(unet)
    assert type(unet.time_proj).__name__ == "Timesteps" and type(unet.time_embedding).__name__ == "TimestepEmbedding"


def test_skyreels_float64_sinusoid_stays_diffusers(tiny_model):
    """SkyReels-V2's sinusoid forms its frequencies as 1 / 10000 ** (k / h) in float64: not the core's formula."""
    model, inputs, t = tiny_model("SkyReelsV2Transformer3DModel")
    cases = [t, t.reshape(-1)[:1].reshape(())]
    before = [tiny_model.run(model, inputs, c) for c in cases]
    patch_diffusers_model(model)
    assert type(model.condition_embedder.timesteps_proj).__name__ == "SkyReelsV2Timesteps"
    assert isinstance(model.condition_embedder.time_embedder, TimestepMLP)
    for case, expected in zip(cases, before, strict=True):
        assert torch.equal(tiny_model.run(model, inputs, case), expected)


MODELS = ["ddpm", "unet2d_fourier", "unet2d_learned", "stable_diffusion", "sdxl", "unet1d", "dit", "pixart", "sd3",
          "flux_dev", "flux_schnell", "wan", "hunyuan_video"]  # fmt: skip


@pytest.mark.parametrize("name", MODELS)
def test_patch_keeps_every_model_output_and_its_checkpoint(name, tiny_model, tmp_path):
    model, inputs, timesteps = tiny_model(name)
    kinds = [type(m).__name__ for m in model.modules()]
    if timesteps.is_floating_point():
        other = timesteps * 0.75
    else:  # fractional steps too, except where the model looks t up in a table (learned embedding)
        other = timesteps + 11 if "learned" in name else timesteps + 0.5
    cases = [timesteps, timesteps[:1].expand(2).clone(), other]
    before = [tiny_model.run(model, inputs, t) for t in cases]
    patch_diffusers_model(model)
    assert not {"Timesteps", "TimestepEmbedding", "GaussianFourierProjection"} & {
        type(m).__name__ for m in model.modules()
    }
    for t, expected in zip(cases, before, strict=True):
        assert torch.equal(tiny_model.run(model, inputs, t), expected), t
    with torch.no_grad():  # weights of its own, so that loading them is what makes the outputs equal
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    before = [tiny_model.run(model, inputs, cases[0])]
    model.save_pretrained(tmp_path / "m")  # the same keys: an unpatched model loads the file strictly
    plain = tiny_model(name)[0]
    plain.load_state_dict(load_file(tmp_path / "m" / "diffusion_pytorch_model.safetensors"), strict=True)
    assert {type(m).__name__ for m in plain.modules()} >= {"TimestepEmbedding"} and "TimestepEmbedding" in kinds
    assert torch.equal(tiny_model.run(plain, inputs, cases[0]), before[0])


def test_patched_wan_takes_per_token_timesteps(tiny_model):
    """Wan 2.2 TI2V passes timesteps [B, tokens]; the patched time path gives the same outputs."""
    model, inputs, _ = tiny_model("wan")
    tokens = 2 * 4 * 4  # frames x (8 / 2) x (8 / 2) patches
    t = torch.tensor([[999.0] * 16 + [500.0] * 16, [250.0] * tokens])
    before = tiny_model.run(model, inputs, t)
    patch_diffusers_model(model)
    assert torch.equal(tiny_model.run(model, inputs, t), before)


def test_unsupported_models_are_named(tiny_model):
    with pytest.raises(TypeError, match="Linear is not a diffusers model .tested on UNet1DModel, UNet2DModel"):
        patch_diffusers_model(torch.nn.Linear(2, 2))
    patched = patch_diffusers_model(tiny_model("ddpm")[0])
    with pytest.raises(ValueError, match="patched already"):
        patch_diffusers_model(patched)


def test_missing_diffusers_gives_install_hint(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] == "diffusers":
            raise ImportError("No module named 'diffusers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(importlib, "import_module", lambda name: fake_import(name))
    with pytest.raises(ImportError, match=r"pip install 'timestep-embed\[diffusers\]'"):
        require_diffusers()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@pytest.mark.filterwarnings("ignore::timestep_embed.LowPrecisionTimestepWarning")  # the models round, as they do
@pytest.mark.parametrize("order", ["cast then patch", "patch then cast"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", [*MODELS, "unet1d_fourier"])
def test_patch_keeps_the_model_dtype(name, dtype, order, tiny_model):
    """Patched and cast, in either order, equals the unpatched model cast to that dtype: its Fourier
    weights stay in the model's dtype (bfloat16 phases round as diffusers' do), for timesteps as the
    pipeline passes them and cast to the model's dtype."""
    model, inputs, timesteps = tiny_model(name)
    dt = DTYPES[dtype]
    inputs = {k: v.to(dt) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    reference = tiny_model(name)[0].to(dt)
    patched = patch_diffusers_model(model.to(dt)) if order == "cast then patch" else patch_diffusers_model(model).to(dt)
    cases = [timesteps] + ([timesteps.to(dt)] if timesteps.is_floating_point() else [])
    for t in cases:
        assert torch.equal(tiny_model.run(patched, inputs, t), tiny_model.run(reference, inputs, t)), t.dtype
    for proj in (m for m in patched.modules() if isinstance(m, FourierEmbedding)):
        assert proj.weight.dtype == dt
