"""Scaled dot scores, sparsemax and 1.5-entmax weights, and hard attention at inference: each by
hand, in every wiring of the model, and through the Translator and the CLI (a tiny model that
must learn with each: tests/model/test_seq2seq.py)."""

import itertools
import math
import shutil

import pytest
import torch

from lookback.cli import main
from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.decoding.search import greedy
from lookback.model.attention import MultiHeadScore, ScaledDotScore, attend, keep_top
from lookback.model.decoder import Look
from lookback.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from lookback.translator import Translator

from ..helpers import assert_gradient_descends, assert_source_rows_learn, tiny_model, train_tiny
from .test_seq2seq import PAIRS, model_for

E = torch.tensor([[[1.0, 0.5, 3.0]]])  # scores (B=1, T=1, S=3); the third is padding
H = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])  # (1, S=3, He=2)
MASK = torch.tensor([[True, True, False]])


def test_scaled_dot_is_the_dot_product_over_sqrt_d():
    s = torch.tensor([[[0.5, -0.2, 0.8, 1.0]]])  # (1, 1, D=4)
    h = torch.tensor([[[0.1, 0.2, 0.1, 2.0], [0.8, 0.1, 0.7, 0.0]]])  # (1, 2, 4)
    # s.h_1 = 0.05 - 0.04 + 0.08 + 2 = 2.09;  s.h_2 = 0.4 - 0.02 + 0.56 = 0.94;  sqrt(4) = 2
    assert ScaledDotScore()(s, h)[0, 0].tolist() == pytest.approx([1.045, 0.47], abs=1e-6)


SOFTMAX = [1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(0.5))]  # exp(1), exp(.5) over their sum


@pytest.mark.parametrize(
    "normalizer,expected",
    [
        ("softmax", SOFTMAX),
        # sparsemax: both in the support; tau = (1 + 0.5 - 1) / 2 = 0.25 -> 0.75, 0.25
        ("sparsemax", [0.75, 0.25]),
        # 1.5-entmax: (0.5 - tau)^2 + (0.25 - tau)^2 = 1 -> tau = (1.5 - sqrt(7.75)) / 4 = -0.32098
        ("entmax15", [0.82098**2, 0.57098**2]),
    ],
)
def test_each_normalizer_by_hand_with_padding_masked(normalizer, expected):
    c, alpha = attend(E, H, MASK, normalizer)
    assert alpha[0, 0].tolist() == pytest.approx([*expected, 0.0], abs=1e-4)
    assert c[0, 0].tolist() == pytest.approx(expected, abs=1e-4)  # h_1, h_2 are unit vectors


def test_sparse_normalizers_give_exact_zeros_and_no_gradient_through_them():
    e = torch.tensor([[[2.0, 0.0, -1.0]]], requires_grad=True)
    all_real = torch.ones(1, 3, dtype=torch.bool)
    # sparsemax: support {1} (1 + 2 > 2, but 1 + 2 x 0 < 2), tau = 1 -> [1, 0, 0]
    # entmax15: e / 2 = [1, 0, -0.5], tau = 0 -> [1, 0, 0]
    for normalizer in ("sparsemax", "entmax15"):
        _, alpha = attend(e, H, all_real, normalizer)
        assert alpha[0, 0].tolist() == [1.0, 0.0, 0.0]
        (alpha[0, 0] * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert e.grad[0, 0, 1:].tolist() == [0.0, 0.0]  # no weight, no gradient
        e.grad = None
    _, soft = attend(e, H, all_real, "softmax")
    assert (soft > 0).all()


def test_keep_top_renormalises_the_k_largest_weights():
    alpha = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]])
    assert keep_top(alpha, 1).tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]  # the argmax, one-hot
    assert torch.allclose(keep_top(alpha, 2), torch.tensor([[0.625, 0.375, 0.0], [0.0, 2 / 3, 1 / 3]]))
    assert torch.equal(keep_top(alpha, 3), alpha)
    _, hard = attend(E, H, MASK, "softmax", top_k=1)
    assert hard[0, 0].tolist() == [1.0, 0.0, 0.0]


def wirings():
    return itertools.product(
        ["gru", "lstm"],
        ["scaled_dot", "additive"],
        ["sparsemax", "entmax15"],
        [False, True],
        ["current", "previous"],
    )


@pytest.mark.parametrize("cell,attention,normalizer,feeding,attend_from", list(wirings()))
def test_every_wiring_trains_and_decodes_with_each_normalizer(
    cell, attention, normalizer, feeding, attend_from
):
    model = model_for(cell, True, attention, feeding, attend_from, normalizer=normalizer).train()
    b = collate(PAIRS)
    out = model(b.src, b.src_len, b.tgt_in)
    B, T = b.tgt_in.shape
    assert torch.allclose(out.alpha.sum(-1), torch.ones(B, T), atol=1e-5)
    assert (out.alpha[1, :, 2:] == 0).all()  # sentence 2 has two real source tokens
    model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert_source_rows_learn(model, b.src)
    assert len(greedy(model.eval(), b.src, b.src_len)) == B


def test_hard_attention_is_a_look_the_caller_passes():
    model = tiny_model(attention="additive", dec_hidden_size=24).eval()
    b = collate(PAIRS)
    hard = model(b.src, b.src_len, b.tgt_in, look=Look(top_k=1)).alpha
    assert ((hard == 0) | (hard == 1)).all() and torch.equal(hard.sum(-1), torch.ones(hard.shape[:2]))
    soft = model(b.src, b.src_len, b.tgt_in).alpha  # nothing stays behind on the model
    assert not ((soft == 0) | (soft == 1)).all()
    assert torch.allclose(soft.sum(-1), torch.ones(soft.shape[:2]))


def test_config_checks_sizes_and_names():
    with pytest.raises(ConfigError, match="model.attention: scaled_dot scores need s and h of one size"):
        from_dict({"model": {"attention": "scaled_dot", "hidden_size": 256, "dec_hidden_size": 256}})
    with pytest.raises(ConfigError, match="model.normalizer"):
        from_dict({"model": {"normalizer": "sparsmax"}})
    with pytest.raises(ConfigError, match="decode.hard_attention"):
        from_dict({"decode": {"hard_attention": -1}})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("hard"), "additive")


def test_weights_of_another_model_are_one_line_naming_the_missing_weights(run, tmp_path):
    """A checkpoint from before a change to the model (the multi-head layer norm) names what differs."""
    other = tmp_path / "other"
    shutil.copytree(run, other)
    state = load_checkpoint(other / "best.pt")
    del state["model"]["decoder.combine.weight"]
    save_checkpoint(state, other / "best.pt")
    with pytest.raises(CheckpointError) as err:
        Translator.load(other)
    message = str(err.value)
    assert message.startswith(f"{other / 'best.pt'}: weights do not fit the model of its config (Missing key")
    assert "decoder.combine.weight" in message and "\n" not in message


def test_the_translator_and_the_cli_decode_with_hard_attention(run, capsys, monkeypatch):
    translator = Translator.load(run)
    src = ["the cat sees the dog", "a small bird"]
    soft = translator.translate(src, beam=3)
    assert any(((t.attention > 0) & (t.attention < 1)).any() for t in soft)
    translator.decode.hard_attention = 1
    for t in translator.translate(src, beam=3):
        assert ((t.attention == 0) | (t.attention == 1)).all()
        assert torch.equal(t.attention.sum(-1), torch.ones(len(t.tokens)))
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("the cat sees the dog\n"))
    # on the translator's device: a GPU's sums may break a near-tie of argmax another way
    assert main(["translate", str(run), "--hard-attention", "1", "--device", "cpu"]) == 0
    hard = translator.translate(["the cat sees the dog"], beam=translator.decode.beam)[0].text
    assert capsys.readouterr().out == hard + "\n"  # the CLI decodes as the hard translator does
    with pytest.raises(SystemExit):
        main(["translate", str(run), "--hard-attention", "-1"])
    assert "--hard-attention: got '-1', expected an integer >= 0" in capsys.readouterr().err


def test_multi_head_scores_and_merge_by_hand():
    score = MultiHeadScore(dec_size=2, enc_size=2, attention_size=2, heads=2)  # d_k = 1
    with torch.no_grad():
        score.W_q.weight.copy_(torch.eye(2))
        score.W_k.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        score.W_v.copy_(
            torch.tensor([[[1.0], [0.0]], [[0.0], [1.0]]])
        )  # head 1 reads h's 1st, head 2 its 2nd
        score.W_o.weight.copy_(torch.eye(2))
    s = torch.tensor([[[1.0, -1.0]]])  # (B=1, T=1, D=2)
    h = torch.tensor([[[1.0, 1.0], [2.0, 0.0]]])  # (1, S=2, He=2)
    e = score(s, score.keys(h))
    # head 1: q = 1, k = h[:, 0] = [1, 2] -> e = [1, 2];  head 2: q = -1, k = 2 h[:, 1] = [2, 0] -> [-2, 0]
    assert e.shape == (1, 2, 2) and e[0].tolist() == [[1.0, 2.0], [-2.0, 0.0]]
    c, alpha = attend(e, h, torch.ones(1, 2, dtype=torch.bool))
    a1, a2 = alpha[0].tolist()  # each head's softmax: a1 = [.2689, .7311], a2 = [.1192, .8808]
    e_mean, alpha_mean, merged = score.merge(e, alpha, c)  # head 1 takes c^1's 1st entry, head 2 c^2's 2nd
    assert e_mean.tolist() == [[[-0.5, 1.0]]]  # the heads' mean scores and weights, which the plots show
    assert alpha_mean[0, 0].tolist() == pytest.approx([(a1[0] + a2[0]) / 2, (a1[1] + a2[1]) / 2])
    x = [a1[0] * 1 + a1[1] * 2, a2[0] * 1 + a2[1] * 0]  # W^O [c^1 W^V_1; c^2 W^V_2] = [1.731, 0.119]
    d = (x[0] - x[1]) / 2  # layer norm of 2 numbers: mean (x1 + x2) / 2, variance d^2 (+ eps 1e-5)
    expected = [d / math.sqrt(d * d + 1e-5), -d / math.sqrt(d * d + 1e-5)]
    assert merged.shape == (1, 1, 2) and merged[0, 0].tolist() == pytest.approx(expected, abs=1e-6)


def test_multi_head_context_keeps_its_scale_when_the_projections_grow():
    """The failure the layer norm prevents: W^O W^V growing under Adam made |c| 30 times |h|
    and saturated the readout. Scaling W^O by 100 must leave c as it was."""
    torch.manual_seed(0)
    score = MultiHeadScore(dec_size=6, enc_size=8, attention_size=4, heads=2)
    s, h = torch.randn(2, 3, 6), torch.randn(2, 5, 8)
    e = score(s, score.keys(h))
    c, alpha = attend(e, h, torch.ones(2, 5, dtype=torch.bool))
    before = score.merge(e, alpha, c)[2]
    with torch.no_grad():
        score.W_o.weight.mul_(100)
    after = score.merge(e, alpha, c)[2]
    assert torch.allclose(before, after, atol=1e-3)  # the same up to the norm's eps
    assert before.pow(2).mean(-1).allclose(torch.ones(2, 3), atol=1e-2)  # unit scale per position


@pytest.mark.parametrize(
    "cell,feeding,attend_from", itertools.product(["gru", "lstm"], [False, True], ["current", "previous"])
)
def test_multi_head_in_every_wiring(cell, feeding, attend_from):
    model = tiny_model(
        cell=cell,
        attention="scaled_dot",
        heads=2,
        attention_size=8,
        input_feeding=feeding,
        attend_from=attend_from,
    ).train()
    b = collate(PAIRS)
    out = model(b.src, b.src_len, b.tgt_in)
    B, T = b.tgt_in.shape
    assert out.alpha.shape == (B, T, b.src.size(1)) and out.c.shape == (B, T, 24)  # the heads' mean
    assert torch.allclose(out.alpha.sum(-1), torch.ones(B, T), atol=1e-5)
    assert (out.alpha[1, :, 2:] == 0).all()
    assert_gradient_descends(
        lambda: model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out), model.decoder.score.W_v
    )
    assert len(greedy(model.eval(), b.src, b.src_len)) == B


def test_multi_head_config_checks():
    with pytest.raises(
        ConfigError,
        match="model.heads: 2 heads need a multi-head score \\('scaled_dot'\\) or a transformer, "
        "not 'additive'",
    ):
        from_dict({"model": {"heads": 2}})
    with pytest.raises(ConfigError, match=r"model.attention_size \(10\) must divide into 4 heads"):
        from_dict({"model": {"attention": "scaled_dot", "heads": 4, "attention_size": 10}})
    # with heads the projections make s and h comparable whatever their sizes
    from_dict({"model": {"attention": "scaled_dot", "heads": 2, "hidden_size": 256, "dec_hidden_size": 128}})
