"""The alignment matrix: attention weights as a heatmap, one row per output token.

Row t holds alpha_{t,1..S}, the weights output token t gave each source token
(the notes' "La" looks at "The", "zone" at "Area"). With SentencePiece the
tokens are pieces; `merge_words` joins them into words: a word's column is
the sum of its pieces' columns (rows still sum to 1), and a word's row is
the mean of its pieces' rows.

Word alignments from attention (`lookback align`): the model is forced
along a given translation (teacher forcing, no search), its pieces are
merged into the words of the given files (split on spaces, so the files may
be pre-tokenised), and each output word j is linked to source word i

    argmax      i = argmax_i A_{j,i}, one link per output word, or
    threshold   every i with A_{j,i} >= tau,

written as Pharaoh "i-j" lines (source index first, 0-based). Against gold
links, sure S and possible P (S within P), the alignment error rate of
Och & Ney (2003) for links A is

    AER = 1 - (|A & S| + |A & P|) / (|A| + |S|),
    precision = |A & P| / |A|,   recall = |A & S| / |S|.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..data.batch import pad
from ..data.tokenizer import BOS, SPECIALS
from ..device import autocast
from ..figures import save_figure
from ..model.seq2seq import Seq2Seq

WORD_START = "▁"  # SentencePiece marks the first piece of a word with it


def word_groups(pieces: list[str]) -> list[list[int]]:
    """Indices of the pieces of each word. Without any "▁" every piece is a word."""
    if not any(p.startswith(WORD_START) for p in pieces):
        return [[i] for i in range(len(pieces))]
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith(WORD_START) or piece in SPECIALS or not groups:  # </s>: a word of its own
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def _label(pieces: list[str], group: list[int]) -> str:
    return "".join(pieces[i] for i in group).replace(WORD_START, "") or WORD_START


def merge_groups(attention: Tensor, src_groups: list[list[int]], tgt_groups: list[list[int]]) -> Tensor:
    """(T, S) piece weights -> (T_words, S_words): sum over each source word's pieces, mean over
    each output word's pieces."""
    cols = torch.stack([attention[:, g].sum(1) for g in src_groups], 1)  # (T, S) -> (T, S_words)
    return torch.stack([cols[g].mean(0) for g in tgt_groups], 0)  # -> (T_words, S_words)


def merge_words(
    attention: Tensor, src_tokens: list[str], tgt_tokens: list[str]
) -> tuple[Tensor, list[str], list[str]]:
    """(T, S) piece weights -> (words out, words in): sum over source pieces, mean over output pieces."""
    src_groups, tgt_groups = word_groups(src_tokens), word_groups(tgt_tokens)
    rows = merge_groups(attention, src_groups, tgt_groups)
    return (
        rows,
        [_label(src_tokens, g) for g in src_groups],
        [_label(tgt_tokens, g) for g in tgt_groups],
    )


def plot_alignment(
    attention: Tensor,
    src_tokens: list[str],
    tgt_tokens: list[str],
    path: str | Path | None = None,
    title: str | None = None,
    words: bool = False,
):
    """Draw the (T, S) matrix with labelled axes; save it when `path` is given
    (PNG, SVG or PDF by its suffix). Returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if attention.shape != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(
            f"attention is {tuple(attention.shape)} but there are {len(tgt_tokens)} output "
            f"and {len(src_tokens)} source tokens"
        )
    note = "attention weights per subword piece"
    if words:
        attention, src_tokens, tgt_tokens = merge_words(attention, src_tokens, tgt_tokens)
        note = "pieces merged into words: source columns summed, output rows averaged"
    T, S = attention.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * S + 2), max(3.0, 0.4 * T + 1.8)))
    ax.imshow(attention.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(S), src_tokens, rotation=60, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(T), tgt_tokens)
    ax.xaxis.tick_top()
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if T * S <= 900:  # write the weights in the cells while they stay legible
        for t in range(T):
            for s in range(S):
                w = float(attention[t, s])
                if w >= 0.05:
                    color = "white" if w > 0.6 else "black"
                    ax.text(s, t, f"{w:.2f}".lstrip("0"), ha="center", va="center", fontsize=7, color=color)
    fig.suptitle(title or "alignment", fontsize=10)
    fig.text(0.5, 0.01, note, ha="center", fontsize=8, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    if path is not None:
        save_figure(fig, path, dpi=150)
        plt.close(fig)
    return fig


def groups_of_words(pieces: list[str], words: list[str]) -> list[list[int]] | None:
    """The pieces of each of the given `words` (a line split on spaces): by the characters they
    spell, or by SentencePiece's word starts when those count as many words; None when neither
    fits (e.g. a piece is <unk>). Specials (</s>) belong to no word."""
    spelled = [p.replace(WORD_START, "") if p not in SPECIALS else "" for p in pieces]
    if "".join(spelled) == "".join(words):
        owner = [i for i, w in enumerate(words) for _ in w]  # the word of each character
        groups: list[list[int]] = [[] for _ in words]
        at = 0
        for i, text in enumerate(spelled):
            if text:
                groups[owner[at]].append(i)
                at += len(text)
        return groups if all(groups) else None
    starts = [g for g in word_groups(pieces) if not all(pieces[i] in SPECIALS for i in g)]
    return starts if len(starts) == len(words) else None


def links(A: Tensor, method: str = "argmax", threshold: float = 0.5) -> set[tuple[int, int]]:
    """Word alignment links (source i, output j) from word weights A (T_words, S_words)."""
    if method == "argmax":
        return {(int(i), j) for j, i in enumerate(A.argmax(1).tolist())} if A.numel() else set()
    if method == "threshold":
        return {(int(i), int(j)) for j, i in A.ge(threshold).nonzero().tolist()}
    raise ValueError(f"unknown alignment method {method!r} (argmax or threshold)")


def pharaoh(pairs: set[tuple[int, int]]) -> str:
    """Links as a Pharaoh line: "0-0 1-2 ...", sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs))


def read_gold(line: str, one_based: bool = False, where: str = "gold") -> tuple[set, set]:
    """One line of gold links: "i-j" sure, "ipj" or "i?j" possible. Returns (sure, possible),
    possible including the sure links, 0-based."""
    sure, possible = set(), set()
    shift = 1 if one_based else 0
    for link in line.split():
        for sep in "-p?":
            i, found, j = link.partition(sep)
            if found and i.isdigit() and j.isdigit():
                break
        else:
            raise ValueError(f"{where}: {link!r} is not a link (i-j sure, ipj or i?j possible)")
        pair = (int(i) - shift, int(j) - shift)
        if min(pair) < 0:
            raise ValueError(f"{where}: {link!r} has index 0, but the links are 1-based (--one-based)")
        possible.add(pair)
        if sep == "-":
            sure.add(pair)
    return sure, possible


def alignment_error(predicted: list[set], sure: list[set], possible: list[set]) -> dict:
    """AER, precision and recall of predicted links against gold, summed over sentences."""
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(f"{len(predicted)} predicted alignments but {len(sure)} gold ones")
    A = sum(len(a) for a in predicted)
    S = sum(len(s) for s in sure)
    a_s = sum(len(a & s) for a, s in zip(predicted, sure, strict=True))
    a_p = sum(len(a & (p | s)) for a, s, p in zip(predicted, sure, possible, strict=True))
    return {
        "aer": 1 - (a_s + a_p) / (A + S) if A + S else 0.0,
        "precision": a_p / A if A else None,
        "recall": a_s / S if S else None,
        "links": A,
        "sure": S,
        "sentences": len(predicted),
    }


@torch.no_grad()
def forced_attention(
    translator, srcs: list[str], tgts: list[str]
) -> list[tuple[Tensor, list[str], list[str]]]:
    """The weights (T, S) of each given translation, teacher-forced (no search): one row per
    output piece (</s> left out) and one column per source piece the model read; with its
    source and output pieces."""
    model = translator.model
    if not isinstance(model, Seq2Seq) or not model.decoder.attends:
        raise ValueError("alignment needs one model that attends (not attention: none, not an ensemble)")
    src_ids = translator.source_ids(srcs)
    tgt_ids = [translator.tgt_tok.encode(t)[: translator.max_src_len] for t in tgts]
    out: list = [None] * len(srcs)
    order = sorted(range(len(srcs)), key=lambda i: -len(src_ids[i]))
    for start in range(0, len(order), translator.decode.batch_size):
        chunk = [i for i in order[start : start + translator.decode.batch_size] if src_ids[i]]
        if not chunk:
            continue
        src, src_len = pad([src_ids[i] for i in chunk])
        tgt_in, _ = pad([[BOS, *tgt_ids[i]] for i in chunk])
        device = translator.device
        with autocast(device, translator.precision):
            alpha = model(src.to(device), src_len.to(device), tgt_in.to(device)).alpha  # (B, T + 1, S)
        for b, i in enumerate(chunk):
            T, S = len(tgt_ids[i]), len(src_ids[i])
            out[i] = (
                alpha[b, :T, :S].float().cpu(),
                translator.src_tok.pieces(src_ids[i]),
                translator.tgt_tok.pieces(tgt_ids[i]),
            )
    for i, o in enumerate(out):
        if o is None:  # an empty source: nothing to align
            out[i] = (torch.zeros(len(tgt_ids[i]), 0), [], translator.tgt_tok.pieces(tgt_ids[i]))
    return out


def align(
    translator, srcs: list[str], tgts: list[str], method: str = "argmax", threshold: float = 0.5
) -> list[set[tuple[int, int]]]:
    """Word alignment links of each given sentence pair (lines split on spaces into words), from
    the model's attention along the given translation."""
    if len(srcs) != len(tgts):
        raise ValueError(f"{len(srcs)} source lines but {len(tgts)} target lines")
    out = []
    forced = forced_attention(translator, srcs, tgts)
    for n, (src, tgt, (alpha, src_pieces, tgt_pieces)) in enumerate(zip(srcs, tgts, forced, strict=True), 1):
        src_words, tgt_words = src.split(), tgt.split()
        if not src_words or not tgt_words:
            out.append(set())
            continue
        src_groups = groups_of_words(src_pieces, src_words)
        tgt_groups = groups_of_words(tgt_pieces, tgt_words)
        sides = (
            ("source", src_groups, src, src_pieces, translator.src_tok),
            ("target", tgt_groups, tgt, tgt_pieces, translator.tgt_tok),
        )
        for side, groups, text, pieces, tok in sides:
            if groups is None:
                whole = len(tok.encode(text))  # the line's pieces before a cut at max_src_len
                if whole > len([p for p in pieces if p != "</s>"]):
                    raise ValueError(
                        f"line {n}: its {side} is {whole:,} pieces, cut to the {translator.max_src_len} a "
                        "line is read to, so its words cannot all be aligned: split it, or align shorter ones"
                    )
                raise ValueError(
                    f"line {n}: the model's {side} pieces do not spell the words of the {side} line "
                    "(an unknown character, or text the tokenizer normalises)"
                )
        out.append(links(merge_groups(alpha, src_groups, tgt_groups), method, threshold))
    return out


def eflomal_links(
    srcs: list[str], tgts: list[str], train_srcs: list[str] = (), train_tgts: list[str] = ()
) -> list[set[tuple[int, int]]]:
    """Word links of a statistical aligner for the pairs srcs / tgts (words split on spaces):
    eflomal (Östling & Tiedemann 2016, `pip install eflomal`), an unsupervised IBM-style model
    learned on these pairs together with a training corpus, lowercased. Its forward links give
    each target word at most one source word, as argmax attention does. Its Gibbs samplers
    seed themselves from the system, so two runs differ slightly."""
    import logging
    import tempfile

    try:
        import eflomal
    except ImportError:
        raise ValueError("the statistical aligner needs eflomal: pip install 'lookback[align]'") from None
    if len(srcs) != len(tgts) or len(train_srcs) != len(train_tgts):
        raise ValueError("eflomal needs as many target lines as source lines")
    lines = lambda xs: [" ".join(x.lower().split()) + "\n" for x in xs]  # noqa: E731
    logging.getLogger("eflomal").setLevel(logging.WARNING)
    with tempfile.NamedTemporaryFile("r", suffix=".fwd", encoding="utf-8") as fwd:
        aligner = eflomal.Aligner()
        aligner.align(
            lines([*train_srcs, *srcs]), lines([*train_tgts, *tgts]), links_filename_fwd=fwd.name, quiet=True
        )
        found = Path(fwd.name).read_text(encoding="utf-8").splitlines()[len(train_srcs) :]
    return [
        {(int(i), int(j)) for i, _, j in (link.partition("-") for link in line.split())} for line in found
    ]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def format_error(r: dict, method: str) -> str:
    """alignment_error against gold links, as one line."""
    return (
        f"AER {_pct(r['aer'])}  precision {_pct(r['precision'])}  recall {_pct(r['recall'])}"
        f"  ({r['links']} links, {r['sure']} sure gold links, {r['sentences']} sentences, {method})"
    )


def format_agreement(r: dict, train_spec: str, pairs: int) -> str:
    """alignment_error against eflomal's links (an aligner, not gold), as one line."""
    return (
        f"agreement with eflomal's forward links (learned on {train_spec} and these {pairs} pairs; an "
        f"aligner, not gold): {_pct(r['precision'])}% of attention's links are eflomal's, "
        f"{_pct(r['recall'])}% of eflomal's are attention's, 1 - AER {_pct(1 - r['aer'])}"
    )
