"""A time path saved alone, the file a porter most often holds: with ``layout=`` named, the layout's
time-path keys are enough (the markers of the rest of the network decide automatic detection only);
without it, the error for a state dict with no marker stays "no time path"."""

from __future__ import annotations

import pytest
import torch

from timestep_embed import TimestepEmbedder
from timestep_embed.nn import find_time_paths

from .test_time_path import dit, edm_dhariwal, linear

T = torch.tensor([0, 10, 500, 999])


def _alone(state: dict, *keep: str) -> dict:
    return {k: v for k, v in state.items() if k.startswith(keep)}


def _embeddings(whole: dict, alone: dict, layout: str, t=T):
    """The embedder read from the whole network (found by its markers) and from its time path alone."""
    assert find_time_paths(whole).layout.name == layout
    with torch.no_grad():
        return TimestepEmbedder.from_state_dict(whole)(t), TimestepEmbedder.from_state_dict(alone, layout=layout)(t)


def _diffusers_mlp(prefix: str, out: int, width: int = 256) -> dict:
    return {**linear(out, width, prefix + "linear_1"), **linear(out, out, prefix + "linear_2")}


def test_dit_t_embedder_saved_alone():
    """facebookresearch/DiT models.py ``TimestepEmbedder``: ``t_embedder.mlp.0`` / ``mlp.2``."""
    whole, reference, t = dit()
    alone = _alone(whole, "t_embedder.")
    assert "y_embedder.embedding_table.weight" not in alone
    ours, theirs = _embeddings(whole, alone, "dit", torch.as_tensor(t))
    assert torch.equal(theirs, ours) and torch.equal(theirs, reference(torch.as_tensor(t)))


def test_edm_mapping_saved_alone():
    """NVlabs/edm training/networks.py DhariwalUNet: ``map_noise`` has no weights, ``map_layer0/1`` do."""
    whole, _, c_noise = edm_dhariwal()
    alone = _alone(whole, "model.map_layer0.", "model.map_layer1.")
    ours, theirs = _embeddings(whole, alone, "edm", c_noise)
    assert torch.equal(theirs, ours)
    with pytest.raises(ValueError, match="no time path in this state dict"):
        TimestepEmbedder.from_state_dict(alone)  # nothing says EDM: detection needs its markers
    with pytest.raises(ValueError, match="no time path in this state dict"):
        TimestepEmbedder.from_state_dict(alone, layout="edm_ve")  # NCSN++ cannot load without map_noise.freqs


def test_sd3_time_mlps_saved_alone():
    """diffusers transformer_sd3.py ``time_text_embed`` and Stability-AI/sd3.5 mmditx.py ``t_embedder``."""
    text = _diffusers_mlp("time_text_embed.text_embedder.", 32, 24)
    alone = {**_diffusers_mlp("time_text_embed.timestep_embedder.", 32), **text}
    whole = {**alone, "pos_embed.proj.weight": torch.zeros(1)}
    ours, theirs = _embeddings(whole, alone, "sd3")
    assert torch.equal(theirs, ours)
    original = {**linear(32, 256, "t_embedder.mlp.0"), **linear(32, 32, "t_embedder.mlp.2")}
    ours, theirs = _embeddings({**original, "joint_blocks.0.x.weight": torch.zeros(1)}, original, "sd3_original")
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("original", [False, True], ids=["diffusers", "black-forest-labs"])
def test_flux_time_mlps_saved_alone(original):
    """diffusers transformer_flux.py ``time_text_embed`` and black-forest-labs/flux model.py ``time_in`` /
    ``guidance_in`` (MLPEmbedder: ``in_layer`` / ``out_layer``)."""
    if original:
        alone = {**linear(32, 256, "time_in.in_layer"), **linear(32, 32, "time_in.out_layer")}
        alone.update({**linear(32, 256, "guidance_in.in_layer"), **linear(32, 32, "guidance_in.out_layer")})
        whole = {**alone, **linear(32, 8, "vector_in.in_layer"), "double_blocks.0.x.weight": torch.zeros(1)}
        layout = "flux_dev_original"
    else:
        alone = {**_diffusers_mlp("time_text_embed.timestep_embedder.", 32)}
        alone.update(_diffusers_mlp("time_text_embed.guidance_embedder.", 32))
        whole = {**alone, "x_embedder.weight": torch.zeros(1), "single_transformer_blocks.0.x.weight": torch.zeros(1)}
        layout = "flux_dev"
    sigma = torch.tensor([1.0, 0.99, 0.5, 0.0])
    ours, theirs = _embeddings(whole, alone, layout, sigma)
    assert torch.equal(theirs, ours)
    loaded = TimestepEmbedder.from_state_dict(alone, layout=layout, which="guidance")
    assert loaded.emb_dim == 32


def test_a_named_layout_still_needs_its_own_keys():
    alone = {**linear(32, 256, "t_embedder.mlp.0"), **linear(32, 32, "t_embedder.mlp.2")}
    with pytest.raises(ValueError, match="no time path in this state dict.*t_embedder.mlp"):
        TimestepEmbedder.from_state_dict(alone, layout="flux_dev")
    with pytest.raises(ValueError, match="no time path in this state dict"):
        TimestepEmbedder.from_state_dict(_alone(alone, "t_embedder.mlp.0."), layout="dit")  # one Linear only


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda w: w.to(torch.complex64), TypeError, "must hold real floating weights, got dtype torch.complex64"),
        (lambda w: w.to(torch.int64), TypeError, "must hold real floating weights, got dtype torch.int64"),
        (lambda w: w.reshape(-1), ValueError, "must be a Linear's weight \\[out, in\\], got shape"),
        (lambda w: torch.empty_like(w, device="meta"), ValueError, "is a meta tensor, which holds no weights"),
    ],
)
def test_time_mlp_weights_that_cannot_be_a_linear_layer_are_refused_by_name(change, error, words):
    whole, _, _ = dit()
    whole["t_embedder.mlp.0.weight"] = change(whole["t_embedder.mlp.0.weight"])
    with pytest.raises(error, match=r"state_dict\['t_embedder\.mlp\.0\.weight'\] " + words):
        TimestepEmbedder.from_state_dict(whole)


def test_a_state_dict_holding_two_models_time_paths_is_refused_unless_one_is_named():
    both = {**dit()[0], **edm_dhariwal()[0]}
    with pytest.raises(ValueError, match="time paths of two models: .*pass layout= or family="):
        find_time_paths(both)
    assert find_time_paths(both, layout="dit").layout.name == "dit"
    assert find_time_paths(both, layout="edm").layout.name == "edm"
