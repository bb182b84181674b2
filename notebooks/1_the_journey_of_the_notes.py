# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1. The journey of the notes, on real models
#
# The lecture notes go from words to attention in six steps: words become embeddings, an
# encoder reads them into states `h`, a decoder without attention has one fixed context `c`
# (the bottleneck), attention scores every `h_i` against the decoder state `s_t`, normalises
# the scores `e` into weights `alpha` and takes a fresh weighted sum `c_t` at every step. This
# notebook walks the same road with models trained here, on a laptop's CPU, in about five
# minutes, and shows every number inline.
#
# Run the cells from the top. Exercises close the notebook; their solutions are in
# `notebooks/solutions/`.

# %% [markdown]
# **On Colab or Binder**, this cell installs lookback from its repository (set `REPOSITORY` to
# the address you opened this notebook from). On your own machine, `pip install -e '.[notebooks]'`
# in a clone does it, and the cell does nothing.

# %%
import importlib.util
import subprocess
import sys

REPOSITORY = "https://github.com/OWNER/lookback"  # the repository this notebook came from
if importlib.util.find_spec("lookback") is None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", f"lookback[notebooks] @ git+{REPOSITORY}"], check=True
    )

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from lookback import Translator
from lookback.config import from_dict
from lookback.training.train import train

# training minutes of the English->French model (the main job trains 12), and of each model on
# the synthetic task; the tests run the notebooks on half these clocks (notebooks/conftest.py)
MINUTES = float(os.environ.get("LOOKBACK_MINUTES", 2))
SYNTH_MINUTES = float(os.environ.get("LOOKBACK_SYNTH_MINUTES", 1))
RUNS = Path("runs")  # beside this notebook


def trained(raw: dict) -> Translator:
    """Train the run that `raw` configures; run again, it continues the run, or says it is done."""
    cfg = from_dict(raw)
    return Translator.load(train(cfg, resume=(Path(cfg.train.run_dir) / "last.pt").exists()))


# %% [markdown]
# ## A translator to look into
#
# An English->French model of Multi30k (29,000 image captions) with additive attention: the
# recipe of the README's main job (`configs/quickstart.yaml`), for `MINUTES` minutes instead of
# 12. Multi30k is read from `$LOOKBACK_MULTI30K`, or downloaded once into `~/.cache/lookback`.
# Where `./quickstart.sh` has trained the main job (`MAIN_JOB`), that run is loaded and nothing
# trains here.

# %%
MAIN_JOB = Path("../runs/quickstart")
MULTI30K = {
    "data": {
        "src_lang": "en",
        "tgt_lang": "fr",
        "train": "multi30k:train",
        "valid": "multi30k:val",
        "test": "multi30k:test_2016_flickr",
    },
    "tokenizer": {"vocab_size": 8000},
    "model": {
        "attention": "additive",
        "layer_norm": True,
        "tie_embeddings": True,
        "readout": "bahdanau",
        "dropout": 0.2,
    },
    "train": {
        "run_dir": str(RUNS / "multi30k"),
        "max_tokens": 1000,
        "lr": 0.005,
        "warmup": 200,
        "label_smoothing": 0.1,
        "schedule": "cosine",
        "valid_every": 200,
        "time_limit": MINUTES,
    },
}
t = Translator.load(MAIN_JOB) if (MAIN_JOB / "best.pt").exists() else trained(MULTI30K)
t.translate(["A dog runs through the snow."], beam=5)[0]

# %% [markdown]
# ## 1. Words become vectors
#
# The notes' "cat is near dog": each piece of the vocabulary is a row of the embedding table,
# and words used alike end up near each other, by cosine similarity.

# %%
from lookback.explain.neighbours import neighbours

pieces, near = neighbours(t, "red", k=6)
near

# %% [markdown]
# ## 2. The encoder reads the sentence into states h
#
# A bidirectional GRU reads the pieces left to right and right to left; `h_i` joins both
# directions at piece `i`. So `h_i` is the word *in its sentence*, while its embedding is the
# word alone: the notes' "bank" at the bank, by the river bank.

# %%
from lookback.data.read import read_parallel
from lookback.explain.neighbours import contextual, format_contextual, states

corpus, _ = read_parallel("multi30k:train", "en", "fr")
h = states(t, ["A man sits on the bank of a river."])[0]
print(f"{len(corpus):,} training sentences; h of the example: {tuple(h.shape)} (pieces x numbers)")

river = contextual(t, "bank", "A man sits on the bank of a river.", corpus, k=4)
money = contextual(t, "bank", "A woman takes money out of the bank.", corpus, k=4)
print(format_contextual(river), "\n")
print(format_contextual(money))

# %% [markdown]
# "bank" has one embedding, so one list of static neighbours, the same in both sentences; its
# encoder states differ, and so do their nearest occurrences. Multi30k holds few banks; it holds
# many kinds of *playing*:

# %%
guitar = contextual(t, "playing", "A man is playing the guitar on stage.", corpus, k=4)
soccer = contextual(t, "playing", "Two boys are playing soccer in a field.", corpus, k=4)
print(format_contextual(guitar), "\n")
print(format_contextual(soccer))
assert guitar.static == soccer.static and river.static == money.static  # one embedding per word
assert [o.sentence for o in guitar.nearest] != [o.sentence for o in soccer.nearest]  # states by sentence

# %% [markdown]
# ## 3. Without attention: one fixed context, the bottleneck
#
# Without attention the decoder sees the source only through `c`, the encoder's last states:
# the same few hundred numbers for a sentence of 5 words or of 40. The cleanest test is a task
# with one right answer: reverse a sequence of 5 to 40 symbols. Two models that differ only in
# attention, trained `SYNTH_MINUTES` minute each:

# %%
from lookback.data.synth import sequence_accuracy, synth_corpus
from lookback.decoding.evaluate import group_by_length

data = synth_corpus(
    "reverse", RUNS / "reverse_data", (5, 40), seed=1, sizes={"train": 20000, "val": 200, "test": 400}
)


def synthetic(attention: str, name: str | None = None, minutes: float = SYNTH_MINUTES) -> dict:
    """The config of a small model of the reverse task (configs/synth_reverse.yaml's)."""
    return {
        "data": {
            "src_lang": "src",
            "tgt_lang": "tgt",
            "train": str(data["train"]),
            "valid": str(data["val"]),
            "test": str(data["test"]),
            "max_len": 200,
        },
        "tokenizer": {"kind": "word", "vocab_size": 200, "joint": False},
        "model": {
            "emb_size": 64,
            "hidden_size": 64,
            "dec_hidden_size": 128,
            "dropout": 0.0,
            "attention": attention,
            "attention_size": 64,
            "layer_norm": True,  # as the main job (additive, 1 min, 2-core EPYC: 99.2 BLEU, 89.0 without)
        },
        "train": {
            "run_dir": str(RUNS / f"reverse_{name or attention}"),
            "max_tokens": 4000,
            "lr": 0.003,
            "valid_every": 200,
            "time_limit": minutes,
            "max_epochs": 1000,
        },
        "decode": {"beam": 1},
    }


models = {name: trained(synthetic(name)) for name in ("none", "additive")}
test_src, test_ref = read_parallel(str(data["test"]), "src", "tgt")
groups = group_by_length(test_src)
accuracy = {}
for name, model in models.items():
    hyps = [o.text for o in model.translate(test_src, beam=1)]
    accuracy[name] = {
        b: sequence_accuracy([hyps[i] for i in idx], [test_ref[i] for i in idx]) for b, idx in groups.items()
    }
    print(f"{name:>8}:", "  ".join(f"{b} {a:.0f}%" for b, a in accuracy[name].items()))

fig, ax = plt.subplots(figsize=(5, 3))
for name, acc in accuracy.items():
    ax.plot(list(acc), list(acc.values()), marker="o", label=name)
ax.set(xlabel="source length (symbols)", ylabel="reversed exactly (%)", title="The bottleneck, measured")
ax.legend()
# %% [markdown]
# The notes' compression table, for the model without attention: its `c` keeps the same numbers
# whatever the length.

# %%
plain = models["none"]
c_size = plain.model.encode(torch.tensor([[5, 6, 7]]), torch.tensor([3])).c.size(-1)
emb = plain.config.model.emb_size
for b, idx in groups.items():
    n = sum(len(test_src[i].split()) for i in idx) / len(idx)
    print(f"{b:>6} symbols: {n * emb:6.0f} numbers in, {c_size} kept, {n * emb / c_size:4.1f} to 1")

# %% [markdown]
# ## 4. Attention, step by step: the notes' worked example, computed right
#
# The three steps of the notes, on their own numbers: (1) scores `e_i = s . h_i`, (2)
# `alpha = softmax(e)`, (3) `c = sum_i alpha_i h_i`, computed by the code the models use
# (`attention.DotScore` and `attention.attend`). The notes print weights that do not sum to 1;
# here is what they are.

# %%
from lookback.explain.trace import lecture

print(lecture())

# %% [markdown]
# ## 5. One translation, step by step
#
# `trace` replays a translation through the decoder and keeps, at every output token, the
# scores `e`, the weights `alpha`, the context `c` and the most probable next tokens, with the
# gradient of each source piece beside them. Open a step below; `.slider()` shows one step at a
# time where ipywidgets is installed.

# %%
from lookback.explain.trace import trace

tr = trace(t, "A little girl is playing with a red ball.")
tr

# %%
tr.slider()

# %% [markdown]
# ## 6. Heatmaps inline
#
# A translation shows its alignment matrix: a row per output piece, a column per source
# piece, each cell its weight `alpha` (hover a cell). Beam search's candidates show theirs.

# %%
t.translate_nbest(["Two men are sitting on a bench in the park."], beam=5, nbest=3)[0]

# %% [markdown]
# ## Exercises
#
# Each check runs your function on inputs of its own against the code the models use.
#
# 1. Step (2): write `weights(e, mask)`, the softmax of scores `e` (B, T, S) over the real source
#    tokens only (`mask` (B, S) is True at real ones); padding gets weight 0.
# 2. Step (3): write `context(alpha, h)`, the weighted sum `c_t = sum_i alpha_{t,i} h_i` for
#    `alpha` (B, T, S) and `h` (B, S, He).
# 3. The notes' first worked example ("chat" from "The cat sat", printed above): compute its
#    three weights by hand from `s` and the three `h_i`, and pass them as a list.

# %%
from lookback.exercises import check_context, check_lecture_weights, check_weights


def weights(e, mask):
    return torch.softmax(e, dim=-1)  # your answer: padding must get 0


def context(alpha, h):
    return alpha.sum(-1, keepdim=True) * h.mean(1, keepdim=True)  # your answer


try:
    check_weights(weights)
    check_context(context)
    check_lecture_weights([0.27, 0.63, 0.22])  # your answer
except AssertionError as wrong:
    print("not yet:", wrong)
