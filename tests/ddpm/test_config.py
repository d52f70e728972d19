"""The config: strict loading (nested dataclasses from YAML and dicts, keys and types), overrides, each
section's own checks, saving; the shipped configs."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Literal

import pytest

from timestep_embed.ddpm import config as config_module
from timestep_embed.ddpm.config import (
    ConsistencyConfig,
    DataConfig,
    DiffusionConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
)
from timestep_embed.ddpm.schema import ConfigError, apply_overrides, from_dict, read_yaml, save_yaml


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
    out_dir: str = "runs/x"
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


def load_config(source, cls=None, overrides=()):
    """What RunConfig.load does, onto any dataclass: a YAML path or a dict (None: {}), then overrides."""
    data = dict(source or {}) if source is None or isinstance(source, dict) else read_yaml(source)
    data = json.loads(json.dumps(data))  # a deep copy: the caller's dict stays as it was
    apply_overrides(data, overrides)
    return from_dict(cls or Run, data)


def test_yaml_loads_onto_nested_dataclasses(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    cfg = load_config(tmp_path / "c.yaml", Run)
    assert cfg.data.pad_to_32 is True and cfg.model.channels == (64, 128) and cfg.model.norm == "layer"
    assert cfg.diffusion.min_snr_gamma == 5.0 and isinstance(cfg.diffusion.min_snr_gamma, float)
    assert cfg.train.lr == 1e-3 and cfg.train.steps == 200 and cfg.sample == SampleConfig()
    assert load_config(None, Run) == Run()
    for name in ("c.toml", "c.json"):  # YAML only
        (tmp_path / name).write_text("")
        with pytest.raises(ConfigError, match=r"a config is a \.yaml or \.yml file"):
            RunConfig.load(tmp_path / name)


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
    with pytest.raises(ConfigError, match="a config is a .yaml or .yml file"):
        load_config(tmp_path / "c.ini", Run)
    with pytest.raises(ConfigError, match="list of 'key=value'"):
        apply_overrides({}, "train.steps=1")
    (tmp_path / "huge.yaml").write_text("# " + "x" * (1 << 20))
    with pytest.raises(ConfigError, match="a config file holds at most"):
        load_config(tmp_path / "huge.yaml", Run)


def test_config_roundtrips_through_dict_json_and_yaml(tmp_path):
    cfg = RunConfig.load(None, ["model.channels=[16, 32]", "train.out_dir=x/y"])
    data = cfg.to_dict()
    assert data["model"]["channels"] == [16, 32] and data["train"]["out_dir"] == "x/y"
    assert RunConfig.load(json.loads(json.dumps(data))) == cfg
    cfg.save(tmp_path / "resolved.yaml")
    assert RunConfig.load(tmp_path / "resolved.yaml") == cfg
    save_yaml(load_config({"train": {"steps": 3}}), tmp_path / "plain.yaml")
    assert load_config(tmp_path / "plain.yaml").train.steps == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_key_written_twice_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps: 20\ntrain:\n  seed: 3\n")
    with pytest.raises(ConfigError, match=r"the key 'train' appears twice.*line 3"):
        load_config(path, Run)
    path.write_text("train: {steps: 1, steps: 2}\n")
    with pytest.raises(ConfigError, match="'steps' appears twice"):
        load_config(path, Run)
    path.write_text("train:\n  ? [a, b]\n  : 1\n")  # a list as a key (unhashable: was a bare TypeError)
    with pytest.raises(ConfigError, match="the key on line 2 is a list, not a name"):
        load_config(path, Run)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    levels = ["    a: &a [x, x, x, x, x, x, x, x, x]"]
    for p, c in zip("abcdefg", "bcdefgh", strict=True):
        levels.append(f"    {c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]")  # 9**8 = 43M leaves
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  time_embedding:\n" + "\n".join(levels) + "\ndata:\n  source: *h\n")
    assert path.stat().st_size < 1000
    with pytest.raises(ConfigError, match=r"bomb.yaml: line 4: YAML aliases \(\*name\) are not accepted") as info:
        RunConfig.load(path)
    assert len(str(info.value)) < 500
    with pytest.raises(ConfigError, match="YAML aliases"):
        RunConfig.load(None, ["data.source=*a"])  # an alias in an override too


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
        ("train.threads=0", "train.threads"),
        ("model.channels=[32,0]", r"model.channels\[1\]"),
        ("model.dropout=1.0", "model.dropout"),
        ("model.augment=1.5", "model.augment"),
        ("train.out_dir=''", "train.out_dir"),
    ],
)
def test_ranges_are_checked_before_anything_runs(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        RunConfig.load(None, [override])


@pytest.mark.parametrize(
    "build, key",
    [
        (lambda: TrainConfig(lr=-1.0), "train.lr"),
        (lambda: TrainConfig(steps=5), "set exactly one budget"),
        (lambda: SampleConfig(sampler="bogus"), "sample.sampler = 'bogus'"),
        (lambda: DiffusionConfig(schedule="quadratic"), "diffusion.schedule"),
        (lambda: RunConfig().replace("sample", steps=0), "sample.steps"),
        (lambda: RunConfig().replace("train", device="tpu"), "train.device"),
        (lambda: RunConfig().replace("model", injection="film"), "model.injection"),
        (lambda: dataclasses.replace(RunConfig(), sample=SampleConfig(sampler="euler")), "euler"),
    ],
)
def test_every_way_of_building_a_config_is_checked(build, key):
    """The check lives in the dataclasses, so Python, replace() and overrides all go through it."""
    with pytest.raises(ConfigError, match=key):
        build()


def test_repeated_override_keys_are_refused():
    with pytest.raises(ConfigError, match="override train.steps is given twice"):
        RunConfig.load(None, ["train.steps=5", "train.steps=6"])


def test_one_budget_override_clears_the_other():
    assert RunConfig.load(None, ["train.steps=10"]).train.minutes is None
    assert RunConfig.load({"train": {"steps": 5, "minutes": None}}, ["train.minutes=2"]).train.steps is None
    with pytest.raises(ConfigError, match="set exactly one budget"):
        RunConfig.load(None, ["train.steps=10", "train.minutes=2"])
    assert RunConfig.load(None) == RunConfig() == RunConfig.load("mnist")


def test_enums_are_written_once_as_literals():
    """Every tuple of accepted names the code checks against is the field's Literal, not a copy."""
    from timestep_embed.ddpm import diffusion, runtime, unet

    literals = {
        ("sample", "sampler"): diffusion.SAMPLERS,
        ("diffusion", "prediction"): diffusion.PREDICTIONS,
        ("diffusion", "schedule"): diffusion.SCHEDULES,
        ("train", "device"): runtime.DEVICES,
        ("model", "injection"): unet.INJECTIONS,
    }
    hints = {
        name: typing.get_type_hints(type(getattr(RunConfig(), name)))
        for name in ("sample", "diffusion", "train", "model")
    }
    for (section, field), names in literals.items():
        assert typing.get_args(hints[section][field]) == names
    assert set(typing.get_args(hints["sample"]["spacing"])) == {*diffusion.SPACINGS, "karras"}


def test_the_default_config_file_sets_nothing():
    """configs/mnist.yaml is the defaults, written once in the dataclasses; it holds only comments."""
    assert read_yaml(config_module.shipped_configs()["mnist"]) == {}


def test_describe_keys_shows_readable_types():
    text = config_module.describe_keys()
    assert "train.threads = null  (int or null)" in text
    assert "sample.sampler = ddpm  (one of 'ddpm', 'ddim', 'dpm++2m', 'heun', 'euler', 'consistency')" in text
    assert "Literal" not in text and "Union" not in text
    assert "consistency = null  (ConsistencyConfig or null)" in text  # a diffusion run has no consistency section
    section = config_module.describe_keys(ConsistencyConfig, "consistency.")  # distill --help lists these
    assert section.splitlines()[0] == "  consistency.method = ect  (one of 'ect', 'cd')"
    assert "consistency.stages = 2  (int)" in section


def test_rectified_flow_needs_its_sampler_and_no_min_snr():
    flow = ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null", "sample.sampler=euler"]
    assert RunConfig.load(None, flow).diffusion.prediction == "flow"
    with pytest.raises(ConfigError, match=r"rectified flow \(prediction flow\) samples with sample.sampler=euler"):
        RunConfig.load(None, flow[:2])
    with pytest.raises(ConfigError, match="'heun' with diffusion.schedule = 'cosine'"):
        RunConfig.load(None, ["sample.sampler=heun"])  # the default run's cosine schedule
    assert RunConfig.load(None, ["sample.sampler=heun", "diffusion.schedule=linear"]).sample.sampler == "heun"
    karras = RunConfig.load(None, ["sample.sampler=heun", "sample.spacing=karras"])  # capped at sigma_max
    assert (karras.sample.spacing, karras.sample.sigma_max) == ("karras", 80.0)
    with pytest.raises(ConfigError, match=r"sample.spacing = 'karras': .* dpm\+\+2m or heun, not 'ddpm'"):
        RunConfig.load(None, ["sample.spacing=karras"])
    with pytest.raises(ConfigError, match=r"sample.sigma_max = -1.0: expected > 0"):
        RunConfig.load(None, ["sample.sampler=heun", "sample.spacing=karras", "sample.sigma_max=-1"])
    with pytest.raises(ConfigError, match="euler samples only flow models"):
        RunConfig.load(None, ["sample.sampler=euler"])
    with pytest.raises(ConfigError, match="set diffusion.min_snr_gamma=null"):
        RunConfig.load(None, [flow[0], flow[2]])


def test_the_flow_errors_quote_the_overrides_that_train_a_flow_model():
    for partial in (["diffusion.prediction=flow"], ["diffusion.prediction=flow", "diffusion.min_snr_gamma=null"]):
        with pytest.raises(ConfigError, match=config_module.FLOW_OVERRIDES):
            load_config(None, RunConfig, partial)
    assert load_config(None, RunConfig, config_module.FLOW_OVERRIDES.split()).sample.sampler == "euler"
