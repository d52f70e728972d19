"""Real checkpoints' time paths outside diffusers: the key layouts of the original releases, widths
read from the tensors, the sinusoid each codebase puts in front, strict loading, and the errors.

Each original time path is transcribed below from the file it cites (the package is not installed
here); the state dicts carry those codebases' key names and shapes (random values). The diffusers
models and the originals diffusers converts are in ``tests/interop/test_layouts.py``.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from timestep_embed import TimestepEmbedder
from timestep_embed.nn import LAYOUTS, embedder_state_dict, find_time_paths, load_state_dict_checked, to_layout
from timestep_embed.nn.mlp import TimestepMLP

G = torch.Generator().manual_seed(0)


def linear(out_features: int, in_features: int, name: str) -> dict[str, torch.Tensor]:
    return {f"{name}.weight": torch.randn(out_features, in_features, generator=G) * 0.2,
            f"{name}.bias": torch.randn(out_features, generator=G) * 0.2}  # fmt: skip


def apply(state, name, x):
    return x @ state[f"{name}.weight"].T + state[f"{name}.bias"]


def adm_sinusoid(t, dim, max_period=10000):
    """openai/guided-diffusion guided_diffusion/nn.py ``timestep_embedding`` (also CompVis ldm util.py,
    facebookresearch/DiT models.py, PixArt, SD3's mmditx.py): [cos | sin], ``/ half``."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def ddim_sinusoid(t, dim):
    """ermongroup/ddim models/diffusion.py ``get_timestep_embedding``: [sin | cos], ``/ (half - 1)``."""
    half = dim // 2
    emb = math.log(10000) / (half - 1)
    emb = torch.exp(torch.arange(half, dtype=torch.float32) * -emb)
    emb = t.float()[:, None] * emb[None, :]
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)


def edm_positional(x, num_channels, endpoint=False, max_positions=10000):
    """NVlabs/edm training/networks.py ``PositionalEmbedding.forward``."""
    freqs = torch.arange(start=0, end=num_channels // 2, dtype=torch.float32)
    freqs = freqs / (num_channels // 2 - (1 if endpoint else 0))
    freqs = (1 / max_positions) ** freqs
    x = x.ger(freqs.to(x.dtype))
    return torch.cat([x.cos(), x.sin()], dim=1)


def edm_fourier(x, freqs):
    """NVlabs/edm training/networks.py ``FourierEmbedding.forward``."""
    x = x.ger((2 * math.pi * freqs).to(x.dtype))
    return torch.cat([x.cos(), x.sin()], dim=1)


def flip(emb):
    """SongUNet.forward: ``emb.reshape(emb.shape[0], 2, -1).flip(1).reshape(*emb.shape)`` (swap sin/cos)."""
    return emb.reshape(emb.shape[0], 2, -1).flip(1).reshape(*emb.shape)


def lucidrains_sinusoid(x, dim, theta=10000):
    """lucidrains/denoising-diffusion-pytorch ``SinusoidalPosEmb.forward``."""
    half_dim = dim // 2
    emb = math.log(theta) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim) * -emb)
    emb = x[:, None] * emb[None, :]
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


def sequential_mlp(state, first, second, x, act=F.silu):
    return apply(state, second, act(apply(state, first, x)))


def under(prefix: str, state: dict) -> dict:
    return {prefix + k: v for k, v in state.items()}


def guided_diffusion():
    s = {**linear(64, 16, "time_embed.0"), **linear(64, 64, "time_embed.2"), "label_emb.weight": torch.zeros(10, 64)}
    return s, lambda t: sequential_mlp(s, "time_embed.0", "time_embed.2", adm_sinusoid(t, 16)), [0, 10, 999]


def stable_diffusion(sdxl: bool = False):
    s = under("model.diffusion_model.", {**linear(64, 16, "time_embed.0"), **linear(64, 64, "time_embed.2")})
    s["model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight"] = torch.zeros(4, 4)
    if sdxl:  # the size-and-text MLP ("adm" vector) beside the time MLP
        s.update(
            under("model.diffusion_model.", {**linear(64, 40, "label_emb.0.0"), **linear(64, 64, "label_emb.0.2")})
        )
    first, second = "model.diffusion_model.time_embed.0", "model.diffusion_model.time_embed.2"
    return s, lambda t: sequential_mlp(s, first, second, adm_sinusoid(t, 16)), [1, 500, 999]


def ddim():
    s = {**linear(48, 16, "temb.dense.0"), **linear(48, 48, "temb.dense.1")}
    return s, lambda t: apply(s, "temb.dense.1", F.silu(apply(s, "temb.dense.0", ddim_sinusoid(t, 16)))), [0, 7, 999]


def dit():
    s = {**linear(32, 256, "t_embedder.mlp.0"), **linear(32, 32, "t_embedder.mlp.2")}
    s["y_embedder.embedding_table.weight"] = torch.zeros(1001, 32)
    return s, lambda t: sequential_mlp(s, "t_embedder.mlp.0", "t_embedder.mlp.2", adm_sinusoid(t, 256)), [0, 999]


def edm_dhariwal():
    s = under("model.", {**linear(64, 16, "map_layer0"), **linear(64, 64, "map_layer1")})
    s["model.out_conv.weight"] = torch.zeros(3, 16, 3, 3)

    def path(c):  # DhariwalUNet.forward: silu(map_layer0) -> map_layer1 -> silu
        return F.silu(apply(s, "model.map_layer1", F.silu(apply(s, "model.map_layer0", edm_positional(c, 16)))))

    return s, path, torch.tensor([0.002, 1.0, 80.0]).log() / 4


def edm_song(fourier: bool):
    s = {**linear(64, 16, "map_layer0"), **linear(64, 64, "map_layer1"), "dec.32x32_aux_conv.weight": torch.zeros(3)}
    if fourier:
        s["map_noise.freqs"] = torch.randn(8, generator=G) * 16

    def path(c):  # SongUNet.forward: the halves flipped, silu after both layers
        emb = edm_fourier(c, s["map_noise.freqs"]) if fourier else edm_positional(c, 16, endpoint=True)
        return F.silu(apply(s, "map_layer1", F.silu(apply(s, "map_layer0", flip(emb)))))

    c_noise = torch.tensor([0.02, 1.0, 100.0]).div(2).log() if fourier else torch.tensor([0.0, 250.5, 999.0])
    return s, path, c_noise


def lucidrains(learned: bool):
    s = {**linear(64, 17 if learned else 16, "time_mlp.1"), **linear(64, 64, "time_mlp.3")}
    if learned:
        s["time_mlp.0.weights"] = torch.randn(8, generator=G)

    def path(t):
        emb = lucidrains_learned(t, s["time_mlp.0.weights"]) if learned else lucidrains_sinusoid(t.float(), 16)
        return sequential_mlp(s, "time_mlp.1", "time_mlp.3", emb, F.gelu)

    return s, path, [0.1, 0.5, 0.9] if learned else [0, 10, 999]


def k_diffusion():
    s = {**linear(32, 32, "mapping.0"), **linear(32, 32, "mapping.2")}
    s["timestep_embed.weight"] = torch.randn(16, 1, generator=G)

    def path(sigma):  # ImageDenoiserModelV1.forward: c_noise = ln(sigma) / 4, MappingNet = (Linear, GELU) x 2
        features = k_fourier(sigma.log() / 4, s["timestep_embed.weight"])
        return F.gelu(sequential_mlp(s, "mapping.0", "mapping.2", features, F.gelu))

    return s, path, [0.03, 1.0, 14.6]


# name -> (state dict in the codebase's keys, its time path on its model's timestep argument, timesteps,
#          the family the layout is found as)
ORIGINALS = {
    "guided-diffusion (class-conditional)": (*guided_diffusion(), "guided_diffusion"),
    "Stable Diffusion 1.x (CompVis)": (*stable_diffusion(), "stable_diffusion"),
    "SDXL (generative-models)": (*stable_diffusion(sdxl=True), "sdxl"),
    "DDPM torch port (ermongroup/ddim)": (*ddim(), "ddpm"),
    "DiT-XL/2": (*dit(), "dit"),
    "EDM DhariwalUNet in EDMPrecond": (*edm_dhariwal(), "edm"),
    "EDM SongUNet DDPM++ (VP)": (*edm_song(fourier=False), "edm_vp"),
    "EDM SongUNet NCSN++ (VE)": (*edm_song(fourier=True), "edm_ve"),
    "lucidrains Unet": (*lucidrains(learned=False), "lucidrains_ddpm"),
    "lucidrains Unet, learned sinusoidal": (*lucidrains(learned=True), "lucidrains_ddpm"),
    "k-diffusion image_v1": (*k_diffusion(), "k_diffusion_v1"),
}
EXACT = {"guided-diffusion (class-conditional)", "Stable Diffusion 1.x (CompVis)", "SDXL (generative-models)"}
EXACT |= {"DiT-XL/2", "k-diffusion image_v1"}


def lucidrains_learned(x, weights):
    """lucidrains ``RandomOrLearnedSinusoidalPosEmb.forward``: ``[x | sin | cos]``."""
    x = x[:, None]
    freqs = x * weights[None, :] * 2 * math.pi
    return torch.cat((x, torch.cat((freqs.sin(), freqs.cos()), dim=-1)), dim=-1)


def k_fourier(x, weight):
    """crowsonkb/k-diffusion k_diffusion/layers.py ``FourierFeatures.forward`` on ``append_dims(c_noise, 2)``."""
    f = 2 * math.pi * x[:, None] @ weight.T
    return torch.cat([f.cos(), f.sin()], dim=-1)


@pytest.mark.parametrize("name", list(ORIGINALS))
def test_from_state_dict_reads_the_original_releases(name, caplog):
    """torch.equal where the codebase's float32 operations are ours; else within the float32
    rounding of the phase (one more ulp per frequency in other operation orders)."""
    state, reference, t, family = ORIGINALS[name]
    t = torch.as_tensor(t)
    with caplog.at_level("INFO", logger="timestep_embed"):
        embedder = TimestepEmbedder.from_state_dict(state)
    assert find_time_paths(state).layout.family == family and f"family {family}" in caplog.text
    with torch.no_grad():
        ours, theirs = embedder(t), reference(t)
    if name in EXACT:
        assert torch.equal(ours, theirs)
    else:
        phase = t.double().abs().max() * max(
            1.0, float(state.get("map_noise.freqs", torch.ones(1)).abs().max()) * 2 * math.pi
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=float(32 * 2**-24 * max(1.0, phase)))


def karras_sigmas(n: int, sigma_min: float = 0.01, sigma_max: float = 80.0, rho: float = 7.0) -> torch.Tensor:
    """crowsonkb/k-diffusion k_diffusion/sampling.py ``get_sigmas_karras`` (without its appended zero)."""
    ramp = torch.linspace(0, 1, n)
    min_inv_rho, max_inv_rho = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho


def test_k_diffusion_fourier_features_are_bit_identical_to_k_diffusion_over_a_karras_grid():
    """Its ``FourierFeatures`` form ``(2 pi x) @ W.T`` of ``W [n, 1]``; the layout keeps ``W`` as it is
    (``in_features=1``): ``x * (2 pi w)`` of the flattened ``W`` rounds a third of the features otherwise."""
    state = ORIGINALS["k-diffusion image_v1"][0]
    state = {**state, "timestep_embed.weight": state["timestep_embed.weight"] * 16}  # wide frequencies
    embedder = TimestepEmbedder.from_state_dict(state)
    sigma = karras_sigmas(1000)
    c_noise = sigma.log() / 4  # ImageDenoiserModelV1.forward
    features = k_fourier(c_noise, state["timestep_embed.weight"])
    with torch.no_grad():
        assert torch.equal(embedder(sigma), F.gelu(sequential_mlp(state, "mapping.0", "mapping.2", features, F.gelu)))
        assert torch.equal(embedder.time_proj(c_noise[:, None]), features)  # image_v1 feeds append_dims(c_noise, 2)
        assert torch.equal(embedder(sigma[:, None]), embedder(sigma))  # k-diffusion's [B, 1] is the same rows
        assert embedder(sigma[:1]).shape == (1, embedder.emb_dim)  # a batch of one keeps its axis
        assert embedder(sigma[0], batch_size=3).shape == (3, embedder.emb_dim)
        assert embedder(sigma[0]).shape == (embedder.emb_dim,)


@pytest.mark.parametrize("name", list(ORIGINALS))
def test_to_layout_writes_back_the_original_keys_shapes_and_values(name):
    """``to_layout`` of what ``from_state_dict`` read gives the release's own time-path tensors back (k-diffusion's
    Fourier weight as its [n, 1] buffer, not [n])."""
    state = ORIGINALS[name][0]
    match = find_time_paths(state)
    back = to_layout(TimestepEmbedder.from_state_dict(state).state_dict(), match.layout.name, prefix=match.prefix)
    assert back and set(back) <= set(state), sorted(set(back) - set(state))
    for key, value in back.items():
        assert value.shape == state[key].shape and torch.equal(value, state[key]), key


@pytest.mark.parametrize("name", ["Stable Diffusion 1.x (CompVis)", "k-diffusion image_v1"])
def test_a_float8_checkpoint_runs_in_bfloat16_with_its_values(name):
    state, _, t, _ = ORIGINALS[name]
    fp8 = {k: v.to(torch.float8_e4m3fn) for k, v in state.items()}
    as_bf16 = {k: v.to(torch.bfloat16) for k, v in fp8.items()}  # exact: bfloat16 holds every float8 value
    loaded, reference = TimestepEmbedder.from_state_dict(fp8), TimestepEmbedder.from_state_dict(as_bf16)
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        assert torch.equal(loaded(torch.as_tensor(t)), reference(torch.as_tensor(t)))


def test_linears_stored_in_two_dtypes_run_in_the_wider():
    state = dict(ORIGINALS["Stable Diffusion 1.x (CompVis)"][0])
    wide = TimestepEmbedder.from_state_dict(state)
    mixed = {k: v.half() if ".time_embed.0." in k else v for k, v in state.items()}  # linear_1 float16, linear_2 not
    loaded = TimestepEmbedder.from_state_dict(mixed)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert torch.equal(
        loaded.time_embedding.linear_1.weight, mixed["model.diffusion_model.time_embed.0.weight"].float()
    )
    assert torch.equal(loaded.time_embedding.linear_2.weight, wide.time_embedding.linear_2.weight)


@pytest.mark.parametrize("gone", ["model.diffusion_model.time_embed.0.bias", "model.diffusion_model.time_embed.2.bias"])
def test_a_missing_bias_is_named_by_its_checkpoint_key(gone):
    state = {k: v for k, v in ORIGINALS["Stable Diffusion 1.x (CompVis)"][0].items() if k != gone}
    with pytest.raises(ValueError, match=f"but not {re.escape(gone)}: the timestep"):
        TimestepEmbedder.from_state_dict(state)


def test_other_mlps_are_named_and_loaded_on_request(caplog):
    state = ORIGINALS["SDXL (generative-models)"][0]
    with caplog.at_level("INFO", logger="timestep_embed"):
        TimestepEmbedder.from_state_dict(state)
    assert "also: size and text (model.diffusion_model.label_emb.0: 40 -> 64 -> 64, fed size and crop" in caplog.text
    with pytest.raises(ValueError, match="is not a time path; the time paths: \\['timestep'\\]"):
        TimestepEmbedder.from_state_dict(state, which="size and text")
    match = find_time_paths(ORIGINALS["DiT-XL/2"][0])
    assert [p.label for p in match.paths] == ["timestep", "class labels"]


def test_per_block_copies_load_block_zero_and_the_others_on_request():
    blocks = {}
    for i in range(3):
        for n, (o, k) in enumerate([(16, 256), (16, 16)]):
            blocks.update(linear(o, k, f"transformer_blocks.{i}.norm1.emb.timestep_embedder.linear_{n + 1}"))
    match = find_time_paths(blocks)
    assert match.layout.name == "dit_diffusers" and [p.label for p in match.paths] == [
        "timestep",
        "timestep[1]",
        "timestep[2]",
    ]
    third = TimestepEmbedder.from_state_dict(blocks, which="timestep[2]")
    w = blocks["transformer_blocks.2.norm1.emb.timestep_embedder.linear_1.weight"]
    assert torch.equal(third.time_embedding.linear_1.weight, w)


def test_from_state_dict_says_what_it_needs():
    unet = {**linear(128, 32, "time_embedding.linear_1"), **linear(128, 128, "time_embedding.linear_2")}
    with pytest.raises(ValueError, match="does not say which sinusoid.*pass family= or convention="):
        TimestepEmbedder.from_state_dict(unet)
    assert TimestepEmbedder.from_state_dict(unet, family="ddpm").time_proj.convention.first == "sin"
    assert TimestepEmbedder.from_state_dict(unet, convention="adm").time_proj.convention.first == "cos"
    net = {f"net.{k}": v for k, v in ORIGINALS["DiT-XL/2"][0].items()}
    assert TimestepEmbedder.from_state_dict(net).emb_dim == 32  # a known prefix
    # keys under a prefix detection does not try (a DDP "module." before LDM's own): the error names it
    for release, extra, head, layout, width in [
        ("DiT-XL/2", "backbone.", "backbone.", "dit", 32),
        ("Stable Diffusion 1.x (CompVis)", "module.", "module.model.diffusion_model.", "stable_diffusion_original", 64),
    ]:
        odd = {extra + k: v for k, v in ORIGINALS[release][0].items()}
        with pytest.raises(
            ValueError,
            match=rf"tried .* layouts .*under the prefix '{re.escape(head)}' the keys of "
            rf"\[.*'{layout}'.*\] are there: pass prefix='{re.escape(head)}'",
        ):
            TimestepEmbedder.from_state_dict(odd)
        assert TimestepEmbedder.from_state_dict(odd, prefix=head).emb_dim == width
    with pytest.raises(ValueError, match=r"pass prefix='' \(inspect --prefix ''\)"):  # a hint one can paste
        find_time_paths(ORIGINALS["DiT-XL/2"][0], prefix="backbone.")
    with pytest.raises(ValueError, match="no time path.*first keys: \\['foo.weight'\\]"):
        TimestepEmbedder.from_state_dict({"foo.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="family must be None or one of"):
        TimestepEmbedder.from_state_dict(unet, family="sd4")
    sd = ORIGINALS["Stable Diffusion 1.x (CompVis)"][0]
    with pytest.raises(ValueError, match=r"the keys are stable_diffusion_original's \(family stable_diffusion\)"):
        TimestepEmbedder.from_state_dict(sd, family="flux_dev")
    with pytest.raises(ValueError, match=r"\['sinusoid_dim'\] cannot be set"):
        TimestepEmbedder.from_state_dict(unet, family="ddpm", sinusoid_dim=8)
    assert isinstance(
        TimestepEmbedder.from_state_dict(unet, family="ddpm", act="mish").time_embedding.act, torch.nn.Mish
    )
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        TimestepEmbedder.from_state_dict([("time_embedding.linear_1.weight", torch.zeros(1))])


def test_layouts_round_trip_and_the_rest_of_a_model_is_ignored():
    ours = TimestepEmbedder(32, sinusoid_dim=8)
    for name, layout in LAYOUTS.items():
        if layout.fourier:
            continue  # a Fourier layout needs a Fourier weight; this embedder has a sinusoid
        foreign = to_layout(ours.state_dict(), name, prefix="model.")
        foreign["model.input_blocks.0.weight"] = torch.zeros(1)
        loaded = TimestepEmbedder(32, sinusoid_dim=8)
        loaded.load_state_dict(embedder_state_dict(foreign, layout=name), strict=True)
        assert torch.equal(loaded(torch.tensor([5])), ours(torch.tensor([5]))), name


def test_mismatched_state_dict_error_names_keys_and_layout():
    mlp = TimestepMLP(4, 8)
    bad = {"linear_1.weight": torch.zeros(8, 4), "linear_2.weight": torch.zeros(8, 9), "extra.bias": torch.zeros(1)}
    with pytest.raises(ValueError) as info:
        load_state_dict_checked(mlp, bad, "test")
    for part in ("linear_1.bias", "linear_2.bias", "extra.bias", "expected [8, 8], got [8, 9]", "Expected layout"):
        assert part in str(info.value)


def test_scalar_timesteps_broadcast_to_the_batch():
    embedder = TimestepEmbedder(32, cond_dim=4)
    batch = embedder(torch.tensor([500, 500, 500]))
    for scalar in (500, torch.tensor(500), 500.0):
        assert torch.equal(embedder(scalar, batch_size=3), batch)
    cond = torch.zeros(3, 4)
    assert embedder(torch.tensor(7), cond).shape == (3, 32)
    assert embedder(7).shape == (32,)  # no batch given: the embedding of one step


def test_wrong_arguments_are_refused_naming_them(tmp_path):
    """What torch or the standard library would raise deep inside is raised first, naming the argument."""
    from timestep_embed.nn import find_time_paths, to_layout

    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        find_time_paths([1, 2])
    with pytest.raises(TypeError, match=r"state_dict\['time_embedding.linear_1.weight'\] must be a tensor"):
        TimestepEmbedder.from_state_dict({"time_embedding.linear_1.weight": 3})
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        to_layout([1], "sd3")
    with pytest.raises(TypeError, match="prefix must be a string"):
        to_layout(TimestepEmbedder(32).state_dict(), "sd3", prefix=3)
    with pytest.raises(TypeError, match="folder must be a path"):
        TimestepEmbedder(32).save_pretrained(3)
