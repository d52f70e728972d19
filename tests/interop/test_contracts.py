"""Each contract that diffusers implements, against a tiny random-weight model of that diffusers class.

The raw values come from the family's real scheduler; the contract maps them to the model's
``timestep`` and to the sinusoid's input. Forward hooks read what the model's own time path computes:
the first call of its ``Timesteps`` (input and output) and of its ``TimestepEmbedding`` (output).
"""

from __future__ import annotations

import pytest
import torch

from timestep_embed import LowPrecisionTimestepWarning, sinusoidal_embedding
from timestep_embed.interop import CONTRACTS, contract_for, get_contract, mlp_from_diffusers

from ..fixtures.tiny import TINY
from .conftest import build, run

diffusers = pytest.importorskip("diffusers")

# contract -> (tiny model in conftest, the scheduler its pipeline uses)
IN_DIFFUSERS = {
    "ddpm": ("ddpm", lambda: diffusers.DDPMScheduler()),
    "stable_diffusion": ("stable_diffusion", lambda: diffusers.DDIMScheduler(steps_offset=1)),
    "sdxl": ("sdxl", lambda: diffusers.EulerDiscreteScheduler(timestep_spacing="leading", steps_offset=1)),
    "dit_diffusers": ("dit", lambda: diffusers.DDIMScheduler()),
    "pixart": ("pixart", lambda: diffusers.DPMSolverMultistepScheduler()),
    "sd3": ("sd3", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "flux_dev": ("flux_dev", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "flux_schnell": ("flux_schnell", lambda: diffusers.FlowMatchEulerDiscreteScheduler()),
    "wan21": ("wan", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0)),
    "hunyuan_video": ("hunyuan_video", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=7.0)),
    "flux2": ("Flux2Transformer2DModel", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "longcat_image": ("LongCatImageTransformer2DModel", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "ovis_image": ("OvisImageTransformer2DModel", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "hidream": ("HiDreamImageTransformer2DModel", lambda: diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)),
    "cogview3plus": ("CogView3PlusTransformer2DModel", lambda: diffusers.CogVideoXDDIMScheduler()),
    "hunyuan_dit": ("HunyuanDiT2DModel", lambda: diffusers.DDPMScheduler()),
}


def scheduler_values(make) -> torch.Tensor:
    """Two raw values of a 28-step run: the first and one two thirds in (batch of 2)."""
    scheduler = make()
    scheduler.set_timesteps(28)
    return scheduler.timesteps[[0, 18]]


def first_calls(model, inputs, timestep, timestep_arg: str = "timestep"):
    """(input of the first Timesteps call, its output, its TimestepEmbedding, that MLP's input, output)."""
    emb = diffusers.models.embeddings
    seen = {}

    def sinusoid_hook(module, args, out):
        seen.setdefault("sinusoid", (args[0].detach().clone(), out.detach().clone()))

    def mlp_hook(module, args, out):
        seen.setdefault("mlp", (module, args[0].detach().clone(), out.detach().clone()))

    handles = [
        m.register_forward_hook(sinusoid_hook if isinstance(m, emb.Timesteps) else mlp_hook)
        for m in model.modules()
        if isinstance(m, (emb.Timesteps, emb.TimestepEmbedding))
    ]
    try:
        run(model, inputs, timestep, timestep_arg)
    finally:
        for h in handles:
            h.remove()
    return (*seen["sinusoid"], *seen["mlp"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(IN_DIFFUSERS))
def test_contract_reproduces_the_model_time_path(name, dtype):
    contract = get_contract(name)
    tiny, make_scheduler = IN_DIFFUSERS[name]
    model, inputs, _ = build(tiny)
    model = model.to(dtype)
    inputs = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    raw = scheduler_values(make_scheduler)
    low, high = contract.raw_range
    assert low <= float(raw.min()) and float(raw.max()) <= high, "the scheduler leaves the contract's raw range"

    # the pipeline's latents are in the model's dtype
    timestep = contract.model_input(raw, latents_dtype=dtype)
    seen_in, seen_out, mlp, mlp_in, mlp_out = first_calls(model, inputs, timestep, TINY[tiny].timestep_arg)

    expected_in = contract.sinusoid_input(raw, dtype, latents_dtype=dtype)
    assert seen_in.dtype == expected_in.dtype and torch.equal(seen_in, expected_in)
    if seen_in.dtype == torch.bfloat16:  # Flux embeds bfloat16 timesteps: our core says they were rounded
        with pytest.warns(LowPrecisionTimestepWarning, match="probably rounded"):
            ours = sinusoidal_embedding(seen_in, seen_out.shape[-1], contract.convention)
    else:
        ours = sinusoidal_embedding(seen_in, seen_out.shape[-1], contract.convention)
    assert torch.equal(seen_out, ours)
    with torch.no_grad():
        assert torch.equal(mlp_out, mlp_from_diffusers(mlp)(ours.to(mlp_in.dtype)))


def test_flux_in_bfloat16_rounds_what_reaches_the_sinusoid():
    """Scheduler value 990 (sigma 0.99) reaches a bfloat16 Flux's sinusoid as 988: rounded twice, once as
    sigma and once after the * 1000 (rounding 990 itself to bfloat16 gives 992)."""
    flux = get_contract("flux_dev")
    raw = torch.tensor([990.0, 750.0])
    assert flux.sinusoid_input(raw, torch.bfloat16).tolist() == [988.0, 752.0]
    assert flux.sinusoid_input(raw, torch.float32).tolist() == pytest.approx([990.0, 750.0])


def test_a_bfloat16_flux_pipeline_rounds_the_step_before_dividing():
    """FluxPipeline casts ``t`` to the latents' dtype before ``/ 1000``: in a bfloat16 pipeline 990 is
    992 already, and 992 is what reaches the sinusoid (pipelines/flux/pipeline_flux.py)."""
    flux = get_contract("flux_dev")
    raw = torch.tensor([990.0, 750.0])
    assert flux.model_input(raw, torch.bfloat16).dtype == torch.bfloat16
    assert flux.sinusoid_input(raw, torch.bfloat16, latents_dtype=torch.bfloat16).tolist() == [992.0, 752.0]
    assert get_contract("sd3").model_input(raw, torch.bfloat16).dtype == torch.float32  # SD3 passes t as it is


@pytest.mark.parametrize(
    "name, raw, expected",
    [
        # pipeline_aura_flow.py: torch.tensor([t / 1000]).to(dtype=latents.dtype): 0.999 rounds to 1.0
        ("auraflow", [999.0, 578.125], [1.0, 0.578125]),
        # pipeline_qwenimage.py: t.expand(b).to(latents.dtype), then / 1000 in bfloat16, then .to(dtype) again
        ("qwen_image", [998.0, 578.125], [1.0, 0.578125]),
        # pipeline_mochi.py: t.expand(b).to(latents.dtype); Timesteps takes the rounded step as it is
        ("mochi", [999.0, 578.125], [1000.0, 580.0]),
    ],
)
def test_a_bfloat16_pipeline_rounds_where_it_casts(name, raw, expected):
    contract = get_contract(name)
    got = contract.sinusoid_input(torch.tensor(raw), torch.bfloat16, latents_dtype=torch.bfloat16)
    assert got.float().tolist() == expected


def test_cogview4_is_fed_the_unshifted_integer_steps():
    """pipeline_cogview4.py passes linspace(1000, 1, steps) cast to int64 (the shifted sigmas only drive the
    scheduler's updates): what reaches the sinusoid is that step, not the shifted sigma * 1000."""
    contract = get_contract("cogview4")
    assert contract.raw_range == (1.0, 1000.0) and "not shifted" in contract.raw
    steps = torch.tensor([1000.0, 889.0])
    assert torch.equal(contract.sinusoid_input(steps), steps)


def test_the_dit_port_differs_from_the_original_as_the_contract_says():
    """diffusers' DiT sinusoid (shift 1) against facebookresearch/DiT's (shift 0): 1.98 apart on 0..999."""
    t = torch.arange(1000)
    port = sinusoidal_embedding(t, 256, get_contract("dit_diffusers").convention)
    original = sinusoidal_embedding(t, 256, get_contract("dit").convention)
    assert (port - original).abs().max().item() == pytest.approx(1.98, abs=0.01)
    assert "1.98" in get_contract("dit_diffusers").notes


@pytest.mark.parametrize("name", list(IN_DIFFUSERS))
def test_contract_for_finds_the_contract_of_each_tiny_model(name):
    model, _, _ = build(IN_DIFFUSERS[name][0])
    assert contract_for(model) is CONTRACTS[name]


def test_every_contract_is_complete():
    for contract in CONTRACTS.values():
        assert contract.sources and all(": " in s for s in contract.sources), contract.name
        low, high = contract.value_range()
        assert low <= high and torch.isfinite(torch.tensor([low, high])).all()
        assert contract.name in contract.describe()
    with pytest.raises(ValueError, match="no timestep contract 'sd4'; known: ddpm"):
        get_contract("sd4")


def test_contract_lookups_and_inputs_name_what_is_wrong():
    with pytest.raises(TypeError, match=r"name must be a contract's name .*\['flux_dev'\]"):
        get_contract(["flux_dev"])
    contract = get_contract("flux_dev")
    with pytest.raises(TypeError, match="raw must be int or float numbers, got a string"):
        contract.sinusoid_input("abc")
    with pytest.raises(TypeError, match="raw must hold the scheduler's real time values"):
        contract.sinusoid_input(torch.tensor([True]))
    with pytest.raises(TypeError, match="latents_dtype must be a floating torch.dtype"):
        contract.sinusoid_input(0.5, latents_dtype=torch.int32)
