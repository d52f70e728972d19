"""Config loader: nested dataclasses, YAML/TOML/dict, strict keys and types, overrides, saving."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import pytest

from timestep_embed.ddpm.config import DataConfig, DiffusionConfig, RunConfig, SampleConfig, load_run_config
from timestep_embed.ddpm.configfile import (
    ConfigError,
    apply_overrides,
    config_to_dict,
    from_dict,
    load_config,
    save_config,
)


@dataclasses.dataclass
class Model:
    channels: tuple[int, ...] = (32, 64)
    attention: list[int] = dataclasses.field(default_factory=lambda: [7])
    norm: Literal["group", "layer"] = "group"
    dropout: float = 0.0


@dataclasses.dataclass
class Train:
    steps: int = 10
    lr: float = 2e-4
    bf16: bool = False
    minutes: float | None = None
    out_dir: Path = Path("runs/x")
    extra: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Run:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: Model = dataclasses.field(default_factory=Model)
    diffusion: DiffusionConfig = dataclasses.field(default_factory=DiffusionConfig)
    train: Train = dataclasses.field(default_factory=Train)
    sample: SampleConfig = dataclasses.field(default_factory=SampleConfig)


YAML = """
data: {source: builtin, pad_to_32: true}
model:
  channels: [64, 128]
  norm: layer
diffusion: {schedule: cosine, min_snr_gamma: 5}
train:
  steps: 200
  lr: 1e-3
"""


def test_yaml_and_toml_load_onto_nested_dataclasses(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    cfg = load_config(tmp_path / "c.yaml", Run)
    assert cfg.data.pad_to_32 is True and cfg.model.channels == (64, 128) and cfg.model.norm == "layer"
    assert cfg.diffusion.min_snr_gamma == 5.0 and isinstance(cfg.diffusion.min_snr_gamma, float)
    assert cfg.train.lr == 1e-3 and cfg.train.steps == 200 and cfg.sample == SampleConfig()
    (tmp_path / "c.toml").write_text('[train]\nsteps = 7\nout_dir = "o"\n[model]\nchannels = [8]\n')
    cfg = load_config(tmp_path / "c.toml", Run)
    assert cfg.train.steps == 7 and cfg.train.out_dir == Path("o") and cfg.model.channels == (8,)
    assert load_config(None, Run) == Run()


def test_overrides_parse_yaml_scalars():
    cfg = load_config(
        {"train": {"steps": 5}},
        Run,
        [
            "train.steps=30",
            "train.lr=3e-4",
            "train.bf16=true",
            "train.minutes=null",
            "model.channels=[16, 32]",
            "sample.sampler=ddim",
            "train.extra.a=1",
            "data.source=/data/mnist",
        ],
    )
    assert cfg.train.steps == 30 and cfg.train.lr == 3e-4 and cfg.train.bf16 is True and cfg.train.minutes is None
    assert cfg.model.channels == (16, 32) and cfg.sample.sampler == "ddim" and cfg.train.extra == {"a": 1}
    assert cfg.data.source == "/data/mnist"


def test_yaml_reads_exponent_floats_without_a_dot():
    cfg = load_config({}, Run, ["train.lr=1e-3", "diffusion.beta_start=2E-4", "train.steps=1_000"])
    assert cfg.train.lr == 1e-3 and cfg.diffusion.beta_start == 2e-4 and cfg.train.steps == 1000
    assert load_config({}, Run, ["data.source=1e3x"]).data.source == "1e3x"


def test_override_does_not_mutate_the_input_dict():
    source = {"train": {"steps": 5}}
    load_config(source, Run, ["train.steps=6"])
    assert source == {"train": {"steps": 5}}


@pytest.mark.parametrize(
    "data, overrides, message",
    [
        ({"train": {"stepz": 3}}, [], "unknown key 'train.stepz'"),
        ({"trian": {}}, [], "unknown key 'trian'"),
        ({}, ["model.chanels=[1]"], "unknown key 'model.chanels'"),
        ({"train": {"steps": "ten"}}, [], r"train.steps = 'ten' \(str\): expected int"),
        ({"train": {"steps": 2.5}}, [], "train.steps = 2.5"),
        ({"train": {"steps": True}}, [], "train.steps = True"),
        ({"train": {"bf16": 1}}, [], "train.bf16 = 1"),
        ({"train": {"lr": "fast"}}, [], "train.lr = 'fast'"),
        ({"model": {"norm": "batch"}}, [], r"model.norm = 'batch'.*'group', 'layer'"),
        ({"model": {"channels": [32, "x"]}}, [], r"model.channels\[1\] = 'x'"),
        ({"model": {"channels": 32}}, [], "model.channels = 32"),
        ({"train": 5}, [], "train = 5"),
        ({"diffusion": {"min_snr_gamma": "high"}}, [], "diffusion.min_snr_gamma = 'high'"),
        ({}, ["train.steps"], "key.sub=value"),
        ({}, ["train.steps.x=1"], r"train.steps = \{'x': 1\} \(dict\): expected int"),
        ({"train": {"steps": 3}}, ["train.steps.deep=1"], "train.steps is a value"),
    ],
)
def test_errors_name_key_value_and_type(data, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(data, Run, overrides)


def test_required_fields_and_file_errors(tmp_path):
    @dataclasses.dataclass
    class Needs:
        name: str

    with pytest.raises(ConfigError, match="missing required key 'name'"):
        from_dict(Needs, {})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", Run)
    (tmp_path / "bad.yaml").write_text("train: [unclosed")
    with pytest.raises(ConfigError, match="bad.yaml: cannot parse"):
        load_config(tmp_path / "bad.yaml", Run)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml", Run)
    (tmp_path / "c.ini").write_text("")
    with pytest.raises(ConfigError, match="unknown config format"):
        load_config(tmp_path / "c.ini", Run)
    with pytest.raises(ConfigError, match="list of 'key=value'"):
        apply_overrides({}, "train.steps=1")


def test_config_to_dict_roundtrips_through_json_and_yaml(tmp_path):
    cfg = load_config({"model": {"channels": [3, 4]}, "train": {"out_dir": "x/y"}}, Run)
    data = config_to_dict(cfg)
    assert data["model"]["channels"] == [3, 4] and data["train"]["out_dir"] == "x/y"
    assert load_config(json.loads(json.dumps(data)), Run) == cfg
    for name in ("resolved.yaml", "resolved.json"):
        save_config(cfg, tmp_path / name)
        assert load_config(tmp_path / name, Run) == cfg
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_key_written_twice_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps: 20\ntrain:\n  seed: 3\n")
    with pytest.raises(ConfigError, match=r"the key 'train' appears twice.*line 3"):
        load_config(path, Run)
    path.write_text("train: {steps: 1, steps: 2}\n")
    with pytest.raises(ConfigError, match="'steps' appears twice"):
        load_config(path, Run)


def test_error_text_is_bounded_even_for_a_yaml_alias_bomb(tmp_path):
    levels = ["    a: &a [x, x, x, x, x, x, x, x, x]"]
    for p, c in zip("abcdefg", "bcdefgh", strict=True):
        levels.append(f"    {c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]")  # 9**8 = 43M leaves
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  time_embedding:\n" + "\n".join(levels) + "\ndata:\n  source: *h\n")
    with pytest.raises(ConfigError, match=r"data.source = \[\[\[") as info:
        load_run_config(path)
    assert len(str(info.value)) < 500


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.steps=0", "train.steps"),
        ("train.steps=-5", "train.steps"),
        ("train.batch_size=0", "train.batch_size"),
        ("train.log_every=0", "train.log_every"),
        ("train.lr=-1", "train.lr"),
        ("train.minutes=.nan", "train.minutes"),
        ("train.ema_decay=1.0", "train.ema_decay"),
        ("train.adam_beta2=1", "train.adam_beta2"),
        ("sample.num_samples=0", "sample.num_samples"),
        ("sample.batch_size=0", "sample.batch_size"),
        ("sample.steps=5000", "sample.steps"),
        ("sample.noise_scale=0", "sample.noise_scale"),
        ("sample.noise_scale=-0.5", "sample.noise_scale"),
        ("diffusion.beta_end=2", "diffusion.beta_end"),
        ("eval.classifier.width=0", "eval.classifier.width"),
    ],
)
def test_ranges_are_checked_before_anything_runs(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_run_config(None, [override])


def test_one_budget_override_clears_the_other():
    assert load_run_config(None, ["train.steps=10"]).train.minutes is None
    assert load_run_config({"train": {"steps": 5, "minutes": None}}, ["train.minutes=2"]).train.steps is None
    with pytest.raises(ConfigError, match="set exactly one budget"):
        load_run_config(None, ["train.steps=10", "train.minutes=2"])
    assert load_run_config(None) == RunConfig()


def test_rectified_flow_needs_its_sampler_and_no_min_snr():
    flow = ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"]
    assert load_run_config(None, flow).diffusion.prediction == "flow"
    with pytest.raises(ConfigError, match=r"rectified flow \(prediction flow\) samples with sample.sampler=euler"):
        load_run_config(None, flow[:2])
    with pytest.raises(ConfigError, match="'heun' with diffusion.schedule = 'cosine'"):
        load_run_config(None, ["sample.sampler=heun"])  # the main job's cosine schedule
    assert load_run_config(None, ["sample.sampler=heun", "diffusion.schedule=linear"]).sample.sampler == "heun"
    karras = load_run_config(None, ["sample.sampler=heun", "sample.spacing=karras"])  # capped at sigma_max
    assert (karras.sample.spacing, karras.sample.sigma_max) == ("karras", 80.0)
    with pytest.raises(ConfigError, match=r"sample.spacing = 'karras': .* dpm\+\+2m or heun, not 'ddpm'"):
        load_run_config(None, ["sample.spacing=karras"])
    with pytest.raises(ConfigError, match=r"sample.sigma_max = -1.0: expected > 0"):
        load_run_config(None, ["sample.sampler=heun", "sample.spacing=karras", "sample.sigma_max=-1"])
    with pytest.raises(ConfigError, match="euler samples only flow models"):
        load_run_config(None, ["sample.sampler=euler"])
    with pytest.raises(ConfigError, match="set diffusion.min_snr_gamma=null"):
        load_run_config(None, [flow[0], flow[2]])
