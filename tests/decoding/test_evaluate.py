"""Scores: sacreBLEU on detokenised text, the Multi30k protocol, length buckets."""

import pytest

from lookback.data.synth import sequence_accuracy
from lookback.decoding.evaluate import (
    bleu_by_length,
    bucket_of,
    group_by_length,
    multi30k_tokenize,
    score,
)


def test_perfect_and_wrong_translations():
    refs = ["Un chien court dans l'herbe.", "Deux hommes parlent."]
    assert score(refs, refs, "fr").bleu == pytest.approx(100.0)
    assert score(["Bonjour.", "Merci."], refs, "fr").bleu < 10


# What the Multi30k repository's scripts/task1-tokenize.sh writes for these lines: lowercase.perl,
# normalize-punctuation.perl -l LANG and tokenizer.perl -l LANG of its Moses snapshot (3a0631a).
# Of note: « and » become " (then &quot;) unless a non-breaking space surrounds them, the
# French elision splits after the apostrophe (l' homme), English splits before 's.
OFFICIAL = {
    "fr": [
        ("Un homme « court » dans la rue…", "un homme &quot; court &quot; dans la rue ..."),
        (
            "L'homme est là, à 5 000 m (environ) : d'accord ?",
            "l&apos; homme est là , à 5 000 m ( environ ) : d&apos; accord ?",
        ),
        (
            'Une femme en T-shirt "rouge" & un chien.',
            "une femme en t-shirt &quot; rouge &quot; &amp; un chien .",
        ),
    ],
    "de": [
        ("Ein Mann „läuft“ – schnell.", "ein mann &quot; läuft &quot; - schnell ."),
        (
            "Zwei Hunde spielen im Schnee, 1 000 Meter weit!",
            "zwei hunde spielen im schnee , 1 000 meter weit !",
        ),
    ],
    "en": [
        ('Two dogs\' "toys," said Bob & Tom.', "two dogs &apos; &quot; toys , &quot; said bob &amp; tom ."),
        ("A man's hat (red) is 3.5 in. wide...", "a man &apos;s hat ( red ) is 3.5 in. wide ..."),
    ],
}


@pytest.mark.parametrize("lang", sorted(OFFICIAL))
def test_the_multi30k_protocol_prepares_text_as_the_official_scripts_do(lang):
    lines, official = zip(*OFFICIAL[lang], strict=True)
    assert multi30k_tokenize(list(lines), lang) == list(official)


def test_multi30k_protocol_scores_lowercased_unsmoothed_bleu_with_its_signature():
    # case differences cost sacreBLEU but not the lowercased protocol
    s = score(["un chien court dans l'herbe verte."], ["Un chien court dans l'herbe verte."], "fr")
    assert s.multi30k_bleu == pytest.approx(100.0) and s.bleu < 100.0
    assert "tok:13a" in s.bleu_signature and "nc:6" in s.chrf_signature
    assert s.multi30k_signature.startswith("lc+normalize-punctuation+tokenizer.perl:fr(sacremoses ")
    assert "|tok:none|smooth:none|" in s.multi30k_signature
    # no 4-gram in common: multi-bleu.perl's BLEU is 0, where smoothing would give more
    assert score(["a b c d"], ["a b c e"], "en").multi30k_bleu == 0.0


def test_length_buckets_by_hand():
    assert [bucket_of(n) for n in (1, 10, 11, 20, 21, 40, 41, 60, 61, 200)] == [
        "1-10",
        "1-10",
        "11-20",
        "11-20",
        "21-30",
        "31-40",
        "41-60",
        "41-60",
        "61+",  # 61 words and up: the label says so
        "61+",
    ]
    srcs = ["a b", "a " * 15, "c d e"]
    result = bleu_by_length(srcs, ["x y z v", "z", "c d e f"], ["x y z v", "w", "c d e f"])
    assert list(result) == ["1-10", "11-20"]
    assert result["1-10"]["sentences"] == 2 and result["11-20"]["sentences"] == 1
    assert result["1-10"]["bleu"] == pytest.approx(100.0) and result["11-20"]["bleu"] == 0.0
    with pytest.raises(ValueError, match="3 sources, 2 hypotheses and 3 references"):
        bleu_by_length(srcs, ["x", "y"], ["x", "y", "z"])


def test_group_by_length_keeps_the_buckets_in_order_and_each_index_once():
    srcs = ["w " * 61, "w " * 60, "w", "w " * 11, "w " * 10, "w " * 200]
    assert group_by_length(srcs) == {"1-10": [2, 4], "11-20": [3], "41-60": [1], "61+": [0, 5]}
    assert group_by_length([]) == {}


def test_mismatched_counts_are_an_error():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        score(["a", "b"], ["a"], "fr")


def test_sequence_accuracy():
    assert sequence_accuracy(["a b", " c d ", "e"], ["a b", "c d", "e f"]) == pytest.approx(200 / 3)
    assert sequence_accuracy(["a  b"], ["a b"]) == 0.0  # only surrounding whitespace is stripped
    assert sequence_accuracy([], []) == 0.0
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        sequence_accuracy(["a"], ["a", "b"])


def test_the_length_ratio_is_output_over_reference_overall_and_by_bucket():
    srcs = ["a b c", "a b c d e f g h i j k l"]  # buckets 1-10 and 11-20
    refs = ["one two three four", "un deux trois quatre cinq six"]
    hyps = ["one two", "un deux trois quatre cinq six sept huit nine"]  # 2 of 4 tokens, 9 of 6
    assert score(hyps, refs, "fr").length_ratio == pytest.approx(11 / 10)
    by_length = bleu_by_length(srcs, hyps, refs)
    assert by_length["1-10"]["length_ratio"] == pytest.approx(0.5)
    assert by_length["11-20"]["length_ratio"] == pytest.approx(1.5)
    assert "length ratio 1.100" in score(hyps, refs, "fr").summary()
