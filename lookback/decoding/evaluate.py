"""Scoring translations with sacrebleu.

Two protocols, always labelled:
- sacreBLEU and chrF on detokenised, cased text (the reproducible standard;
  the signature says exactly how it was computed);
- the Multi30k protocol of published results: hypotheses and references
  prepared as the Multi30k repository's scripts/task1-tokenize.sh prepares its
  data (lowercase, Moses punctuation normalisation, Moses tokenisation with
  escaping), then BLEU with no further tokenisation or smoothing, as
  multi-bleu.perl computes it. Its own signature says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import sacrebleu
import sacremoses
import torch
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from ..data.batch import collate, token_batches
from ..model.seq2seq import Seq2Seq

BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, None))  # source words


@dataclass
class Scores:
    bleu: float
    chrf: float
    multi30k_bleu: float  # the protocol of published Multi30k results (multi30k_tokenize)
    bleu_signature: str
    chrf_signature: str
    multi30k_signature: str
    sentences: int
    length_ratio: float  # output length over reference length, in sacreBLEU's tokens (1: as long)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  length ratio {self.length_ratio:.3f}  "
            f"({self.sentences} sentences)\n"
            f"  sacreBLEU signature: {self.bleu_signature}\n"
            f"  chrF signature:      {self.chrf_signature}\n"
            f"Multi30k protocol (lowercased, Moses-normalised and -tokenised): {self.multi30k_bleu:.2f}\n"
            f"  signature: {self.multi30k_signature}"
        )


@lru_cache(maxsize=8)
def _moses(lang: str) -> tuple[MosesPunctNormalizer, MosesTokenizer]:
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def multi30k_tokenize(lines: list[str], lang: str) -> list[str]:
    """The text published Multi30k BLEU is computed on: the Multi30k repository's
    scripts/task1-tokenize.sh (lowercase.perl | normalize-punctuation.perl -l LANG |
    tokenizer.perl -l LANG, which escapes & " ' as &amp; &quot; &apos;), through sacremoses."""
    norm, tok = _moses(lang)
    return [tok.tokenize(norm.normalize(line.lower()), escape=True, return_str=True) for line in lines]


def score(hyps: list[str], refs: list[str], tgt_lang: str) -> Scores:
    """BLEU, chrF and Multi30k-protocol BLEU of detokenised hypotheses against references."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    multi_bleu = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)  # multi-bleu.perl
    m30k = multi_bleu.corpus_score(multi30k_tokenize(hyps, tgt_lang), [multi30k_tokenize(refs, tgt_lang)])
    prepared = f"lc+normalize-punctuation+tokenizer.perl:{tgt_lang}(sacremoses {sacremoses.__version__})"
    signatures = (
        str(bleu.get_signature()),
        str(chrf.get_signature()),
        f"{prepared}|{multi_bleu.get_signature()}",
    )
    return Scores(b.score, c.score, m30k.score, *signatures, len(hyps), b.sys_len / max(b.ref_len, 1))


def bucket_of(n_words: int) -> str:
    """The source-length bucket label of a sentence with n_words words, e.g. '11-20' or '61+'."""
    for lo, hi in BUCKETS:
        if hi is None or n_words <= hi:
            return f"{lo}-{hi}" if hi is not None else f"{lo}+"
    raise AssertionError("unreachable")


def group_by_length(srcs: list[str]) -> dict[str, list[int]]:
    """The indices of the sentences in each source-length bucket (words split on whitespace),
    buckets in order from short to long; empty buckets are left out."""
    groups: dict[str, list[int]] = {bucket_of(lo): [] for lo, _ in BUCKETS}
    for i, s in enumerate(srcs):
        groups[bucket_of(len(s.split()))].append(i)
    return {label: idx for label, idx in groups.items() if idx}


def bleu_by_length(srcs: list[str], hyps: list[str], refs: list[str]) -> dict[str, dict]:
    """sacreBLEU and the length ratio per source-length bucket, as in the notes' table."""
    if not len(srcs) == len(hyps) == len(refs):
        raise ValueError(f"{len(srcs)} sources, {len(hyps)} hypotheses and {len(refs)} references")
    return {
        label: bleu_and_length([hyps[i] for i in idx], [refs[i] for i in idx])
        for label, idx in group_by_length(srcs).items()
    }


def bleu_and_length(hyps: list[str], refs: list[str]) -> dict:
    """Sentences, sacreBLEU and the output-to-reference length ratio of one group of sentences."""
    b = sacrebleu.corpus_bleu(hyps, [refs])
    return {"sentences": len(hyps), "bleu": b.score, "length_ratio": b.sys_len / max(b.ref_len, 1)}


@torch.no_grad()
def validation_loss(model: Seq2Seq, pairs: list, max_tokens: int, device: torch.device) -> float:
    """Mean cross-entropy per target token of `model` on (source ids, target ids) pairs,
    in batches of `max_tokens`."""
    model.eval()
    total, tokens = 0.0, 0
    for idx in token_batches([(len(s), len(t)) for s, t in pairs], max_tokens):
        batch = collate([pairs[i] for i in idx]).to(device)
        total += float(model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out))
        tokens += batch.n_tokens
    return total / tokens


def format_by_length(by_length: dict[str, dict]) -> str:
    """bleu_by_length as text: a header, then one line per source-length bucket."""
    lines = ["by source length (words): sentences, BLEU, output/reference length"]
    for label, b in by_length.items():
        lines.append(f"  {label:>6}  {b['sentences']:5d}  {b['bleu']:6.2f}  {b['length_ratio']:.3f}")
    return "\n".join(lines)
