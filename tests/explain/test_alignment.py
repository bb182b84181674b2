"""Word alignments from attention (alignment.py): links, Pharaoh lines, AER by hand, `lookback align`."""

import pytest
import torch

from lookback.cli import main
from lookback.explain.alignment import (
    align,
    alignment_error,
    groups_of_words,
    links,
    merge_groups,
    pharaoh,
    read_gold,
)
from lookback.translator import Translator

from ..helpers import toy_pairs, train_tiny


def test_argmax_and_threshold_links():
    A = torch.tensor([[0.7, 0.3, 0.0], [0.1, 0.45, 0.45], [0.0, 0.2, 0.8]])  # 3 output x 3 source words
    assert links(A) == {(0, 0), (1, 1), (2, 2)}  # (source, output); a tie goes to the first
    assert links(A, "threshold", 0.4) == {(0, 0), (1, 1), (2, 1), (2, 2)}
    assert pharaoh(links(A, "threshold", 0.4)) == "0-0 1-1 2-1 2-2"
    assert links(torch.zeros(0, 3)) == set()
    with pytest.raises(ValueError, match="unknown alignment method"):
        links(A, "best")


def test_read_gold_sure_and_possible_links():
    sure, possible = read_gold("0-0 1p2 2?1")
    assert sure == {(0, 0)} and possible == {(0, 0), (1, 2), (2, 1)}
    assert read_gold("1-1 2p3", one_based=True) == ({(0, 0)}, {(0, 0), (1, 2)})
    with pytest.raises(ValueError, match=r"gold line 3: '1x2' is not a link"):
        read_gold("0-0 1x2", where="gold line 3")
    with pytest.raises(ValueError, match="1-based"):
        read_gold("0-1", one_based=True)


def test_aer_by_hand():
    # gold: sure {0-0, 1-1}, possible also {1-2}; predicted {0-0, 1-2, 2-2}
    sure, possible = read_gold("0-0 1-1 1p2")
    predicted = {(0, 0), (1, 2), (2, 2)}
    r = alignment_error([predicted], [sure], [possible])
    # |A & S| = 1, |A & P| = 2, |A| = 3, |S| = 2: AER = 1 - 3/5; precision 2/3; recall 1/2
    assert r["aer"] == pytest.approx(0.4) and r["precision"] == pytest.approx(2 / 3)
    assert r["recall"] == pytest.approx(0.5) and r["links"] == 3 and r["sure"] == 2
    perfect = alignment_error([sure], [sure], [possible])
    assert perfect["aer"] == 0.0 and perfect["precision"] == 1.0 and perfect["recall"] == 1.0
    # summed over sentences, not averaged: a second, empty prediction adds its sure link to |S|
    two = alignment_error([predicted, set()], [sure, {(0, 0)}], [possible, {(0, 0)}])
    assert two["aer"] == pytest.approx(1 - 3 / 6)


def test_pieces_grouped_into_the_given_words():
    pieces = ["▁the", "▁c", "at", "▁,", "▁s", "leeps", "</s>"]
    assert groups_of_words(pieces, ["the", "cat", ",", "sleeps"]) == [[0], [1, 2], [3], [4, 5]]
    # pre-tokenised differently from the pieces' word starts: by characters
    assert groups_of_words(["▁cat", "s", "▁."], ["cats."]) == [[0, 1, 2]]
    assert groups_of_words(["le", "chat", "."], ["le", "chat", "."]) == [[0], [1], [2]]
    assert groups_of_words(["▁the", "<unk>"], ["the", "cat", "dog"]) is None  # neither fits


def test_merge_groups_sums_source_pieces_and_averages_output_pieces():
    att = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]])  # 2 output pieces x 3 source pieces
    merged = merge_groups(att, [[0], [1, 2]], [[0, 1]])
    assert torch.allclose(merged, torch.tensor([[0.3, 0.7]]))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("align"), "additive")


def test_a_trained_toy_model_aligns_word_by_word(run):
    """The toy lexicon translates word by word in order: gold links are the diagonal."""
    pairs = toy_pairs(30, seed=11)
    srcs, tgts = [e for e, _ in pairs], [f for _, f in pairs]
    predicted = align(Translator.load(run), srcs, tgts)
    gold = [{(i, i) for i in range(len(e.split()))} for e in srcs]
    r = alignment_error(predicted, gold, gold)
    assert all(len(p) == len(t.split()) for p, t in zip(predicted, tgts, strict=True))  # one per word
    assert r["aer"] < 0.35, r


def test_align_command_writes_pharaoh_and_scores(run, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("the dog runs .\na cat .\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("le chien court .\nun chat .\n", encoding="utf-8")
    (tmp_path / "gold.txt").write_text("1-1 2-2 3-3 4-4\n1-1 2-2 3p3\n", encoding="utf-8")
    files = ["--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt")]
    assert main(["align", str(run), *files, "--gold", str(tmp_path / "gold.txt"), "--one-based"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 2 and all(len(line.split()) == n for line, n in zip(lines, (4, 3), strict=True))
    assert "AER 0.00  precision 100.00  recall 100.00  (7 links, 6 sure gold links" in out.err
    assert main(["align", str(run), *files, "--method", "threshold", "--threshold", "0.3"]) == 0
    assert all("-" in line for line in capsys.readouterr().out.splitlines())
    (tmp_path / "short.txt").write_text("1-1\n", encoding="utf-8")
    assert main(["align", str(run), *files, "--gold", str(tmp_path / "short.txt")]) == 2
    assert "short.txt has 1 lines but" in capsys.readouterr().err
    (tmp_path / "bad.txt").write_text("0-0\n0=1\n", encoding="utf-8")
    assert main(["align", str(run), *files, "--gold", str(tmp_path / "bad.txt")]) == 2
    assert "bad.txt line 2: '0=1' is not a link" in capsys.readouterr().err


def test_eflomal_learns_the_toy_lexicon_and_align_reports_agreement(run, tmp_path, capsys):
    from lookback.explain.alignment import eflomal_links

    train, test = toy_pairs(300, seed=1), toy_pairs(20, seed=12)
    srcs, tgts = [e for e, _ in test], [f for _, f in test]
    theirs = eflomal_links(srcs, tgts, [e for e, _ in train], [f for _, f in train])
    diagonal = [{(i, i) for i in range(len(e.split()))} for e in srcs]
    assert alignment_error(theirs, diagonal, diagonal)["aer"] < 0.1  # word by word, in order
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s in srcs), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for t in tgts), encoding="utf-8")
    data = run.parent / "data" / "train"  # train_tiny's training corpus
    files = ["--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt")]
    assert main(["align", str(run), *files, "--eflomal", str(data)]) == 0
    err = capsys.readouterr().err
    assert "agreement with eflomal's forward links" in err and "an aligner, not gold" in err


def test_a_line_longer_than_the_model_reads_is_one_line_saying_so(run, capsys):
    translator = Translator.load(run)
    long = " ".join(["the dog runs ."] * 100)  # 400 words: over the 250 pieces a line is read to
    with pytest.raises(ValueError, match=r"^line 2: its source is \d{3},?\d* pieces, cut to the 250 a "):
        align(translator, ["a cat .", long], ["un chat .", "le chien court ."])
    with pytest.raises(ValueError, match=r"^line 1: its target is \d{3},?\d* pieces, cut to the 250"):
        align(translator, ["the dog runs ."], [" ".join(["le chien court ."] * 100)])
