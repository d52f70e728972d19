"""The scripts run end to end at tiny sizes and write what they promise."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from timestep_embed.ddpm import load_mnist, run_config
from timestep_embed.ddpm.data import SHIFT_PIXELS, random_shifts
from timestep_embed.ddpm.evaluate import nearest_distances

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_process(monkeypatch, capsys):
    """``in_process(script, *argv)`` -> (exit code, stderr): a script's ``main`` in this process, for the
    mistakes it refuses before any work (a fresh interpreter would only add seconds of imports)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # the scripts import _common and _timing

    def run(script: str, *argv: str) -> tuple[int, str]:
        spec = importlib.util.spec_from_file_location(f"script_{script}", ROOT / "scripts" / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        capsys.readouterr()
        try:
            code = module.main(list(argv))
        except SystemExit as stop:
            code = stop.code
        return code, capsys.readouterr().err

    return run


def test_ablation_smoke(tmp_path):
    out = tmp_path / "ablation"
    cmd = [sys.executable, str(ROOT / "scripts" / "ablate_embeddings.py"), "--config",
           str(ROOT / "configs" / "smoke.yaml"), "--variants", "adm", "sine_only", "none",
           "--set", "train.steps=3", "--heldout", "8", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) and "rows" in rows else rows
    assert {r["variant"] for r in rows} >= {"adm", "sine_only", "none"}
    assert "| adm |" in (out / "results.md").read_text()
    reused = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert reused.returncode == 0 and "adm seed 0:" not in reused.stdout  # finished with this very config
    again = subprocess.run([*cmd, "--set", "train.steps=3", "train.lr=0.01"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0 and again.stdout.count(" seed 0:") == 3  # another config: trained anew
    for png in ("heldout_loss_by_band.png", "ablation_metrics.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_per_token_smoke(tmp_path):
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_per_token.py"), "--tokens", "1024", "--sinusoid", "16",
           "--emb", "32", "--rounds", "1", "--threads", "1", "--modes", "fwd+bwd"]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("fwd ", "fwd+bwd"))]
    assert len(rows) == 3 and {r[1] for r in rows} == {"diffusers", "ours"}  # one fresh process each (memory)
    assert "32 distinct values" in result.stdout


def test_bench_train_step_smoke(tmp_path, in_process):
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_train_step.py"), "--config", "smoke", "--threads", "1",
           "--budget", "0.1"]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split()[0]: line.split()[-3:] for line in result.stdout.splitlines() if " step " in line}
    assert set(rows) == {"optimizer", "training"} and all(float(v) > 0 for r in rows.values() for v in r)
    code, err = in_process("bench_train_step", "--threads", "0")
    assert code == 2 and "--threads" in err


def test_bench_gpu_runs_on_the_cpu_and_writes_its_rows(tmp_path, in_process):
    """The GPU benchmark's function and module rows on whatever device is here (its sync check needs CUDA)."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--device", "cpu", "--quick", "--modes", "eager",
           "--parts", "function,module,sync", "--out", str(out)]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert len(rows["function"]) == 9 and len(rows["module"]) == 6 and rows["sync"] == []
    assert all(r["ratio"] > 0 for r in rows["function"] + rows["module"])
    code, err = in_process("bench_gpu", "--parts", "everything")
    assert code == 2 and "--parts" in err and "Traceback" not in err


def test_compare_peers_says_how_to_install_lucidrains(tmp_path):
    if importlib.util.find_spec("denoising_diffusion_pytorch") is not None:
        pytest.skip("lucidrains' package is installed here")
    cmd = [sys.executable, str(ROOT / "scripts" / "compare_ddpm_peers.py"), "--contenders", "lucidrains"]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pip install --no-deps denoising-diffusion-pytorch" in result.stderr


def test_levers_smoke(tmp_path):
    cmd = [sys.executable, str(ROOT / "scripts" / "levers.py"), "--config", "smoke", "--steps", "3",
           "--levers", "base", "flow", "--out", str(tmp_path / "levers"),
           "--set", "model.channels=[16,32]", "sample.steps=5"]  # fmt: skip
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "levers" / "levers.md").read_text()
    assert "| base | - | 0 |" in table and "| flow | diffusion.prediction=flow" in table
    again = subprocess.run(
        [*cmd, "eval.samplings=1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and again.stdout.count("seed 0:") == 2  # other settings: both variants trained anew
    metrics = json.loads((tmp_path / "levers" / "base" / "seed0" / "metrics.json").read_text())
    assert metrics["config"]["eval"]["samplings"] == 1
    checkpoint = tmp_path / "levers" / "base" / "seed0" / "checkpoint.safetensors"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])  # a run whose checkpoint cannot be read: trained again
    third = subprocess.run(
        [*cmd, "eval.samplings=1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert third.returncode == 0 and third.stdout.count("seed 0:") == 1, third.stderr[-2000:]


def test_ema_lengths_smoke(tmp_path, in_process):
    cmd = [sys.executable, str(ROOT / "scripts" / "ema_lengths.py"), "--config", "smoke", "--gammas", "0", "8",
           "--set", "train.steps=4", "sample.num_samples=8", "sample.batch_size=8",
           "--out", str(tmp_path / "ema")]  # fmt: skip
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "ema" / "ema_lengths.json").read_text())["rows"]
    assert list(rows)[1:] == ["raw weights", "power EMA, gamma 0", "power EMA, gamma 8"]
    assert all(r["fd"] > 0 and 0 < r["confidence"] <= 1 for r in rows.values())
    code, err = in_process("ema_lengths", "--gammas", "-1")
    assert code == 2 and "--gammas" in err and "Traceback" not in err
    code, err = in_process("ema_lengths", "--set", "eval.enabled=false")
    assert code == 2 and "eval.enabled" in err and "Traceback" not in err


def test_memorisation_trains_on_the_subset_it_names_and_scores_copies(tmp_path, in_process):
    out = tmp_path / "m #1: x"  # a folder name YAML would misread as an override value
    cmd = [sys.executable, str(ROOT / "scripts" / "memorisation.py"), "--config", "smoke", "--per-class", "2",
           "--steps", "2", "--seeds", "0", "--rows", "model.dropout=0", "model.dropout=0.3,model.channels=[8,16]",
           "--out", str(out)]  # fmt: skip
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("trained in") == 2
    # the IDX folder: the first two training digits of each class, in the split's order; the held-out 1000
    subset, train_y = load_mnist(out / "data_2", "train")
    builtin_x, builtin_y = load_mnist("builtin", "train")
    first = torch.cat([torch.nonzero(builtin_y == c).flatten()[:2] for c in range(10)]).sort().values
    assert torch.equal(subset, builtin_x[first]) and torch.equal(train_y, builtin_y[first])
    held = load_mnist("builtin", "heldout")[0]
    assert torch.equal(load_mnist(out / "data_2", "heldout")[0], held)
    report = json.loads((out / "memorisation.json").read_text())
    assert [r["row"] for r in report["rows"]] == ["model.dropout=0", "model.dropout=0.3,model.channels=[8,16]"]
    assert report["real_num"] == 20 and report["real_fd"] > 0  # the smoke config's 20 samples, 20 digits
    threshold = float(torch.quantile(nearest_distances(held, subset), 0.01))  # against the subset, not all 4000
    for row, channels in zip(report["rows"], ([16, 32], [8, 16]), strict=True):
        (seed,) = row["seeds"]
        assert 0 <= seed["copies"] <= 1 and seed["copy_distance"] == pytest.approx(threshold, rel=1e-9)
        assert 0 <= seed["copies_any_shift"] <= 1
        cfg = run_config(row["run"])
        assert cfg.data.source == str(out / "data_2") and list(cfg.model.channels) == channels
        assert (Path(row["run"]) / "nearest.png").stat().st_size > 1000
    assert "| `model.dropout=0.3,model.channels=[8,16]` |" in (out / "memorisation.md").read_text()
    again = subprocess.run([*cmd[:-4], "model.dropout=0", "--out", str(out), "--set", "sample.steps=3"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0 and "trained in" in again.stderr  # another config: trained again
    again = subprocess.run([*cmd[:-4], "model.dropout=0", "--out", str(out), "--set", "sample.steps=3"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert again.returncode == 0 and "trained in" not in again.stderr  # the same config: the finished run reused
    for argv, named in [(["--per-class", "401"], "--per-class 401"), (["--rows", "model.dropout=2"], "model.dropout"),
                        (["--seeds", "-1"], "--seeds -1"), (["--set", "train.steps=3"], "sets data.source"),
                        (["--out", str(out / "memorisation.json")], "is a file")]:  # fmt: skip
        code, err = in_process("memorisation", "--out", str(tmp_path / "refused"), *argv)
        assert code == 2 and named in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "refused").exists()  # refused before writing anything


def test_memorisation_names_each_row_its_own_folder(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("memorisation_script", ROOT / "scripts" / "memorisation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    long = "train.lr=0.001,train.warmup_steps=5,train.weight_decay=0.0001,train.grad_clip=1.0,model.dropout=0.{}"
    names = {script.slug(long.format(k)) for k in range(5)} | {script.slug("model.dropout=0.3")}
    assert len(names) == 6 and all(len(n) <= 80 for n in names)
    assert script.split_row("model.channels=[64,128], model.dropout=0.3") == ["model.channels=[64,128]",
                                                                             " model.dropout=0.3"]  # fmt: skip
    # the copy check's moved training digits: every image random_shifts can make, and nothing else
    x = torch.randn(3, 1, 7, 7)
    moved = script.every_shift(x)
    assert moved.shape == (3 * (2 * SHIFT_PIXELS + 1) ** 2, 1, 7, 7)
    drawn = torch.cat([random_shifts(x, 1.0, torch.Generator().manual_seed(seed))[0] for seed in range(40)])
    assert (drawn[:, None] - moved[None]).abs().flatten(2).amax(2).min(1).values.max() == 0  # each found exactly


def test_sampler_table_smoke(tmp_path, in_process):
    env = {**os.environ, "TIMESTEP_EMBED_CACHE": str(tmp_path / "cache")}
    train = [sys.executable, "-m", "timestep_embed", "train", "--config", "smoke", "--out-dir", str(tmp_path / "run"),
             "train.steps=2", "sample.num_samples=8", "sample.batch_size=8"]  # fmt: skip
    assert subprocess.run(train, cwd=tmp_path, env=env, capture_output=True, timeout=300).returncode == 0
    rows = ["sample.steps=3", "sample.sampler=heun,sample.steps=2,sample.spacing=karras"]
    cmd = [sys.executable, str(ROOT / "scripts" / "sampler_table.py"), str(tmp_path / "run"), "--seeds", "0", "1",
           "--rows", *rows, "--plot", str(tmp_path / "rows.png")]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    table = json.loads((tmp_path / "run" / "sampler_table.json").read_text())["rows"]
    assert [r["row"] for r in table] == rows and [r["calls"] for r in table] == [3, 3]
    assert all(len(r["seeds"]) == 2 and r["seeds"][0]["fd"] > 0 for r in table)
    assert f"| `{rows[1]}` | 3 |" in result.stdout
    assert (tmp_path / "rows.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, err = in_process("sampler_table", cmd[2], "--rows", "sample.sampler=nope")
    assert code == 2 and "--rows" in err and "Traceback" not in err
    code, err = in_process("sampler_table", str(tmp_path / "nothing"))
    assert code == 2 and "no checkpoint.safetensors" in err


def test_gpu_checks_refuse_what_they_can_not_measure(tmp_path):
    """scripts/gpu_checks.sh: a usage line without OUT, a named error for an unknown part, and without CUDA a
    one-line refusal before it writes anything."""
    script = str(ROOT / "scripts" / "gpu_checks.sh")
    usage = subprocess.run(["bash", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: bash scripts/gpu_checks.sh OUT")
    part = subprocess.run(["bash", script, str(tmp_path / "o"), "bench", "nope"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert part.returncode == 2 and "part nope" in part.stderr and not (tmp_path / "o").exists()
    if not torch.cuda.is_available():
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        none = subprocess.run(["bash", script, str(tmp_path / "o")], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert none.returncode == 2 and "no CUDA device" in none.stderr and not (tmp_path / "o").exists()


def test_gpu_checks_train_falls_back_to_cudagraphs_only_when_the_step_cannot_be_captured(tmp_path):
    """The train part's logic, with a stand-in python that passes the import and CUDA checks and 'trains': a
    step-graph run that says its step could not be captured is followed by a cudagraphs run; another failure
    (a timeout, a failed score) is not; each run's exit is a summary line, the exit status counts the failures."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text('#!/bin/bash\n[ "$1" = -c ] && exit 0\necho "ARGS: $*"\n'
                    '[[ "$*" == *compile=step-graph* ]] && { echo "$FAIL_WITH"; exit 1; }\nexit 0\n')  # fmt: skip
    fake.chmod(0o755)
    script = str(ROOT / "scripts" / "gpu_checks.sh")
    for fail_with, runs in (("the step could not be captured", 2), ("FD above the line", 1)):
        out, work = tmp_path / f"out{runs}", tmp_path / f"work{runs}"
        env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "WORK": str(work),
               "FAIL_WITH": fail_with}  # fmt: skip
        done = subprocess.run(["bash", script, str(out), "train"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        summary = (out / "summary.txt").read_text()
        assert summary.count("mnist-gpu-step-graph: exit 1") == 1 and fail_with in summary
        assert ("mnist-gpu-cudagraphs: exit 0" in summary) == (runs == 2) and done.returncode == 2 - runs
        log = (work / "mnist-gpu-step-graph.log").read_text()
        assert f"--out-dir {work}/mnist-gpu-step-graph --overwrite --quiet train.compile=step-graph" in log


@pytest.mark.parametrize(
    ("script", "argv", "named"),
    [
        ("bench_modules", ["--sizes", "32x128"], "--sizes 32x128"),
        ("bench_modules", ["--batches", "0"], "--batches 0"),
        ("bench_precise", ["--sizes", "1024"], "--sizes 1024"),
        ("bench_per_token", ["--tokens", "100", "--frames", "16"], "--tokens 100 is not a multiple of --frames 16"),
        ("bench_per_token", ["--batch", "0"], "--batch 0"),
    ],
)
def test_benchmark_scripts_refuse_bad_sizes_in_one_line(in_process, script, argv, named):
    """Sizes the benchmarks cannot run are one line naming the option, exit code 2 (tracebacks, or a [2, 96] tensor
    labelled [2, 100], before)."""
    code, err = in_process(script, *argv)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1


def test_bench_embedding_writes_the_files_it_names(tmp_path, in_process):
    """--out with a dot in its name: OUT.md and OUT.json, the names it prints (the dot's suffix was replaced)."""
    code, _ = in_process("bench_embedding", "--quick", "--budget", "0.001", "--out", str(tmp_path / "emb.v2"))
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["emb.v2.json", "emb.v2.md"]
