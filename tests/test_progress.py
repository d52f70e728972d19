"""Progress in a log file: plain lines, at most one every ``every`` seconds, the final state once."""

from timestep_embed.progress import LogProgress


def test_a_log_gets_each_line_once_and_the_final_state(capsys):
    bar = LogProgress(total=4, desc="train", unit="s", every=0)
    for _ in range(4):
        bar.update(1)
    bar.close()  # right after the line for 4/4: not printed again
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == [f"train: {n}/4 s ({25 * n}%)" for n in (1, 2, 3, 4)]
    quiet = LogProgress(total=4, desc="train", every=3600)
    quiet.update(3)
    quiet.close()  # no line in the hour: the final state at close
    assert capsys.readouterr().err.splitlines()[0].startswith("train: 3/4 it (75%)")
    LogProgress(total=4, enabled=False).close()
    assert capsys.readouterr().err == ""
