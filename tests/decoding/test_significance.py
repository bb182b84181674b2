"""lookback compare: sacreBLEU's paired bootstrap and approximate randomisation, as sacreBLEU itself
computes them, and what is called a difference."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest

from lookback.cli import main
from lookback.decoding import significance
from lookback.decoding.significance import (
    bytes_needed,
    check_room,
    compare_runs,
    is_difference,
    paired_test,
    seed_pairings,
)

REFS = [
    "a dog runs in the snow .",
    "two men sit on a bench in the park .",
    "a girl plays with a red ball .",
    "the man is cooking dinner in the kitchen .",
    "a woman rides a bicycle down the street .",
]


def _systems(n: int = 60, good_a: float = 0.5, good_b: float = 0.65, seed: int = 0):
    """Hand-made outputs of n sentences: each system gets a sentence right with its probability,
    else says something else; the references cycle through REFS."""
    rng = random.Random(seed)
    refs = [REFS[i % len(REFS)] for i in range(n)]
    a = [r if rng.random() < good_a else "a cat sleeps on the sofa ." for r in refs]
    b = [r if rng.random() < good_b else "a dog sits in the park ." for r in refs]
    return a, b, refs


def _write(folder, a, b, refs):
    paths = [folder / name for name in ("a.txt", "b.txt", "ref.txt")]
    for path, lines in zip(paths, (a, b, refs), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(p) for p in paths]


def _sacrebleu_table(ref: str, a: str, b: str, test: str) -> list[list[str]]:
    """The numbers of sacreBLEU's own command line, `sacrebleu REF -i A B --paired-TEST -f text`,
    in the order it prints them."""
    cmd = [
        sys.executable,
        "-m",
        "sacrebleu",
        ref,
        "-i",
        a,
        b,
        "-m",
        "bleu",
        "chrf",
        f"--paired-{test}",
        "-f",
        "text",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    table = out.split("Paired")[0]  # the table, before the explanation
    return [re.findall(r"\d+\.\d+", line) for line in table.splitlines() if re.search(r"\d+\.\d+", line)]


def test_compare_matches_sacrebleus_own_paired_tests(tmp_path):
    a, b, refs = _systems()
    pa, pb, pr = _write(tmp_path, a, b, refs)
    ours = paired_test(a, b, refs, ("a", "b"))
    # bootstrap: baseline row "score (mean +- ci)" for BLEU and chrF, system row, then its p-values
    (base, system, p_bs) = _sacrebleu_table(pr, pa, pb, "bs")
    for row, name in ((base, "a"), (system, "b")):
        s = ours["systems"][name]
        expected = [s["bleu"], s["bleu_mean"], s["bleu_ci"], s["chrf"], s["chrf_mean"], s["chrf_ci"]]
        assert [float(x) for x in row] == pytest.approx([round(x, 1) for x in expected], abs=0.051)
    assert [float(x) for x in p_bs] == pytest.approx(
        [ours["p"]["bs"]["bleu"], ours["p"]["bs"]["chrf"]], abs=5e-5
    )
    (_, _, p_ar) = _sacrebleu_table(pr, pa, pb, "ar")
    assert [float(x) for x in p_ar] == pytest.approx(
        [ours["p"]["ar"]["bleu"], ours["p"]["ar"]["chrf"]], abs=5e-5
    )
    # the hand-made pair is close enough that neither p-value sits at its floor
    assert 1e-3 < ours["p"]["ar"]["bleu"] < 1
    assert ours["difference"]["bleu"] == pytest.approx(
        ours["systems"]["b"]["bleu"] - ours["systems"]["a"]["bleu"]
    )


def test_a_system_against_itself_is_no_difference_and_a_clear_gain_is_one():
    a, b, refs = _systems(n=100, good_a=0.2, good_b=0.9)
    same = paired_test(a, a, refs)
    # sacreBLEU counts shuffles strictly above d, so even d = 0 gets a small p: no difference all the same
    assert same["difference"]["bleu"] == 0 and not is_difference(same["p"]["ar"]["bleu"], 0.0)
    clear = paired_test(a, b, refs)
    assert (
        clear["difference"]["bleu"] > 20
        and clear["p"]["bs"]["bleu"] < 0.01
        and clear["p"]["ar"]["bleu"] < 0.01
    )


def test_a_difference_must_be_significant_and_larger_than_the_seeds_spread():
    assert is_difference(0.01, 2.0) and is_difference(0.01, -2.0)
    assert not is_difference(0.2, 5.0)  # not significant
    assert not is_difference(0.01, 1.0, spread=1.5)  # significant, but seeds alone move it more


def test_compare_command_prints_both_tests_and_json(tmp_path, capsys):
    a, b, refs = _systems()
    pa, pb, pr = _write(tmp_path, a, b, refs)
    assert main(["compare", pa, pb, "--ref", pr, "--names", "base", "new"]) == 0
    text = capsys.readouterr().out
    assert "new - base: BLEU +" in text and "(bootstrap)" in text and "(randomisation)" in text
    assert main(["compare", pa, pb, "--ref", pr, "--json", "--bs-samples", "100", "--ar-trials", "100"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["p"]) == {"bs", "ar"} and "bs:100" in result["signatures"]["bleu"]


def test_compare_says_in_one_line_what_does_not_match(tmp_path, capsys):
    a, b, refs = _systems()
    pa, pb, pr = _write(tmp_path, a, b[:-1], refs)
    assert main(["compare", pa, pb, "--ref", pr]) == 2
    assert "60 outputs of" in capsys.readouterr().err
    assert main(["compare", pa, pb, "--ref", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err


def test_the_tests_memory_by_hand():
    # a draw holds an index and 18 float32 numbers a sentence (81 bytes) and its scores (2,000)
    assert bytes_needed(10, bs_samples=100, ar_trials=0) == (100 * (81 * 10 + 2000), 0)
    # a trial: a swap mask and its selections, 11 bytes a sentence, and its sums (700)
    assert bytes_needed(10, bs_samples=0, ar_trials=1000) == (0, 1000 * (11 * 10 + 700))


def test_tests_too_large_for_memory_are_refused_in_one_line_saying_how_many_fit(monkeypatch):
    a, b, refs = _systems(n=2)
    gib = 2**30
    monkeypatch.setattr(significance, "free_memory", lambda device: gib)
    with pytest.raises(ValueError) as refused:
        paired_test(a, b, refs, bs_samples=10**9)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("bs_samples 1,000,000,000: on 2 sentences the test ")
    fit = int(message.split("at most ")[1].split(" fit")[0].replace(",", ""))
    assert bytes_needed(2, fit, 0)[0] <= gib < bytes_needed(2, fit + 1, 0)[0]  # what it says fits, fits
    with pytest.raises(ValueError, match="^ar_trials 1,000,000,000: on 2 sentences .* than the 1.0 GiB free"):
        paired_test(a, b, refs, ar_trials=10**9)
    check_room(2, {"bs": 1000, "ar": 10000})  # the defaults pass


def test_compare_refuses_counts_that_would_exhaust_memory_naming_the_flag(tmp_path, capsys):
    pa, pb, pr = _write(tmp_path, *_systems(n=2))
    assert main(["compare", pa, pb, "--ref", pr, "--ar-trials", "1000000000000"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("lookback: error: --ar-trials 1,000,000,000,000: on 2 ")


def test_every_seed_is_tested_and_a_one_seed_model_meets_the_widest_seed_range():
    a, b, refs = _systems()  # b is a clear gain over a
    worse = ["a ." for _ in a]  # far worse: the seed that moves "wide" most
    outputs = {"ref": a, "ref#2": a, "ref#3": b, "one": b, "wide": a, "wide#2": worse}
    one_against_three = seed_pairings(["ref", "ref#2", "ref#3"], ["one"])
    assert one_against_three == [("ref", "one"), ("ref#2", "one"), ("ref#3", "one")]
    assert seed_pairings(["a", "a#2"], ["b", "b#2", "b#3"]) == [("a", "b"), ("a#2", "b#2")]
    test = {"bs_samples": 200, "ar_trials": 200}
    result = compare_runs(refs, outputs, {"one": ["ref"], "wide": ["ref"]}, **test)
    ranges = {m: result["models"][m]["all"]["range"] for m in ("ref", "one", "wide")}
    assert ranges["one"] == 0 and ranges["wide"] > ranges["ref"] > 0
    (one,) = [p for p in result["pairs"] if p["model"] == "one"]
    each = [
        paired_test(outputs[r], b, refs, ("ref", "one"), **test)["p"]["bs"]["bleu"] for r in ("ref", "ref#3")
    ]
    assert one["pairings"] == 3 and one["p_bootstrap"] == max(each)  # the largest p of every pairing
    assert one["seed_range"] == ranges["wide"]  # not ref's range alone: one's own is not known
    assert one["mean_difference"] < one["seed_range"] and one["verdict"] == "no difference"
    (wide,) = [p for p in result["pairs"] if p["model"] == "wide"]
    assert wide["pairings"] == 2 and wide["seed_range"] == ranges["wide"]  # seed against seed
