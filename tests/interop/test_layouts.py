"""``TimestepEmbedder.from_state_dict`` on the full state dict of a tiny random-weight diffusers model of
every family, written to a safetensors file and read back as a checkpoint is, and on the same weights
under the original release's key names (as diffusers' converters read them:
``diffusers/loaders/single_file_utils.py``). Fed the model's timestep as its pipeline passes it (the
contract), the loaded embedder equals the model's own time MLP output, float32 and bfloat16.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from timestep_embed import TimestepEmbedder
from timestep_embed.interop import get_contract
from timestep_embed.nn import find_time_paths

from ..fixtures.tiny import TINY
from .conftest import build, run
from .test_contracts import IN_DIFFUSERS, scheduler_values

diffusers = pytest.importorskip("diffusers")

# tiny model -> (contract, family to name (None: detected), layout expected, MLP labels expected)
DIFFUSERS = {
    "ddpm": ("ddpm", "ddpm", "ddpm", ["timestep"]),
    "stable_diffusion": ("stable_diffusion", "stable_diffusion", "stable_diffusion", ["timestep"]),
    "sdxl": ("sdxl", "sdxl", "sdxl", ["timestep", "time ids"]),
    "dit": ("dit_diffusers", None, "dit_diffusers", ["timestep", "class labels"]),
    "pixart": ("pixart", None, "pixart", ["timestep"]),
    "sd3": ("sd3", None, "sd3", ["timestep", "text"]),
    "flux_dev": ("flux_dev", None, "flux_dev", ["timestep", "guidance", "text"]),
    "flux_schnell": ("flux_schnell", None, "flux_schnell", ["timestep", "text"]),
    "wan": ("wan21", None, "wan21", ["timestep", "text"]),
    "hunyuan_video": ("hunyuan_video", None, "hunyuan_video", ["timestep", "guidance", "refiner", "text"]),
    "Flux2Transformer2DModel": ("flux2", None, "flux2", ["timestep", "guidance"]),
    "HunyuanDiT2DModel": ("hunyuan_dit", None, "hunyuan_dit", ["timestep", "size", "text"]),
}


def checkpoint_file(model, tmp_path) -> dict[str, torch.Tensor]:
    """The model's whole state dict through a safetensors file, as a downloaded checkpoint is read."""
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return load_file(str(path))


def module_output(model, inputs, timestep, module_path: str) -> torch.Tensor:
    """The first output of ``model.<module_path>`` in a forward pass with ``timestep``."""
    seen = []
    handle = model.get_submodule(module_path).register_forward_hook(lambda m, a, out: seen.append(out.detach()))
    try:
        run(model, inputs, timestep)
    finally:
        handle.remove()
    return seen[0]


def in_dtype(model, inputs, dtype):
    cast = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    return model.to(dtype), cast


def model_timesteps(tiny: str, contract, dtype: torch.dtype) -> torch.Tensor:
    """What the pipeline passes a model of ``dtype`` (its latents in that dtype too)."""
    scheduler = next((make for _, (name, make) in IN_DIFFUSERS.items() if name == tiny), None)
    return contract.model_input(scheduler_values(scheduler), latents_dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("tiny", list(DIFFUSERS))
def test_the_loaded_time_path_equals_the_model_own(tiny, dtype, tmp_path):
    contract_name, family, layout, labels = DIFFUSERS[tiny]
    contract = get_contract(contract_name)
    model, inputs, _ = build(tiny)
    state = checkpoint_file(model, tmp_path)
    match = find_time_paths(state, family=family)
    assert match.layout.name == layout and [p.label for p in match.paths][: len(labels)] == labels
    embedder = TimestepEmbedder.from_state_dict(state, family=family).to(dtype)
    model, inputs = in_dtype(model, inputs, dtype)
    t = model_timesteps(tiny, contract, dtype)
    mlp = match.paths[0].linears[0].rpartition(".")[0]
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, mlp))


def rename(state: dict, mapping: dict[str, str], extra: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict with every key prefix in ``mapping`` (diffusers' name -> the original's) renamed."""
    out = {}
    for key, value in state.items():
        for ours, theirs in mapping.items():
            if key.startswith(ours):
                key = theirs + key[len(ours) :]
                break
        out[key] = value
    return {**out, **extra}


Z = torch.zeros(1)
# tiny model -> (the original's names for its time-path modules, keys only the original has, layout)
ORIGINAL = {
    # convert_ldm_unet_checkpoint: time_embed.0/2 <- time_embedding.linear_1/2 under model.diffusion_model.
    "stable_diffusion": (
        {"time_embedding.linear_1": "model.diffusion_model.time_embed.0",
         "time_embedding.linear_2": "model.diffusion_model.time_embed.2"},
        {"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": Z},
        "stable_diffusion_original"),
    # SDXL: label_emb.0.0/0.2 <- add_embedding.linear_1/2
    "sdxl": (
        {"time_embedding.linear_1": "model.diffusion_model.time_embed.0",
         "time_embedding.linear_2": "model.diffusion_model.time_embed.2",
         "add_embedding.linear_1": "model.diffusion_model.label_emb.0.0",
         "add_embedding.linear_2": "model.diffusion_model.label_emb.0.2"},
        {"model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": Z},
        "sdxl_original"),
    # convert_sd3_transformer_checkpoint_to_diffusers: t_embedder.mlp.0/2, y_embedder.mlp.0/2
    "sd3": (
        {"time_text_embed.timestep_embedder.linear_1": "model.diffusion_model.t_embedder.mlp.0",
         "time_text_embed.timestep_embedder.linear_2": "model.diffusion_model.t_embedder.mlp.2",
         "time_text_embed.text_embedder.linear_1": "model.diffusion_model.y_embedder.mlp.0",
         "time_text_embed.text_embedder.linear_2": "model.diffusion_model.y_embedder.mlp.2"},
        {"model.diffusion_model.joint_blocks.0.context_block.adaLN_modulation.1.bias": Z},
        "sd3_original"),
    # convert_flux_transformer_checkpoint_to_diffusers: time_in, guidance_in, vector_in (in_layer / out_layer)
    "flux_dev": (
        {"time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
         "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
         "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
         "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
         "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
         "time_text_embed.text_embedder.linear_2": "vector_in.out_layer"},
        {"double_blocks.0.img_attn.norm.key_norm.scale": Z},
        "flux_dev_original"),
    "flux_schnell": (
        {"time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
         "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
         "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
         "time_text_embed.text_embedder.linear_2": "vector_in.out_layer"},
        {"double_blocks.0.img_attn.norm.key_norm.scale": Z},
        "flux_schnell_original"),
    # convert_sana_transformer_to_diffusers / PixArt: t_embedder.mlp.0/2, t_block.1, y_embedder.y_proj
    "pixart": (
        {"adaln_single.emb.timestep_embedder.linear_1": "t_embedder.mlp.0",
         "adaln_single.emb.timestep_embedder.linear_2": "t_embedder.mlp.2",
         "adaln_single.linear": "t_block.1"},
        {"y_embedder.y_proj.fc1.weight": Z},
        "pixart_original"),
    # convert_hunyuan_video_to_diffusers: time_in.mlp.0/2, guidance_in.mlp.0/2, txt_in.t_embedder.mlp.0/2
    "hunyuan_video": (
        {"time_text_embed.timestep_embedder.linear_1": "time_in.mlp.0",
         "time_text_embed.timestep_embedder.linear_2": "time_in.mlp.2",
         "time_text_embed.guidance_embedder.linear_1": "guidance_in.mlp.0",
         "time_text_embed.guidance_embedder.linear_2": "guidance_in.mlp.2",
         "context_embedder.time_text_embed.timestep_embedder.linear_1": "txt_in.t_embedder.mlp.0",
         "context_embedder.time_text_embed.timestep_embedder.linear_2": "txt_in.t_embedder.mlp.2",
         "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
         "time_text_embed.text_embedder.linear_2": "vector_in.out_layer"},
        {"txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.bias": Z},
        "hunyuan_video_original"),
    # convert_flux2_transformer_checkpoint_to_diffusers: time_in, guidance_in (in_layer / out_layer)
    "Flux2Transformer2DModel": (
        {"time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
         "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
         "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
         "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer"},
        {"single_stream_modulation.lin.weight": Z},
        "flux2_original"),
    # scripts/convert_hunyuandit_to_diffusers.py: t_embedder.mlp.0/2, extra_embedder.0/2, mlp_t5.0/2
    "HunyuanDiT2DModel": (
        {"time_extra_emb.timestep_embedder.linear_1": "t_embedder.mlp.0",
         "time_extra_emb.timestep_embedder.linear_2": "t_embedder.mlp.2",
         "time_extra_emb.extra_embedder.linear_1": "extra_embedder.0",
         "time_extra_emb.extra_embedder.linear_2": "extra_embedder.2",
         "text_embedder.linear_1": "mlp_t5.0",
         "text_embedder.linear_2": "mlp_t5.2"},
        {},
        "hunyuan_dit_original"),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("tiny", list(ORIGINAL))
def test_the_original_release_keys_load_the_same_time_path(tiny, dtype, tmp_path):
    contract_name, family, _, _ = DIFFUSERS[tiny]
    mapping, extra, layout = ORIGINAL[tiny]
    model, inputs, _ = build(tiny)
    original = rename(checkpoint_file(model, tmp_path), mapping, extra)
    match = find_time_paths(original)
    assert match.layout.name == layout and match.layout.family == get_contract(contract_name).name
    embedder = TimestepEmbedder.from_state_dict(original).to(dtype)
    model, inputs = in_dtype(model, inputs, dtype)
    t = model_timesteps(tiny, get_contract(contract_name), dtype)
    mlp = DIFFUSERS_MAIN[tiny]
    with torch.no_grad():
        assert torch.equal(embedder(t), module_output(model, inputs, t, mlp))


DIFFUSERS_MAIN = {
    "stable_diffusion": "time_embedding",
    "sdxl": "time_embedding",
    "sd3": "time_text_embed.timestep_embedder",
    "flux_dev": "time_text_embed.timestep_embedder",
    "flux_schnell": "time_text_embed.timestep_embedder",
    "pixart": "adaln_single.emb.timestep_embedder",
    "hunyuan_video": "time_text_embed.timestep_embedder",
    "Flux2Transformer2DModel": "time_guidance_embed.timestep_embedder",
    "HunyuanDiT2DModel": "time_extra_emb.timestep_embedder",
}


def test_flux_guidance_and_the_hunyuan_refiner_load_on_request(tmp_path):
    for tiny, which, module in (
        ("flux_dev", "guidance", "time_text_embed.guidance_embedder"),
        ("hunyuan_video", "refiner", "context_embedder.time_text_embed.timestep_embedder"),
    ):
        model, inputs, timesteps = build(tiny)
        embedder = TimestepEmbedder.from_state_dict(checkpoint_file(model, tmp_path), which=which)
        given = inputs.get("guidance") if which == "guidance" else timesteps
        with torch.no_grad():
            assert torch.equal(embedder(given), module_output(model, inputs, timesteps, module))


def test_the_wan_original_builds_its_sinusoid_in_float64(tmp_path):
    """Wan-Video/Wan2.1 wan/modules/model.py ``sinusoidal_embedding_1d``: float64 phase, cast to float32
    for the MLP; the diffusers port forms it in float32 (rounding differences only)."""
    model, inputs, timesteps = build("wan")
    mapping = {"condition_embedder.time_embedder.linear_1": "time_embedding.0",
               "condition_embedder.time_embedder.linear_2": "time_embedding.2",
               "condition_embedder.time_proj": "time_projection.1"}  # fmt: skip
    original = rename(checkpoint_file(model, tmp_path), mapping, {"head.modulation": Z})
    embedder = TimestepEmbedder.from_state_dict(original)
    assert find_time_paths(original).layout.name == "wan21_original" and embedder.time_proj.precise
    half = 16
    position = timesteps.double()
    sinusoid = torch.outer(position, torch.pow(10000, -torch.arange(half).to(position).div(half)))
    x = torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1).float()
    mlp = model.condition_embedder.time_embedder
    with torch.no_grad():
        torch.testing.assert_close(embedder(timesteps), mlp(x), rtol=0, atol=1e-6)


def test_a_flux3_flow_map_model_loads_both_of_its_time_paths(tmp_path):
    """FLUX.3's flow-map (step-distilled) configs embed the timestep each step jumps to with a second MLP
    (``target_timestep_embedder``, transformer_flux3.py): both load, each equal to the model's own."""
    spec = TINY["Flux3Transformer2DModel"]
    torch.manual_seed(0)
    model = diffusers.Flux3Transformer2DModel(**spec.config, flow_map=True).eval()
    t = torch.tensor(spec.timesteps)
    inputs = {**spec.inputs(), "target_timestep": t / 2}
    state = checkpoint_file(model, tmp_path)
    match = find_time_paths(state)
    assert match.layout.name == "flux3" and [p.label for p in match.paths] == ["timestep", "target timestep"]
    for which, module, value in (
        ("timestep", "timestep_embedder", t),
        ("target timestep", "target_timestep_embedder", t / 2),
    ):
        embedder = TimestepEmbedder.from_state_dict(state, which=which)
        with torch.no_grad():
            assert torch.equal(embedder(value), module_output(model, inputs, t, module)), which
