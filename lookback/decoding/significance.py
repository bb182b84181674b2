"""Is system B better than system A, or did the test set happen to favour it?

Two systems translate the same test set and their BLEU differs by d. sacreBLEU's
paired tests say how often a difference as large as d would come by chance, and
lookback uses them as sacreBLEU implements them (`sacrebleu.significance.PairedTest`):

- paired bootstrap resampling (Koehn 2004), `bs`: 1,000 test sets drawn from the
  real one's sentences with replacement, both systems scored on each draw. Each
  system's 95% confidence interval comes from its scores over the draws; p is
  the share of draws whose difference, centred on the draws' mean, exceeds d.
- approximate randomisation (Riezler & Maxwell 2005), `ar`: 10,000 shuffles that
  swap the two systems' outputs sentence by sentence at random; p is the share
  of shuffles whose difference is at least d. Under the null hypothesis the two
  systems are interchangeable, which is exactly what a shuffle assumes.

Both are paired: each sentence is compared with itself, so they see smaller
differences than two unpaired confidence intervals would. Neither says
anything about training noise: a second seed of the same system can differ
from the first by more than p < 0.05 allows. A study calls a difference a
difference only where it is significant *and* larger than its seeds' spread
(`is_difference`).

Seeded as sacreBLEU seeds them (SACREBLEU_SEED, 12345 unless set), so a
comparison gives the same p-values every time.
"""

from __future__ import annotations

import logging

import sacrebleu
import torch
from sacrebleu.significance import PairedTest

from ..device import free_memory

logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # not a line per metric and test on stderr

ALPHA = 0.05  # the significance level: p below it is a significant difference


def paired_test(
    a: list[str],
    b: list[str],
    refs: list[str],
    names: tuple[str, str] = ("A", "B"),
    bs_samples: int = 1000,
    ar_trials: int = 10000,
) -> dict:
    """BLEU and chrF of outputs `a` and `b` of the same sources against `refs`, with each one's
    95% bootstrap confidence interval, B - A, and the p-values of both paired tests.

    Returns a dict: systems {name: {bleu, bleu_mean, bleu_ci, chrf, chrf_mean, chrf_ci}},
    difference {bleu, chrf} (B - A), p {bs: {bleu, chrf}, ar: {bleu, chrf}}, sentences,
    signatures {bleu, chrf} (sacreBLEU's, with the test's seed and sample counts).
    """
    if not len(a) == len(b) == len(refs):
        raise ValueError(f"{len(a)} outputs of {names[0]}, {len(b)} of {names[1]} and {len(refs)} references")
    if not refs:
        raise ValueError("no sentences to compare")
    check_room(len(refs), {"bs_samples": bs_samples, "ar_trials": ar_trials})
    systems = [(names[0], a), (names[1], b)]
    metrics = lambda: {"BLEU": sacrebleu.metrics.BLEU(), "chrF": sacrebleu.metrics.CHRF()}  # noqa: E731
    out: dict = {"systems": {n: {} for n in names}, "difference": {}, "p": {}, "sentences": len(refs)}
    for kind, n in (("bs", bs_samples), ("ar", ar_trials)):
        # ar's confidence intervals would be bootstrap ones again: bs gives them
        signatures, results = PairedTest(systems, metrics(), [refs], test_type=kind, n_samples=n)()
        out["p"][kind] = {}
        named = [m for m in results if m != "System"]  # the scores' own names: BLEU, chrF2
        for key, metric in zip(("bleu", "chrf"), named, strict=True):
            base, other = results[metric]
            out["p"][kind][key] = float(other.p_value)  # sacreBLEU's are numpy numbers, not JSON's
            if kind == "bs":
                for name, r in zip(names, (base, other), strict=True):
                    out["systems"][name].update(
                        {key: r.score, f"{key}_mean": float(r.mean), f"{key}_ci": float(r.ci)}
                    )
                out["difference"][key] = other.score - base.score
                out.setdefault("signatures", {})[key] = str(signatures[metric])
    return out


def bytes_needed(sentences: int, bs_samples: int, ar_trials: int) -> tuple[int, int]:
    """About the peak bytes of sacreBLEU's two tests: the bootstrap holds every draw's sentences'
    statistics at once (an index and up to chrF's 18 float32 numbers a sentence, about 81 bytes),
    the randomisation a swap mask and its selections (about 11 bytes a sentence) and each trial's
    sums. Measured (peak RSS): on 1,014 sentences 80 bytes a draw and sentence, 10.6 a trial and
    sentence; on 2 sentences 1,529 bytes a draw, 631 a trial."""
    return bs_samples * (81 * sentences + 2000), ar_trials * (11 * sentences + 700)


def check_room(sentences: int, counts: dict[str, int], free: int | None = None) -> None:
    """A one-line ValueError when a test would need more memory than is `free` (None: this
    machine's), naming its count as `counts` spells it ({name: bs_samples, name: ar_trials}) and
    how many fit."""
    free = free_memory(torch.device("cpu")) if free is None else free
    needs = bytes_needed(sentences, *counts.values())
    for (name, n), need in zip(counts.items(), needs, strict=True):
        if need > free:
            raise ValueError(
                f"{name} {n:,}: on {sentences:,} sentences the test needs about {need / 2**30:,.1f} GiB, "
                f"more than the {free / 2**30:,.1f} GiB free: at most {n * free // need:,} fit"
            )


def is_difference(p: float, difference: float, spread: float = 0.0) -> bool:
    """A difference worth the name: significant (p < ALPHA) and larger than `spread`, what training
    alone moves a score by (e.g. the range of the seeds' scores; 0 with one seed)."""
    return p < ALPHA and abs(difference) > spread


def report(result: dict) -> str:
    """paired_test's result as the lines `lookback compare` prints."""
    (a, sa), (b, sb) = result["systems"].items()
    width = max(len(a), len(b), 6)
    lines = [f"{result['sentences']} sentences; mean and 95% confidence interval from paired bootstrap"]
    for name, s in ((a, sa), (b, sb)):
        lines.append(
            f"  {name:<{width}}  BLEU {s['bleu']:6.2f} ({s['bleu_mean']:.2f} +- {s['bleu_ci']:.2f})"
            f"   chrF {s['chrf']:6.2f} ({s['chrf_mean']:.2f} +- {s['chrf_ci']:.2f})"
        )
    for key, label in (("bleu", "BLEU"), ("chrf", "chrF")):
        d, p = result["difference"][key], result["p"]
        verdict = "significant" if is_difference(min(p["bs"][key], p["ar"][key]), d) else "not significant"
        if (p["bs"][key] < ALPHA) != (p["ar"][key] < ALPHA):
            verdict = "significant by one test only"
        lines.append(
            f"  {b} - {a}: {label} {d:+.2f}   p = {p['bs'][key]:.4f} (bootstrap), "
            f"{p['ar'][key]:.4f} (randomisation): {verdict} at {ALPHA}"
        )
    lines.append(f"  signature: {result['signatures']['bleu']}")
    return "\n".join(lines)


def family(run: str) -> str:
    """The model a study run belongs to: 'dot#2' (seed 2 of dot) -> 'dot'."""
    return run.split("#", 1)[0]


def _spread(scores: list[float]) -> dict:
    return {
        "seeds": len(scores),
        "mean": sum(scores) / len(scores),
        "min": min(scores),
        "max": max(scores),
        "range": max(scores) - min(scores),
    }


def compare_runs(
    refs: list[str],
    outputs: dict[str, list[str]],
    against: dict[str, list[str]],
    groups: dict[str, list[int]] | None = None,
    **test: int,
) -> dict:
    """Models, each trained with one or more seeds, compared as a study states it (lookback study).

    Every seed takes part. Two models with seeds each are tested seed against seed (the first
    against the first, ...); a model with one seed against every seed of the other; the larger
    p-value of all those tests, and of both tests, decides. What training alone moves a score
    by is the larger of the two models' seed ranges, and for a model of one seed, whose own range
    is not known, the largest range of any model with seeds in the study (not the reference's
    alone: one model's seeds can move it much more than another's).

    Args:
        refs: the references of the test set.
        outputs: run name -> its outputs; runs 'M', 'M#2', 'M#3' are model M's seeds.
        against: model -> the models it is tested against.
        groups: label -> sentence indices (e.g. evaluate.group_by_length), besides 'all'.
        test: bs_samples, ar_trials of `paired_test`.

    Returns:
        models: model -> label -> BLEU over its seeds (seeds, mean, min, max, range);
        pairs: one row per model, model tested against, and label: the first seeds' BLEU, the
        largest p-value of each test over the seed pairings (and how many), the difference of
        the means over seeds, the spread it must exceed, and the verdict: 'better' or 'worse'
        where `is_difference` says so with the larger p-value of the two tests, else
        'no difference'.
    """
    groups = {"all": list(range(len(refs))), **(groups or {})}
    runs: dict[str, list[str]] = {}
    for name in outputs:
        runs.setdefault(family(name), []).append(name)
    models = {}
    for model, names in runs.items():
        models[model] = {}
        for label, idx in groups.items():
            picked = [refs[i] for i in idx]
            scores = [sacrebleu.corpus_bleu([outputs[n][i] for i in idx], [picked]).score for n in names]
            models[model][label] = _spread(scores)
    seeded = {label: [models[m][label]["range"] for m in runs if len(runs[m]) > 1] for label in groups}
    pairs = []
    for model, others in against.items():
        for other in others:
            if other == model:
                continue
            for label, idx in groups.items():
                pick, names = [refs[i] for i in idx], (other, model)
                seen = {run: [outputs[run][i] for i in idx] for run in (*runs[other], *runs[model])}
                tests = [
                    paired_test(seen[o], seen[m], pick, names, **test)
                    for o, m in seed_pairings(runs[other], runs[model])
                ]
                p_bs = max(r["p"]["bs"]["bleu"] for r in tests)
                p_ar = max(r["p"]["ar"]["bleu"] for r in tests)
                mine, theirs = models[model][label], models[other][label]
                unknown = max(seeded[label], default=0.0)  # a one-seed model's own range
                spread = max(
                    mine["range"] if mine["seeds"] > 1 else unknown,
                    theirs["range"] if theirs["seeds"] > 1 else unknown,
                )
                d = mine["mean"] - theirs["mean"]
                differs = is_difference(max(p_bs, p_ar), d, spread)
                verdict = ("better" if d > 0 else "worse") if differs else "no difference"
                pairs.append(
                    {
                        "model": model,
                        "against": other,
                        "bucket": label,
                        "sentences": len(idx),
                        "bleu": tests[0]["systems"][model]["bleu"],
                        "against_bleu": tests[0]["systems"][other]["bleu"],
                        "pairings": len(tests),
                        "p_bootstrap": p_bs,
                        "p_randomisation": p_ar,
                        "mean_difference": d,
                        "seed_range": spread,
                        "verdict": verdict,
                    }
                )
    return {"models": models, "pairs": pairs}


def seed_pairings(a: list[str], b: list[str]) -> list[tuple[str, str]]:
    """The runs tested against each other: seed by seed where both have seeds, else the one run
    against every run of the other."""
    if len(a) > 1 and len(b) > 1:
        return list(zip(a, b, strict=False))
    return [(x, y) for x in a for y in b]
