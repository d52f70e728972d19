"""The parity report against diffusers (``timestep-embed compare``): its rows and its argument checks."""

import pytest

from timestep_embed.cli import main
from timestep_embed.interop.compare import run_comparison, summary, to_markdown


def test_a_small_report_is_bit_identical_and_flags_rounded_inputs():
    rows = run_comparison(["adm", "vaswani", "ddpm"], [7, 32], n=16, progress=False)
    assert len(rows) == 3 * 2 * 12 and all(r["diff_vs_diffusers"] == 0 for r in rows)
    warned = {(r["kind"], r["input_dtype"]) for r in rows if r["warned"]}
    assert ("fractional", "bfloat16") in warned and ("integer", "float32") not in warned
    assert "speed" not in rows[0] and "ours / diffusers" not in to_markdown(rows)
    assert summary(rows).startswith(f"{len(rows)}/{len(rows)} rows bit-identical")


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"n": 0}, "n must be an int >= 1, got 0"),
        ({"n": 2**21}, "n must be an int in 1 .. 1048576"),
        ({"n": 2.5}, "n must be an int >= 1"),
        ({"presets": "adm"}, "presets must be a non-empty list"),
        ({"presets": []}, "presets must be a non-empty list"),
        ({"presets": ["bogus"]}, r"presets must be preset names .*\['bogus'\]"),
        ({"dims": [0]}, "dim must be an int >= 1, got 0"),
        ({"dims": [2], "presets": ["ddpm"]}, "dim=2 with freq_shift=1"),
        ({"dims": 128}, "dims must be a non-empty list"),
        ({"progress": "no"}, "progress must be True or False"),
    ],
)
def test_bad_arguments_are_refused_before_any_row(arguments, message):
    with pytest.raises((TypeError, ValueError), match=message):
        run_comparison(**arguments)


def test_the_cli_answers_a_bad_n_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse's own check of the count
        main(["compare", "-n", "0", "--out", str(tmp_path / "c")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "argument -n: expected an int >= 1, got '0'" in err and "Traceback" not in err
    assert not (tmp_path / "c").exists()
