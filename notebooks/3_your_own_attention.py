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
# # 3. Your own attention
#
# The notes give three scores, dot, general and additive; papers give many more. In lookback a
# score is a small module with two methods, and `lookback.register_score` makes its name a value
# of `model.attention`: the config accepts it, training trains it, and translation, `explain`,
# the plots and the explorer show it. Here a score in ten lines, trained on the reverse task of
# notebook 1 and compared with additive attention. Exercises close the notebook; their
# solutions are in `notebooks/solutions/`.

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
import torch.nn.functional as F
from torch import nn

import lookback
from lookback import Translator
from lookback.config import from_dict
from lookback.data.read import read_parallel
from lookback.data.synth import sequence_accuracy, synth_corpus
from lookback.decoding.evaluate import group_by_length
from lookback.training.train import train

SYNTH_MINUTES = float(os.environ.get("LOOKBACK_SYNTH_MINUTES", 1))  # training minutes of each model
RUNS = Path("runs")  # beside this notebook

# %% [markdown]
# ## A score in ten lines
#
# Graves et al. (2014) address memory by content: the cosine of a key and each memory row,
# sharpened by a learned strength. As an attention score, with a learned `W` that brings `h`
# to the size of `s`:
#
#     e_{t,i} = g cos(s_t, W h_i)
#
# `keys(h)` runs once per sentence (what depends on the encoder alone); `forward(s, keys)` runs
# at every decoder step and returns the scores `e` of shape (B, T, S). Normalising them
# (softmax) and the weighted sum are the same for every score (`attention.attend`).


# %%
class CosineScore(lookback.Score):
    """e_{t,i} = g cos(s_t, W h_i): only the angle counts; g sets how sharp the weights get."""

    @classmethod
    def build(cls, dec_size, enc_size, cfg):
        return cls(dec_size, enc_size)

    def __init__(self, dec_size, enc_size):
        super().__init__()
        self.W = nn.Linear(enc_size, dec_size, bias=False)
        self.g = nn.Parameter(torch.tensor(5.0))

    def keys(self, h):  # (B, S, He) -> (B, S, D), unit length
        return F.normalize(self.W(h), dim=-1)

    def forward(self, s, keys, coverage=None):  # (B, T, D), (B, S, D) -> (B, T, S)
        return self.g * F.normalize(s, dim=-1) @ keys.transpose(1, 2)


lookback.register_score("cosine", CosineScore)

# %% [markdown]
# The config now accepts `model.attention: cosine`, and only names it knows:

# %%
from lookback.errors import ConfigError

print(from_dict({"model": {"attention": "cosine"}}).model.attention)
try:
    from_dict({"model": {"attention": "cosin"}})
except ConfigError as error:
    print(error)

# %% [markdown]
# ## Trained beside additive attention
#
# The reverse task of notebook 1: a sequence of 5 to 40 symbols, reversed. Each model trains for
# `SYNTH_MINUTES` minute (notebook 1 may have trained the additive one already: it is loaded).

# %%
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


def trained(raw: dict) -> Translator:
    """Train the run that `raw` configures; run again, it continues the run, or says it is done."""
    cfg = from_dict(raw)
    return Translator.load(train(cfg, resume=(Path(cfg.train.run_dir) / "last.pt").exists()))


models = {name: trained(synthetic(name)) for name in ("additive", "cosine")}
test_src, test_ref = read_parallel(str(data["test"]), "src", "tgt")
groups = group_by_length(test_src)
fig, ax = plt.subplots(figsize=(5, 3))
for name, model in models.items():
    hyps = [o.text for o in model.translate(test_src, beam=1)]
    acc = {
        b: sequence_accuracy([hyps[i] for i in idx], [test_ref[i] for i in idx]) for b, idx in groups.items()
    }
    print(f"{name:>8}:", "  ".join(f"{b} {a:.0f}%" for b, a in acc.items()))
    ax.plot(list(acc), list(acc.values()), marker="o", label=name)
ax.set(xlabel="source length (symbols)", ylabel="reversed exactly (%)")
ax.legend()
# %% [markdown]
# ## Its heatmap beside additive's
#
# Reversing has one right alignment, the anti-diagonal: output symbol t looks at source symbol
# S - t. Each heatmap shows how close each score came.

# %%
from lookback.display import HTML

sentence = test_src[0]
outs = {name: model.translate([sentence])[0] for name, model in models.items()}
HTML(
    '<div style="display: flex; gap: 2rem; flex-wrap: wrap">'
    + "".join(f"<div><h4>{name}</h4>{out._repr_html_()}</div>" for name, out in outs.items())
    + "</div>"
)

# %% [markdown]
# ## In explain and in the explorer
#
# `trace` reads the new score's `e` and `alpha` like any other's:

# %%
from lookback.explain.trace import trace

trace(models["cosine"], sentence, gradients=False)

# %% [markdown]
# The explorer's API, in this process (where the score is registered):

# %%
from fastapi.testclient import TestClient

from lookback.serve.app import create_app

client = TestClient(
    create_app([f"cosine={RUNS / 'reverse_cosine'}", f"additive={RUNS / 'reverse_additive'}"])
)
for result in client.post("/api/translate", json={"text": sentence, "beam": 1}).json()["results"]:
    print(result["model"], result["attention"], result["translation"][:60])

# %% [markdown]
# From a terminal, a command learns of the score from the file that registers it: put the class
# and its `register_score` line in `cosine_score.py`, then
#
#     lookback --plugin cosine_score.py serve notebooks/runs/reverse_cosine notebooks/runs/reverse_additive
#     lookback --plugin cosine_score.py explain notebooks/runs/reverse_cosine "s3 s14 s7"
#
# and a config file may name `model.attention: cosine` for `lookback --plugin cosine_score.py train`.

# %% [markdown]
# ## Exercises
#
# `check_score` builds your score for `s` of 6 numbers and `h` of 4, and checks the shape of
# `e`, that `e_{t,i}` depends on `s_t` and `h_i` and on nothing else, that each sentence of a
# batch is scored by itself, and that every parameter learns.
#
# 1. Luong's *concat* score (Luong et al. 2015, eq. 8): `e_{t,i} = v . tanh(W [s_t; h_i])`,
#    with `W` of `attention_size` rows (`cfg.attention_size`).
# 2. *General with a temperature*: `e_{t,i} = (s_t W h_i) / tau`, with `tau = exp(log_tau)`
#    learned, starting at 1.
#
# Then register yours, train it on the reverse task with `synthetic(...)` and `trained(...)`,
# and add it to the plot above.

# %%
from lookback.exercises import check_score


class ConcatScore(lookback.Score):
    """Your answer to 1."""

    def forward(self, s, keys, coverage=None):
        return s.sum(-1, keepdim=True).expand(*s.shape[:2], keys.size(1))


class TemperedGeneral(lookback.Score):
    """Your answer to 2."""

    def forward(self, s, keys, coverage=None):
        return torch.zeros(s.size(0), s.size(1), keys.size(1))


for answer in (ConcatScore, TemperedGeneral):
    try:
        check_score(answer)
    except AssertionError as wrong:
        print(f"{answer.__name__}, not yet:", wrong)
