"""Seeing inside: the step trace, the lecture's worked examples, alignment plots."""

import math

import pytest
import torch

from lookback.config import DecodeConfig, from_dict
from lookback.data.tokenizer import EOS, WordTokenizer
from lookback.explain.alignment import merge_words, plot_alignment, word_groups
from lookback.explain.trace import embedding_similarities, format_trace, lecture, lecture_numbers, trace
from lookback.translator import Translator

from ..helpers import WORDS

SENTENCE = "the big dog sees a small cat in the park ."


def toy_translator(seed: int = 0, **model) -> Translator:
    """An untrained model over the toy lexicon: enough to check that a trace replays it exactly."""
    src = WordTokenizer("en", [*sorted(WORDS), "."])
    tgt = WordTokenizer("fr", [*sorted(WORDS.values()), "."])
    torch.manual_seed(seed)
    cfg = from_dict(
        {
            "model": {
                "emb_size": 16,
                "hidden_size": 12,
                "dec_hidden_size": 24,
                "attention_size": 10,
                "dropout": 0.0,
                **model,
            }
        }
    )
    from lookback.model.seq2seq import build_model

    net = build_model(cfg.model, src.vocab_size, tgt.vocab_size)
    return Translator(net, src, tgt, DecodeConfig(beam=3, max_ratio=1.0), cfg)


VARIANTS = [
    {"attention": "dot"},
    {"attention": "general"},
    {"attention": "additive"},
    {"attention": "additive", "attend_from": "previous"},
    {"attention": "general", "input_feeding": True},
    {"attention": "additive", "cell": "lstm"},
]


@pytest.mark.parametrize("model", VARIANTS, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_trace_replays_the_models_own_attention(model):
    t = toy_translator(**model)
    out = t.translate([SENTENCE], beam=1)[0]
    tr = trace(t, SENTENCE)
    assert tr.translation == out.text and tr.tokens == out.tokens
    assert [s.token for s in tr.steps] == [*out.tokens, "</s>"]
    weights = torch.tensor([s.weights for s in tr.steps[:-1]])
    assert torch.allclose(weights, out.attention, atol=1e-5)  # the same rows as the search's matrix
    for st in tr.steps:
        # (2) by hand: the weights are the softmax of the scores, and sum to one
        e = torch.tensor(st.scores, dtype=torch.float64)
        assert torch.allclose(torch.softmax(e, 0), torch.tensor(st.weights, dtype=torch.float64), atol=1e-5)
        assert math.isclose(sum(st.weights), 1.0, abs_tol=1e-5)
        assert st.focus == tr.src_tokens[max(range(len(st.weights)), key=st.weights.__getitem__)]
        assert st.context_size == 24  # 2 directions x 12
        assert len(st.top) == 5 and st.top == sorted(st.top, key=lambda p: -p[1])
    # greedy: every chosen token is the most probable one (max_ratio 1.0 never forces the end here)
    assert all(st.top[0][0] == st.token for st in tr.steps if st.index <= len(tr.steps) - 1)


def test_trace_context_is_the_weighted_sum_of_the_encoder_states():
    t = toy_translator(attention="additive")
    tr = trace(t, SENTENCE)
    ids = t.src_tok.encode(SENTENCE) + [EOS] * t.config.data.src_eos  # as the model reads it
    with torch.no_grad():
        h = t.model.encode(torch.tensor([ids]), torch.tensor([len(ids)])).h[0]  # (S, He)
    for st in tr.steps:
        c = torch.tensor(st.weights) @ h  # (3) by hand
        assert math.isclose(st.context_norm, float(c.norm()), rel_tol=1e-4)
    assert all(st.context_change > 0 for st in tr.steps[1:])  # a new context at every step


def test_without_attention_the_context_never_changes():
    t = toy_translator(attention="none")
    tr = trace(t, SENTENCE)
    assert tr.attention == "none"
    assert all(st.scores is None and st.weights is None and st.focus is None for st in tr.steps)
    assert tr.steps[0].context_change is None
    assert all(st.context_change == 0.0 for st in tr.steps[1:])
    assert len({round(st.context_norm, 6) for st in tr.steps}) == 1
    text = format_trace(tr)
    assert "attention: none" in text and "same fixed context c (24 numbers)" in text
    assert "moved 0.000 since the last step" in text


def test_trace_of_a_beam_hypothesis():
    t = toy_translator(attention="general", seed=3)
    outs = t.translate_nbest([SENTENCE], beam=3, nbest=3)[0]
    tr = trace(t, SENTENCE, beam=3, hypothesis=1)
    assert tr.tokens == outs[1].tokens and tr.hypothesis == 1
    weights = torch.tensor([s.weights for s in tr.steps[:-1]])
    assert torch.allclose(weights, outs[1].attention, atol=1e-5)


def test_trace_rejects_what_it_cannot_explain():
    t = toy_translator(attention="dot")
    with pytest.raises(ValueError, match="empty"):
        trace(t, "   ")
    with pytest.raises(ValueError, match="0 or more"):
        trace(t, SENTENCE, hypothesis=-1)
    tr = trace(t, SENTENCE)
    with pytest.raises(ValueError, match="no step 99"):
        format_trace(tr, only_step=99)


def test_format_trace_shows_the_three_steps():
    tr = trace(toy_translator(attention="additive"), SENTENCE)
    text = format_trace(tr, only_step=1)
    assert "step 1:" in text and "step 2:" not in text
    assert "(1) score" in text and "(2) weight" in text and "(3) c_t: 24 numbers" in text
    assert "sum       1.000" in text
    for tok in tr.src_tokens:
        assert f"\n  {tok} " in text


def test_trace_sets_gradients_beside_attention():
    from lookback.explain.attribution import agreement, attribute
    from lookback.explain.diagnostics import sentence_diagnostics

    t = toy_translator(attention="additive", seed=2)
    tr = trace(t, SENTENCE)
    out = t.translate([SENTENCE], beam=1)[0]
    grads = torch.tensor([st.gradient for st in tr.steps])  # (T + 1, S): </s> included
    assert grads.shape == (len(out.tokens) + 1, len(tr.src_tokens))
    want, _ = attribute(t.model, out.src_ids, out.ids, n_steps=20, end=True)
    assert torch.allclose(grads, want, atol=1e-5)
    weights = torch.tensor([st.weights for st in tr.steps])
    assert tr.agreement == agreement(weights, grads)
    assert tr.diagnostics == sentence_diagnostics(weights[:-1], tr.src_tokens)
    text = format_trace(tr)
    assert "gradient" in text and "attention vs gradients over the" in text
    assert "attention diagnostics:" in text
    bare = trace(t, SENTENCE, gradients=False)
    assert all(st.gradient is None for st in bare.steps) and bare.agreement is None
    none = trace(toy_translator(attention="none"), SENTENCE)  # no attention: gradients alone
    assert none.agreement is None and none.diagnostics is None and none.steps[0].gradient is not None
    assert "gradient" in format_trace(none)


def test_trace_json_is_plain_data():
    import json

    tr = trace(toy_translator(attention="dot"), "a dog .")
    data = json.loads(json.dumps(tr.to_dict()))
    assert data["steps"][0]["index"] == 1 and len(data["steps"][0]["weights"]) == len(data["src_tokens"])


# The notes' worked example, through the project's own DotScore and attend.


def test_lecture_example_numbers_checked_by_hand():
    chat, chats = lecture_numbers()
    assert [round(x, 2) for x in chat["scores"].values()] == [0.09, 0.94, 0.20]
    assert list(chat["weights"].values()) == pytest.approx([0.224, 0.525, 0.250], abs=1e-3)
    assert chat["weights_sum"] == pytest.approx(1.0)
    z = math.exp(0.09) + math.exp(0.94) + math.exp(0.20)
    assert chat["weights"]["cat"] == pytest.approx(math.exp(0.94) / z)
    a = [math.exp(x) / z for x in (0.09, 0.94, 0.20)]
    h = [[0.1, 0.2, 0.1], [0.8, 0.1, 0.7], [0.2, 0.3, 0.2]]
    assert chat["context"] == pytest.approx([sum(a[i] * h[i][d] for i in range(3)) for d in range(3)])
    assert chat["general_identity_scores"] == pytest.approx([0.09, 0.94, 0.20])
    assert sum(chat["printed"]["weights"]) == pytest.approx(1.12)  # the notes' slip, which we report
    assert [round(x, 2) for x in chats["scores"].values()] == [0.58, 0.63, 0.62]
    assert chats["weights_sum"] == pytest.approx(1.0)


def test_lecture_text_shows_every_number():
    text = lecture()
    for number in ("0.0900", "0.9400", "0.2000", "4.8756", "0.2244", "0.5251", "0.2505", "1.0000", "1.12"):
        assert number in text
    assert "cos(cat, dog) = 0.976" in text and "cos(cat, elephant) = 0.649" in text


def test_embedding_similarities_by_hand():
    sims = embedding_similarities()
    cat, dog = [0.3, 0.9, 0.6], [0.5, 0.8, 0.5]
    by_hand = sum(x * y for x, y in zip(cat, dog, strict=True)) / (math.hypot(*cat) * math.hypot(*dog))
    assert sims["dog"] == pytest.approx(by_hand) and sims["cat"] == pytest.approx(1.0)
    assert sims["dog"] > sims["mouse"] > sims["elephant"]


# Alignment plots


def test_word_groups_follow_sentencepiece_word_starts():
    assert word_groups(["▁Le", "▁ch", "at", "▁noir", "."]) == [[0], [1, 2], [3, 4]]
    assert word_groups(["le", "chat", "."]) == [[0], [1], [2]]  # Moses words: one piece each
    assert word_groups(["at", "▁le"]) == [[0], [1]]


def test_merge_words_sums_source_pieces_and_averages_output_pieces():
    att = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.0, 0.2, 0.8]])
    merged, src, tgt = merge_words(att, ["▁the", "▁c", "at"], ["▁le", "▁ch", "at"])
    assert src == ["the", "cat"] and tgt == ["le", "chat"]
    expected = torch.tensor([[0.5, 0.5], [(0.1 + 0.0) / 2, (0.9 + 1.0) / 2]])
    assert torch.allclose(merged, expected)
    assert torch.allclose(merged.sum(1), torch.ones(2))


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_plot_alignment_writes_a_labelled_heatmap(tmp_path, suffix):
    att = torch.softmax(torch.randn(3, 4), -1)
    path = tmp_path / f"a.{suffix}"
    fig = plot_alignment(att, ["▁a", "▁do", "g", "."], ["▁un", "▁chien", "."], title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["▁a", "▁do", "g", "."]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["▁un", "▁chien", "."]
    fig = plot_alignment(att, ["▁a", "▁do", "g", "."], ["▁un", "▁chien", "."], path, words=True)
    assert path.stat().st_size > 1000
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "dog."]  # as spaced
    if suffix == "svg":
        text = path.read_text()
        assert "pieces merged into words" in text and "chien" in text


def test_plot_alignment_rejects_a_matrix_of_the_wrong_shape():
    with pytest.raises(ValueError, match="attention is"):
        plot_alignment(torch.ones(2, 3), ["a", "b"], ["x", "y"])
