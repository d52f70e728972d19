"""Checkpoints: round trip, clear errors, atomic writes that survive a crash, exact optimizer resume."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from timestep_embed import files
from timestep_embed.ddpm import checkpoint as ckpt
from timestep_embed.ddpm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

META = {"config": {"train": {"lr": 2e-4, "channels": [32, 64]}, "name": "ünï"}, "step": 12}


def tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "model.w": torch.randn(4, 3, generator=g),
        "model.b": torch.zeros(3, dtype=torch.bfloat16),
        "ema.w": torch.randn(4, 3, generator=g),
        "step": torch.tensor(5),
        "rng.torch": torch.get_rng_state(),
    }


def test_round_trip(tmp_path):
    path = save_checkpoint(tmp_path / "a.safetensors", tensors(), META)
    loaded, meta = load_checkpoint(path)
    assert meta == META and set(loaded) == set(tensors())
    for k, v in tensors().items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v)
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]  # no temp file left


def test_shared_storage_and_bad_values(tmp_path):
    w = torch.randn(3, 3)
    save_checkpoint(tmp_path / "tied.safetensors", {"a": w, "b": w, "c": w[0]})  # tied weights are fine
    assert torch.equal(load_checkpoint(tmp_path / "tied.safetensors")[0]["c"], w[0])
    with pytest.raises(TypeError, match=r"tensors\['x'\] is a int"):
        save_checkpoint(tmp_path / "x.safetensors", {"x": 3})
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(tmp_path / "x.safetensors", {}, {"obj": object()})
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("cut", [0, 5, 20, -1, -40])
def test_truncated_file_is_a_clear_error(tmp_path, cut):
    path = save_checkpoint(tmp_path / "t.safetensors", tensors(), META)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(CheckpointError, match=r"t\.safetensors: (truncated|corrupt)"):
        load_checkpoint(path)


def test_garbage_and_missing_files(tmp_path):
    (tmp_path / "g.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(CheckpointError, match="g.safetensors: corrupt"):
        load_checkpoint(tmp_path / "g.safetensors")
    (tmp_path / "p.safetensors").write_bytes(pickle.dumps({"w": [1.0, 2.0]}))  # a pickle by another name
    with pytest.raises(CheckpointError, match="p.safetensors: not a safetensors file"):
        load_checkpoint(tmp_path / "p.safetensors")
    (tmp_path / "h.safetensors").write_bytes(b"\x0f\x00\x00\x00\x00\x00\x00\x00" + b'{"w": {"x": 1}}')
    with pytest.raises(CheckpointError, match="h.safetensors: corrupt safetensors header"):
        load_checkpoint(tmp_path / "h.safetensors")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.safetensors")


@pytest.mark.parametrize(
    "header, why",
    [
        (b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,Infinity]}}', "a tensor entry without integer"),
        (b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,1e400]}}', "a tensor entry without integer"),
        (b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"w":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}}',
         "the key 'w' is given twice"),
        (b'{"__metadata__":{"a":"1","a":"2"},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}',
         "the key 'a' is given twice"),
    ],
)  # fmt: skip
def test_a_header_with_infinite_offsets_or_a_repeated_key_is_refused_by_name(header, why, tmp_path):
    path = tmp_path / "x.safetensors"  # JSON would keep a repeated key's last entry: another tensor, unseen
    path.write_bytes(len(header).to_bytes(8, "little") + header + torch.arange(4.0).numpy().tobytes())
    with pytest.raises(CheckpointError, match=f"x.safetensors: corrupt safetensors header \\({why}"):
        load_checkpoint(path)


def test_crash_during_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "c.safetensors", tensors(), META)
    before = path.read_bytes()

    def half_then_crash(f, data):
        f.write(data[: len(data) // 2])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(files, "_write_all", half_then_crash)
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(path, {"model.w": torch.ones(1000)}, {"step": 99})
    assert path.read_bytes() == before and load_checkpoint(path)[1] == META
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]


@pytest.mark.parametrize("where", ["mid-write", "before-rename"])
def test_process_killed_while_saving_keeps_previous_checkpoint(tmp_path, where):
    """A real SIGKILL in a child process: half-way through writing, or after the temp file is
    complete but before the rename. The old checkpoint must still load."""
    path = save_checkpoint(tmp_path / "k.safetensors", tensors(), META)
    hook = (
        "files._write_all = lambda f, d: (f.write(d[: len(d) // 2]), f.flush(), os.kill(os.getpid(), 9))"
        if where == "mid-write"
        else "os.replace = lambda *a: os.kill(os.getpid(), 9)"
    )
    code = textwrap.dedent(f"""
        import os, torch
        from timestep_embed import files
        from timestep_embed.ddpm import checkpoint as ckpt
        {hook}
        ckpt.save_checkpoint({str(path)!r}, {{"model.w": torch.ones(100000)}}, {{"step": 99}})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    loaded, meta = load_checkpoint(path)
    assert meta == META and torch.equal(loaded["model.w"], tensors()["model.w"])


def test_optimizer_state_round_trip_resumes_exactly(tmp_path):
    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)

    def steps(model, opt, n, start):
        for i in range(start, start + n):
            x = torch.randn(16, 4, generator=torch.Generator().manual_seed(i))
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()

    straight, opt = make()
    steps(straight, opt, 6, 0)

    model, opt = make()
    steps(model, opt, 3, 0)
    opt_tensors, opt_meta = ckpt.flatten_optimizer_state(opt.state_dict())
    save_checkpoint(
        tmp_path / "r.safetensors",
        {**ckpt.with_prefix(model.state_dict(), "model."), **opt_tensors},
        {"optimizer": opt_meta, "step": 3},
    )
    loaded, meta = load_checkpoint(tmp_path / "r.safetensors")
    resumed, opt2 = make()
    resumed.load_state_dict(ckpt.strip_prefix(loaded, "model."))
    opt2.load_state_dict(ckpt.unflatten_optimizer_state(loaded, meta["optimizer"]))
    steps(resumed, opt2, 3, meta["step"])
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    json.dumps(meta)  # all metadata stays JSON


def test_reads_plain_safetensors_files_without_our_metadata(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.arange(3)}, tmp_path / "plain.safetensors")
    loaded, meta = load_checkpoint(tmp_path / "plain.safetensors")
    assert meta == {} and torch.equal(loaded["x"], torch.arange(3))


def on_cuda(generator: torch.Generator):
    """A stand-in for a CUDA generator: reports CUDA, keeps ``generator``'s (CPU) state."""
    methods = ("get_state", "set_state", "manual_seed", "initial_seed")
    return type("OnCuda", (), {"device": torch.device("cuda"), **{m: getattr(generator, m) for m in methods}})()


def test_a_generator_on_cuda_keeps_that_devices_default_generator(tmp_path, monkeypatch):
    """Dropout on a GPU draws from the device's default generator, not the loop's: the checkpoint keeps its state, so
    ``--resume`` repeats no dropout mask (a CPU-only checkpoint has no such entry)."""
    cpu = torch.Generator().manual_seed(3)
    state, restored = torch.arange(16, dtype=torch.uint8), []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: state)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda new, device: restored.append((new, device)))
    model = torch.nn.Linear(2, 2)
    parts = (model, torch.nn.Linear(2, 2), torch.optim.AdamW(model.parameters()))
    ckpt.save_training_state(tmp_path / "gpu.safetensors", {}, *parts, on_cuda(cpu), 5, 1.0)
    assert ckpt.load_training_state(tmp_path / "gpu.safetensors", *parts, on_cuda(cpu)) == (5, 1.0)
    assert len(restored) == 1 and torch.equal(restored[0][0], state) and restored[0][1] == torch.device("cuda")
    ckpt.save_training_state(tmp_path / "cpu.safetensors", {}, *parts, cpu, 5, 1.0)
    assert "rng.device" not in load_checkpoint(tmp_path / "cpu.safetensors")[0]


def test_resumed_on_another_kind_of_device_the_generators_go_on_from_a_new_seed(tmp_path, monkeypatch, caplog):
    """A CPU generator's state does not fit a CUDA one (5056 bytes against 16): a run trained on one and resumed on the
    other (``train.device`` may change) reseeds from its own seed and the step, and says so."""
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a: pytest.fail("a CPU checkpoint set CUDA's generator"))
    model = torch.nn.Linear(2, 2)
    parts = (model, torch.nn.Linear(2, 2), torch.optim.AdamW(model.parameters()))
    ckpt.save_training_state(tmp_path / "cpu.safetensors", {}, *parts, torch.Generator().manual_seed(3), 5, 1.0)
    resumed = torch.Generator().manual_seed(7)
    with torch.random.fork_rng():  # the global RNG as it was, after
        assert ckpt.load_training_state(tmp_path / "cpu.safetensors", *parts, on_cuda(resumed)) == (5, 1.0)
        assert resumed.initial_seed() == ckpt.resumed_seed(7, 5) == torch.initial_seed()
    assert "resumed on cuda, trained on cpu" in caplog.text
