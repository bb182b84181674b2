"""Attention statistics: entropy and diagonal weight, by hand and while a tiny model learns."""

from __future__ import annotations

import json

import pytest
import torch

from lookback.config import from_dict
from lookback.data.tokenizer import PAD
from lookback.explain.diagnostics import attention_stats, is_parking, pooled, sentence_diagnostics

from ..helpers import tiny_model, tiny_train_config, train_tiny


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
    probed = tmp_path / "probed"  # probe records every few updates, with the scores' spread: a third panel
    probed.mkdir()
    rows = [{"kind": "valid", "step": 100, "bleu": 5.0, "alpha_entropy": 0.5, "alpha_diagonal": 0.2}]
    rows += [
        {
            "kind": "probe",
            "step": s,
            "alpha_entropy": 1 - s / 200,
            "alpha_diagonal": 0.1,
            "score_spread": 0.2 + s,
        }
        for s in range(0, 101, 25)
    ]
    (probed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["takeoff", str(probed), attends, "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > (tmp_path / "t.png").stat().st_size  # three panels
    assert "no attention statistics in fixed" in capsys.readouterr().out
    (tmp_path / "plain" / "metrics.jsonl").write_text("{not json\n", encoding="utf-8")
    assert main(["takeoff", plain, "-o", str(tmp_path / "u.svg")]) == 2
    assert "metrics.jsonl: line 1 is not JSON" in capsys.readouterr().err
    assert main(["takeoff", str(tmp_path / "nowhere"), "-o", str(tmp_path / "u.svg")]) == 2


def _probe_pairs(n: int = 6, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(source ids, target ids) of random lengths 3-9 over a vocabulary of 30 (ids >= 4)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 10, (n, 2), generator=g).tolist()
    ids = lambda n: torch.randint(4, 30, (n,), generator=g).tolist()  # noqa: E731
    return [(ids(s), ids(t)) for s, t in lengths]


def test_probe_sees_scores_spread_and_saturate():
    """Dot's scores grow with the scale of h; once softmax is one-hot, its Jacobian
    diag(alpha) - alpha alpha^T is 0 and no gradient reaches e, however large dJ/dalpha."""
    from lookback.explain.diagnostics import probe

    spreads, grads = [], []
    for scale in (0.0, 1.0, 1e4):
        model = tiny_model(attention="dot", dec_hidden_size=16, hidden_size=8, layer_norm=True)
        with torch.no_grad():
            model.encoder.norm.weight.fill_(scale + 1e-6)  # h scaled: dot's scores with it
        stats = probe(model, _probe_pairs(), torch.device("cpu"))
        spreads.append(stats["score_spread"])
        grads.append(stats["score_grad"])
        assert "attention_grad" not in stats  # dot has no parameters of its own
    assert spreads[0] < 1e-4 < spreads[1] < spreads[2]
    assert grads[2] < grads[1] / 100  # saturated softmax: (almost) no gradient reaches e


@pytest.mark.parametrize(
    "variant",
    [
        {"attention": "dot", "dec_hidden_size": 16, "hidden_size": 8},
        {"attention": "general"},
        {"attention": "additive", "coverage": True},
        {"attention": "additive", "attend_from": "previous", "input_feeding": True},
        {"attention": "additive", "window": "local_p", "window_size": 2},
        {"attention": "scaled_dot", "heads": 2, "dec_hidden_size": 16, "hidden_size": 8},
    ],
    ids=["dot", "general", "coverage", "previous+feeding", "local_p", "multihead"],
)
def test_probe_measures_every_variant_and_leaves_the_model_as_it_was(variant):
    from lookback.explain.diagnostics import probe

    model = tiny_model(**variant)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = probe(model, _probe_pairs(), torch.device("cpu"))
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert 0 < stats["alpha_entropy"] <= 1 and stats["score_spread"] > 0
    has_params = variant["attention"] != "dot"
    assert ("attention_grad" in stats) == has_params
    # a local window's and merged heads' e are views for show, not what softmax normalised
    assert ("score_grad" in stats) == (variant.get("window") is None and variant.get("heads", 1) == 1)


def test_training_probes_attention_every_n_updates_from_the_first(tmp_path):
    from lookback.training.train import train

    raw = tiny_train_config(tmp_path, train={"max_steps": 30, "valid_every": 30, "probe_every": 10})
    run_dir = train(from_dict(raw))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    probes = [r for r in records if r["kind"] == "probe"]
    assert [r["step"] for r in probes] == [0, 10, 20, 30]
    assert probes[0]["alpha_entropy"] > 0.95  # uniform-ish at initialisation
    assert all({"score_spread", "score_grad", "attention_grad"} <= r.keys() for r in probes)
