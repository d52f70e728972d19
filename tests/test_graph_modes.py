"""Under tracing, compiling, export, meta and fake tensors and autograd, the core, the diffusers
drop-in, the module and a patched diffusers UNet behave exactly like diffusers: the same values,
gradients that reach t, and no branch that depends on the values seen while tracing."""

from __future__ import annotations

import pytest
import torch
from diffusers import UNet2DModel
from diffusers.models.embeddings import GaussianFourierProjection, TimestepEmbedding, Timesteps
from diffusers.models.embeddings import get_timestep_embedding as diffusers_embedding
from torch._subclasses.fake_tensor import FakeTensorMode

from timestep_embed import (
    FourierEmbedding,
    SinusoidalEmbedding,
    TimestepEmbedder,
    get_timestep_embedding,
    sinusoidal_embedding,
)
from timestep_embed.ddpm.runtime import torch_older_than
from timestep_embed.interop import patch_diffusers_model

from .fixtures.bits import same_bits

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # diffusers' own shape asserts

TRACE_ON = torch.tensor([3.0, 917.0])  # integer-valued floats: the old table path took these
RUN_ON = [torch.tensor([11.5, 400.75]), torch.tensor([3.0, 5.0]), torch.tensor([999.0, 999.0])]
DIM = 33


class Core(torch.nn.Module):
    def forward(self, t):
        return sinusoidal_embedding(t, DIM, "adm")


class DropIn(torch.nn.Module):
    def forward(self, t):
        return get_timestep_embedding(t, DIM, True, 0)


# torch 2.2's dynamo cannot construct a dataclass inside a compiled region, and the drop-in builds its
# Convention from diffusers' flags there (torch >= 2.3 can); eager, traced and non-strict it works.
OLD_DYNAMO = pytest.mark.skipif(torch_older_than(2, 3), reason="torch < 2.3: no dataclass under dynamo")


def compiled_subject(name):
    return pytest.param(name, marks=OLD_DYNAMO) if name == "drop-in" else name


def reference(t):
    return diffusers_embedding(t, DIM, True, 0)


SUBJECTS = {
    "core": Core,
    "drop-in": DropIn,
    "module": lambda: SinusoidalEmbedding(DIM, "adm", num_timesteps=1000),
}


def tiny_unet() -> UNet2DModel:
    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        block_out_channels=(8, 16),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    ).eval()


@pytest.fixture(scope="module")
def unets():
    plain = tiny_unet()
    patched = patch_diffusers_model(tiny_unet())
    return plain, patched


X = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", SUBJECTS)
def test_jit_trace_on_some_timesteps_runs_right_on_others(name):
    traced = torch.jit.trace(SUBJECTS[name](), (TRACE_ON,), check_trace=False)
    for t in RUN_ON:
        assert torch.equal(traced(t), reference(t)), t


@pytest.mark.parametrize("name", [compiled_subject(name) for name in SUBJECTS])
def test_compile_fullgraph_equals_diffusers(name):
    compiled = torch.compile(SUBJECTS[name](), fullgraph=True, backend="eager", dynamic=True)
    for t in (TRACE_ON, *RUN_ON, torch.arange(5), torch.rand(7) * 1000):
        assert torch.equal(compiled(t), reference(t)), t


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("name", SUBJECTS)
def test_export_equals_diffusers(name, strict):
    if strict and name == "drop-in" and OLD_DYNAMO.args[0]:
        pytest.skip(OLD_DYNAMO.kwargs["reason"])
    exported = torch.export.export(SUBJECTS[name](), (TRACE_ON,), strict=strict).module()
    for t in RUN_ON:
        assert torch.equal(exported(t), reference(t)), t


@pytest.mark.parametrize("name", SUBJECTS)
def test_meta_and_fake_tensors_give_diffusers_shapes(name):
    subject = SUBJECTS[name]()
    for t in (torch.empty(4, device="meta"), torch.empty(4, dtype=torch.int64, device="meta")):
        out, expected = subject(t), reference(t)
        assert (out.shape, out.dtype, out.device) == (expected.shape, expected.dtype, expected.device)
    with FakeTensorMode():
        for t in (torch.empty(4), torch.zeros(3, dtype=torch.int64)):
            out, expected = subject(t), reference(t)
            assert (out.shape, out.dtype) == (expected.shape, expected.dtype)


@pytest.mark.parametrize("name", SUBJECTS)
@pytest.mark.parametrize("t", [TRACE_ON, RUN_ON[0], torch.full((300,), 42.0)])
def test_gradient_with_respect_to_t_is_diffusers_gradient(name, t):
    ours, theirs = t.clone().requires_grad_(True), t.clone().requires_grad_(True)
    weights = torch.randn(len(t), DIM, generator=torch.Generator().manual_seed(1))
    (SUBJECTS[name]()(ours) * weights).sum().backward()
    (reference(theirs) * weights).sum().backward()
    assert torch.equal(ours.grad, theirs.grad)
    assert ours.grad.abs().sum() > 0  # the embedding's part of d/dt is there


def test_patched_unet_under_jit_trace(unets):
    plain, patched = unets
    traced = torch.jit.trace(patched, (X, TRACE_ON), check_trace=False, strict=False)
    for t in RUN_ON:
        assert torch.equal(traced(X, t)["sample"], plain(X, t).sample)


def test_patched_unet_under_compile_export_meta_and_fake_tensors(unets):
    plain, patched = unets
    compiled = torch.compile(patched, fullgraph=True, backend="eager")
    exported = [torch.export.export(patched, (X, TRACE_ON), strict=s).module() for s in (False, True)]
    with torch.no_grad():
        for t in RUN_ON:
            expected = plain(X, t).sample
            assert torch.equal(compiled(X, t).sample, expected)
            assert all(torch.equal(e(X, t)[0], expected) for e in exported)
    meta = patch_diffusers_model(tiny_unet()).to("meta")
    out = meta(X.to("meta"), TRACE_ON.to("meta")).sample
    assert out.shape == X.shape and out.is_meta
    with FakeTensorMode(allow_non_fake_inputs=True):  # the weights stay real, the inputs are fake
        out = patched(torch.empty(2, 1, 8, 8), torch.empty(2)).sample
        assert out.shape == X.shape


def test_patched_unet_gradient_with_respect_to_t(unets):
    plain, patched = unets
    grads = []
    for unet in (plain, patched):
        t = TRACE_ON.clone().requires_grad_(True)
        unet(X, t).sample.sum().backward()
        grads.append(t.grad)
    assert torch.equal(grads[0], grads[1]) and grads[1].abs().sum() > 0


def test_diffusers_timesteps_module_is_the_reference_for_the_module():
    theirs = Timesteps(DIM, True, 0)
    for t in RUN_ON:
        assert torch.equal(SinusoidalEmbedding(DIM, "adm", num_timesteps=1000)(t), theirs(t))


# Large CPU batches of few values take the reuse paths outside these transforms: each case exercises one of them.
REPEATED = {
    "4096 of 4 values": torch.tensor([3.5, 250.25, 611.0, 999.0])[torch.arange(4096) % 4],
    "5000 of one value": torch.full((5000,), 437.25),
    "per-token [8, 512] of 3 values": torch.tensor([12.0, 500.5, 871.0])[torch.arange(8 * 512).reshape(8, 512) % 3],
}
HAS_DEBUG_UNWRAP = pytest.mark.skipif(
    not hasattr(torch.func, "debug_unwrap"), reason="torch < 2.3: no public test for torch.func's wrapped tensors"
)


@pytest.mark.parametrize("case", REPEATED)
@pytest.mark.parametrize("name", SUBJECTS)
def test_forward_mode_derivatives_are_diffusers_on_repeated_timesteps(name, case):
    """torch.func.jvp and torch.autograd.forward_ad through the function and the module: every row's own tangent
    (the reuse paths gave every row one row's tangent, or none), bit for bit diffusers'."""
    t = REPEATED[case]
    tangent = torch.randn(t.shape, generator=torch.Generator().manual_seed(2))
    subject = SUBJECTS[name]()
    _, ours = torch.func.jvp(subject, (t,), (tangent,))
    _, theirs = torch.func.jvp(lambda x: reference(x.reshape(-1)).reshape(*x.shape, -1), (t,), (tangent,))
    assert same_bits(ours, theirs) and ours.abs().sum() > 0
    with torch.autograd.forward_ad.dual_level():
        out = subject(torch.autograd.forward_ad.make_dual(t, tangent))
        assert same_bits(torch.autograd.forward_ad.unpack_dual(out).tangent, theirs)


def test_forward_mode_derivatives_of_the_embedder_on_per_token_timesteps_are_diffusers():
    """The embedder's sinusoid and MLP on distinct values only, outside the transform; inside, every token's."""
    embedder = TimestepEmbedder(64, sinusoid_dim=DIM + 1)
    sinusoid, mlp = Timesteps(DIM + 1, True, 0), TimestepEmbedding(DIM + 1, 64)
    mlp.load_state_dict(embedder.time_embedding.state_dict())
    t = REPEATED["per-token [8, 512] of 3 values"]
    tangent = torch.randn(t.shape, generator=torch.Generator().manual_seed(3))
    _, ours = torch.func.jvp(embedder, (t,), (tangent,))
    _, theirs = torch.func.jvp(lambda x: mlp(sinusoid(x.reshape(-1))).reshape(*x.shape, -1), (t,), (tangent,))
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6) and ours.abs().sum() > 0


@HAS_DEBUG_UNWRAP
@pytest.mark.parametrize("name", SUBJECTS)
def test_vmap_and_per_sample_gradients_are_diffusers(name):
    """torch.func.vmap reads no values of its batched tensor (the value checks did: a crash); per-sample gradients
    through vmap(grad(...)) equal diffusers'."""
    subject = SUBJECTS[name]()
    t = torch.tensor([[3.0, 917.5], [42.0, 42.0], [0.0, 999.0]])
    assert same_bits(torch.func.vmap(subject)(t), torch.func.vmap(reference)(t))
    weights = torch.randn(2, DIM, generator=torch.Generator().manual_seed(4))

    def loss(f):
        return lambda row: (f(row) * weights).sum()

    assert same_bits(
        torch.func.vmap(torch.func.grad(loss(subject)))(t), torch.func.vmap(torch.func.grad(loss(reference)))(t)
    )
    fourier, theirs = (
        FourierEmbedding(2 * DIM, log=True),
        GaussianFourierProjection(DIM, log=True, flip_sin_to_cos=False),
    )
    theirs.weight.data = fourier.weight.clone()
    assert same_bits(torch.func.vmap(fourier)(t + 1), torch.func.vmap(theirs)(t + 1))


@pytest.mark.parametrize("name", [compiled_subject(name) for name in SUBJECTS])
def test_a_python_number_compiles_in_one_graph(name):
    """A model passing its step as a Python number (``self.emb(17)``) compiles with fullgraph=True (numpy, which
    dynamo cannot trace, held the number first), to the eager output."""
    subject = SUBJECTS[name]()
    compiled = torch.compile(lambda s: subject(s), fullgraph=True, backend="eager")
    for step in (17, 17.5):
        assert same_bits(compiled(step), subject(step)), step
