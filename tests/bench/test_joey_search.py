"""bench/joey_search.py on stand-in runs: its plan, what it skips, what it chooses and why."""

from __future__ import annotations

import json
import sys

import pytest

from bench import joey_search


def fake_result(bleus: list[float], status: str = "ok") -> dict:
    curve = [{"seconds": 120.0 * (i + 1), "steps": 100 * (i + 1), "bleu": b} for i, b in enumerate(bleus)]
    train = {"steps": 100 * len(bleus), "target_tokens_per_s": 1800.0, "curve": curve}
    return {
        "status": status,
        "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx", "avx2", "fma", "avx512f"]},
        "systems": {"joey_best": {"train": {"figures": train}}},
        # the test figures are there, and must not sway the choice
        "figures": {"BLEU beam 5, after the budget": {"joey_best": 99.0 if bleus[-1] < 40 else 1.0}},
    }


def put(folder, name, record):
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / f"2026-11-26_120000_cpu_{joey_search.CONFIG}.json").write_text(json.dumps(record))


def test_the_plan_names_every_point_with_its_bench_command(capsys, tmp_path):
    put(tmp_path, "peer", fake_result([30.0, 45.0]))
    assert joey_search.main(["--plan", "--results-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["peer (done)", *list(joey_search.POINTS)[1:]]
    lr = next(line for line in lines if line.startswith("peer_lr2e-3"))
    assert "-m bench headline --only joey_best --joey-best peer --joey-set lr=0.002 --configs feed" in lr
    assert "--budget-minutes 30 " in lr and str(tmp_path / "peer_lr2e-3") in lr
    assert not (tmp_path / "summary.json").exists()  # the plan writes nothing


def test_the_choice_is_the_best_validation_bleu_at_the_end_never_a_test_figure(tmp_path):
    put(tmp_path, "peer", fake_result([40.0, 52.0, 50.0]))  # best 52 mid-way, 50 at the end
    put(tmp_path, "iwslt", fake_result([30.0, 51.0]))  # 51 at the end: chosen
    put(tmp_path, "peer_constant", fake_result([55.0], status="failed"))  # not finished: left out
    summary = joey_search.table(tmp_path)
    assert [r["point"] for r in summary["rows"]] == ["peer", "iwslt"]
    assert summary["chosen"] == "iwslt" and summary["headline_flags"] == "--joey-best iwslt"
    peer = summary["rows"][0]
    assert (peer["valid_bleu_end"], peer["valid_bleu_best"], peer["minute_of_best"]) == (50.0, 52.0, 4.0)
    assert peer["recipe"] == {
        "lr": 1e-3, "batch_sentences": 80, "schedule": "plateau", "decrease_factor": 0.1, "patience": 10,
        "normalization": "tokens", "hidden_dropout": 0.3,
    }  # fmt: skip
    text = joey_search.markdown(summary)
    iwslt = "| iwslt (chosen) | 0.0002 | 80 | plateau x0.7 after 8 | tokens, 0.3 | 200 | 1,800 | 51.00 |"
    assert iwslt + " 51.00 (4) |" in text
    assert "AMD EPYC, avx2, avx512f |" in text and "takes `--joey-best iwslt`" in text
    put(tmp_path, "peer_joey_defaults", fake_result([53.0]))  # Joey's own loss and dropout: chosen
    summary = joey_search.table(tmp_path)
    assert summary["headline_flags"] == (
        "--joey-best peer --joey-set normalization=batch --joey-set hidden_dropout=0"
    )
    assert "| peer_joey_defaults (chosen) | 0.001 | 80 | plateau x0.1 after 10 | batch, 0 |" in (
        joey_search.markdown(summary)
    )


def test_done_points_are_not_run_again_and_a_failed_one_is_named(monkeypatch, tmp_path, capsys):
    put(tmp_path, "peer", fake_result([50.0]))
    ran = []

    def stand_in(name, budget, results, extra):
        ran.append((name, budget, extra))
        if name == "peer_lr2e-3":  # succeeds: writes its result
            record = json.dumps(fake_result([53.0]))
            folder = results / name
            path = folder / f"x_cpu_{joey_search.CONFIG}.json"
            code = f"import pathlib; pathlib.Path({str(folder)!r}).mkdir(parents=True); "
            code += f"pathlib.Path({str(path)!r}).write_text({record!r})"
            return [sys.executable, "-c", code]
        return [sys.executable, "-c", "raise SystemExit(3)"]

    monkeypatch.setattr(joey_search, "command", stand_in)
    args = [
        "--points",
        "peer,peer_lr2e-3,iwslt",
        "--budget-minutes",
        "5",
        "--quick",
        "--results-dir",
        str(tmp_path),
    ]
    assert joey_search.main(args) == 1
    assert ran == [("peer_lr2e-3", 5.0, ["--quick"]), ("iwslt", 5.0, ["--quick"])]
    out, err = capsys.readouterr()
    assert "| peer_lr2e-3 (chosen) | 0.002 |" in out and "no result from iwslt" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["chosen"] == "peer_lr2e-3" and (tmp_path / "summary.md").read_text() == out
    assert summary["headline_flags"] == "--joey-best peer --joey-set lr=0.002"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--points", "peer,fast"], "--points: fast is not a point; the points: peer, "),
        (["--budget-minutes", "0"], "--budget-minutes must be above 0 and at most 600, not 0"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        joey_search.main(args)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_transformer_points_run_on_their_own_clock_and_table(tmp_path, capsys):
    assert joey_search.main(["--transformer", "--plan", "--results-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(joey_search.TRANSFORMER_POINTS)
    shallow = next(line for line in lines if line.startswith("tf_lr1e-3_w1000_2layers"))
    assert "--joey-best transformer --joey-set lr=0.001 --joey-set warmup=1000 --joey-set layers=2" in shallow
    assert "--budget-minutes 12 " in shallow
    put(tmp_path, "tf", fake_result([5.0, 20.0]))
    put(tmp_path, "tf_lr1e-3_w300", fake_result([30.0, 48.0]))
    put(tmp_path, "peer", fake_result([60.0]))  # a recurrent point: not in this table
    summary = joey_search.table(tmp_path, joey_search.TRANSFORMER_POINTS)
    assert [r["point"] for r in summary["rows"]] == ["tf", "tf_lr1e-3_w300"]
    assert summary["headline_flags"] == "--joey-best transformer --joey-set lr=0.001 --joey-set warmup=300"
    assert "| tf_lr1e-3_w300 (chosen) | 0.001 | 80 | warm-up 300, then 1/sqrt(step); 3 + 3 layers |" in (
        joey_search.markdown(summary)
    )
