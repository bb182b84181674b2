"""Attention statistics: entropy and diagonal weight, by hand and while a tiny model learns."""

from __future__ import annotations

import json

import pytest
import torch

from lookback.diagnostics import attention_stats, is_parking, pooled, sentence_diagnostics
from lookback.tokenizer import PAD

from .helpers import train_tiny


def test_uniform_weights_have_entropy_one_and_half_their_weight_near_the_diagonal():
    alpha = torch.full((1, 2, 4), 0.25)  # T = 2 steps over S = 4 tokens
    # diagonal positions (t + 1/2) 4 / 2 - 1/2 = 0.5 and 2.5: tokens 0-1, then 2-3, within one
    stats = attention_stats(alpha, torch.tensor([4]), torch.tensor([[7, 2]]))
    assert stats == pytest.approx({"alpha_entropy": 1.0, "alpha_diagonal": 0.5})


def test_one_hot_weights_on_and_off_the_diagonal():
    eye = torch.eye(3).unsqueeze(0)  # target step t looks at source token t
    stats = attention_stats(eye, torch.tensor([3]), torch.tensor([[7, 8, 2]]))
    assert stats == pytest.approx({"alpha_entropy": 0.0, "alpha_diagonal": 1.0})
    anti = eye.flip(-1)  # t looks at 2 - t: only the middle step is within one of the diagonal
    assert attention_stats(anti, torch.tensor([3]), torch.tensor([[7, 8, 2]]))[
        "alpha_diagonal"
    ] == pytest.approx(1 / 3)


def test_padding_and_one_token_sources_are_left_out():
    alpha = torch.zeros(3, 2, 4)
    alpha[0] = 0.25  # 4 real tokens, uniform, 2 real steps
    alpha[1, :, 0] = 1.0  # 1 real token: no choice, left out
    alpha[2, 0, :2] = torch.tensor([1.0, 0.0])  # 2 real tokens, one real step, one-hot
    alpha[2, 1, :2] = 0.5  # a padding step: left out
    tgt_out = torch.tensor([[7, 2], [7, 2], [2, PAD]])
    stats = attention_stats(alpha, torch.tensor([4, 1, 2]), tgt_out)
    # entropies 1, 1 and 0 over three steps; diagonal: 0.5, 0.5, and 1 (d = 0.5: both tokens)
    assert stats == pytest.approx({"alpha_entropy": 2 / 3, "alpha_diagonal": 2 / 3})


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_training_logs_how_attention_learns_to_look(tmp_path, attention):
    run_dir = train_tiny(tmp_path, attention)
    valid = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    if attention == "none":
        assert all("alpha_entropy" not in r for r in valid)
        return
    first, last = valid[0], valid[-1]
    # the toy lexicon translates word by word, in order: the weights sharpen onto the diagonal
    assert last["alpha_entropy"] < first["alpha_entropy"] and last["alpha_diagonal"] > first["alpha_diagonal"]


def test_sentence_diagnostics_by_hand():
    src = ["▁a", "▁dog", "▁,", "</s>"]  # S = 4: two words, a comma and the end
    alpha = torch.tensor(
        [
            [0.25, 0.25, 0.25, 0.25],  # uniform: entropy 1; half its weight parked on "," and </s>
            [0.0, 1.0, 0.0, 0.0],  # one-hot on "dog": entropy 0
            [1.0, 0.0, 0.0, 0.0],  # back to "a": the argmax moves backward
        ]
    )
    d = sentence_diagnostics(alpha, src)
    assert d["entropy"] == pytest.approx(1 / 3) and d["near_uniform"] == pytest.approx(1 / 3)
    # argmaxes 0 (first of the ties), 1, 0: "," is never the argmax (</s> does not count)
    assert d["unattended"] == pytest.approx(1 / 3)
    # totals a 1.25, dog 1.25, "," 0.25: none over 1.5
    assert d["over_attended"] == 0.0
    assert d["parking"] == pytest.approx(0.5 / 3) and d["parking_share"] == 0.5
    assert d["backward"] == pytest.approx(1 / 2)  # 0 -> 1 forward, 1 -> 0 backward
    piled = sentence_diagnostics(torch.tensor([[0.0, 1.0], [0.0, 1.0]]), ["▁x", "▁y"])
    assert piled["over_attended"] == 0.5 and piled["unattended"] == 0.5 and piled["backward"] == 0.0


def test_parking_pieces_are_specials_and_punctuation():
    assert [is_parking(p) for p in ["</s>", "▁.", ".", "▁,", "«", "▁dog", "▁", "▁l'"]] == [
        True, True, True, True, True, False, False, False,
    ]  # fmt: skip


def test_pooled_diagnostics_weigh_each_sentence_by_what_it_counts():
    short = sentence_diagnostics(torch.tensor([[1.0, 0.0]]), ["▁a", "▁b"])  # 1 step, entropy 0
    long = sentence_diagnostics(torch.full((3, 2), 0.5), ["▁a", "▁b"])  # 3 steps, entropy 1
    assert pooled([short, long])["entropy"] == pytest.approx(3 / 4)  # steps, not sentences
    assert pooled([short, long])["sentences"] == 2
    assert pooled([])["entropy"] is None


def test_takeoff_plot_from_run_directories(tmp_path, capsys):
    from lookback.cli import main

    def run(name: str, stats: bool) -> str:
        folder = tmp_path / name
        folder.mkdir()
        rows = [{"kind": "train", "step": 10, "loss": 3.0}]
        for step, bleu in ((100, 1.0), (200, 20.0)):
            extra = {"alpha_entropy": 0.9 - step / 1000, "alpha_diagonal": step / 1000} if stats else {}
            rows.append({"kind": "valid", "step": step, "bleu": bleu, **extra})
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return str(folder)

    attends, plain = run("attends", True), run("plain", False)
    assert main(["takeoff", attends, f"fixed={plain}", "-o", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").stat().st_size > 10_000
    assert "no attention statistics in fixed" in capsys.readouterr().out
    (tmp_path / "plain" / "metrics.jsonl").write_text("{not json\n", encoding="utf-8")
    assert main(["takeoff", plain, "-o", str(tmp_path / "u.svg")]) == 2
    assert "metrics.jsonl: line 1 is not JSON" in capsys.readouterr().err
    assert main(["takeoff", str(tmp_path / "nowhere"), "-o", str(tmp_path / "u.svg")]) == 2
