"""Nearest words: in the embedding table, and among a word's encoder states in its sentences."""

import pytest
import torch
import torch.nn.functional as F

from lookback.explain.neighbours import contextual, cosine, find, format_contextual, neighbours

from .test_trace import SENTENCE, toy_translator


def test_cosine_by_hand():
    table = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]])
    assert torch.allclose(cosine(torch.tensor([2.0, 0.0]), table), torch.tensor([1.0, 0.5**0.5, 0.0]))


def test_neighbours_ranks_rows_of_the_embedding_table():
    t = toy_translator(attention="dot")
    emb = t.model.encoder.embed.weight
    with torch.no_grad():
        emb.normal_()
        ids = {w: t.src_tok.piece_to_id(w) for w in ("cat", "dog", "house")}
        emb[ids["dog"]] = emb[ids["cat"]] * 2 + 0.01  # nearly the same direction as cat
        emb[ids["house"]] = -emb[ids["cat"]]  # the opposite
    pieces, near = neighbours(t, "cat", k=200)
    assert pieces == ["cat"]
    assert near[0][0] == "dog" and near[0][1] == pytest.approx(1.0, abs=1e-3)
    assert near[-1] == ("house", pytest.approx(-1.0))
    names = [p for p, _ in near]
    assert "cat" not in names and "<pad>" not in names and "</s>" not in names
    assert len(names) == t.src_tok.vocab_size - 4 - 1
    _, near_fr = neighbours(t, "chien", side="target", k=3)
    assert len(near_fr) == 3


def test_neighbours_of_several_pieces_and_of_unknown_words():
    t = toy_translator(attention="dot")
    pieces, _ = neighbours(t, "big dog", k=2)
    assert pieces == ["big", "dog"]
    with pytest.raises(ValueError, match="not in the source vocabulary"):
        neighbours(t, "zebra")
    with pytest.raises(ValueError, match="side"):
        neighbours(t, "dog", side="left")


def test_find_the_pieces_of_a_word():
    assert find([5, 6, 7, 6, 7], [6, 7]) == 1
    assert find([5, 6], [7]) is None and find([1, 2], [1, 2, 3]) is None


def state_at(t, sentence: str, word: str) -> torch.Tensor:
    """By hand: the encoder's state h_i at `word` (one piece) in `sentence`."""
    ids = t.source_ids([sentence])[0]
    with torch.no_grad():
        h = t.model.encoder(torch.tensor([ids]), torch.tensor([len(ids)])).h[0]  # (S, He)
    return h[ids.index(t.src_tok.piece_to_id(word))]


CORPUS = ["the dog runs .", "a big dog sees the cat .", "the cat sleeps .", SENTENCE]


def test_contextual_ranks_the_words_states_elsewhere_by_cosine():
    t = toy_translator(attention="dot")
    c = contextual(t, "dog", SENTENCE, CORPUS, k=10)
    assert c.occurrences == 2 and c.sentences == 4  # the query's own sentence is left out
    assert {o.sentence for o in c.nearest} == {"the dog runs .", "a big dog sees the cat ."}
    q = state_at(t, SENTENCE, "dog")
    assert c.state_size == q.numel() and c.pieces == ["dog"]
    for o in c.nearest:
        assert o.cosine == pytest.approx(
            float(F.cosine_similarity(q, state_at(t, o.sentence, "dog"), dim=0)), abs=1e-5
        )
    assert c.nearest[0].cosine >= c.nearest[1].cosine and c.farthest[0] == c.nearest[-1]
    text = format_contextual(c)
    assert f"{c.nearest[0].cosine:7.3f}  {c.nearest[0].sentence}" in text and "embedding" in text


def test_a_word_has_one_embedding_and_a_state_per_sentence():
    t = toy_translator(attention="additive")
    corpus = ["the  dog runs .", "a cat sees the dog ."]  # the first reads as the query does
    runs = contextual(t, "dog", "the dog runs .", corpus)
    sees = contextual(t, "dog", "a cat sees the dog .", ["the dog runs ."])
    assert runs.nearest[0].sentence == "the  dog runs ." and runs.nearest[0].cosine == pytest.approx(1.0)
    assert runs.nearest[1].cosine < 0.99  # another sentence, another state
    assert sees.nearest[0].cosine == pytest.approx(runs.nearest[1].cosine, abs=1e-5)  # cos is symmetric
    assert runs.static == sees.static  # the embedding's neighbours do not know the sentence


def test_contextual_says_what_is_wrong():
    t = toy_translator(attention="dot")
    with pytest.raises(ValueError, match="'cat' is not in 'the dog runs .'"):
        contextual(t, "cat", "the dog runs .", CORPUS)
    with pytest.raises(ValueError, match="not in the source vocabulary"):
        contextual(t, "zebra", "the zebra runs .", CORPUS)
    c = contextual(t, "sleeps", "the dog sleeps .", ["the dog runs ."])
    assert c.occurrences == 0 and "none: give a --corpus" in format_contextual(c)
