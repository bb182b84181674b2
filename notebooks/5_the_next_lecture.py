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
# # 5. The next lecture: attention only
#
# The notes end on "Next week: remove encoder/decoder RNNs, use ONLY attention -> Transformers!"
# This notebook takes that step on a real model. The attention-only model (Vaswani et al. 2017)
# is made of the notes' three steps and nothing else that is new: scores `e`, weights `alpha`
# by softmax, a context `c` as their weighted sum. What changes is *who attends to whom*:
#
# - **self-attention**: each source word attends to every source word, so that `h_i` is the
#   word in its sentence without an RNN reading it left to right;
# - **masked self-attention** in the decoder: each target step attends to the steps before it;
# - **attention over the source**: the decoder's queries and the encoder's states, as in the
#   notes, but in several heads at once, in every layer.
#
# Below: self-attention computed by hand and checked against the model, the heads side by side,
# and one sentence through the RNN and the attention-only model in one picture.

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
import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from lookback import Translator
from lookback.config import load_config
from lookback.training.train import train

# training minutes of each English->French model (the shipped configs train 12); the tests run 1
MINUTES = float(os.environ.get("LOOKBACK_MINUTES", 2))
RUNS = Path("runs")  # beside this notebook


def trained(name: str, run: str) -> Translator:
    """Train the shipped config `name` for MINUTES into RUNS/run; run again, it loads the run."""
    sets = [f"train.run_dir={RUNS / run}", f"train.time_limit={MINUTES}", "train.valid_every=200"]
    cfg = load_config(name, sets)
    return Translator.load(train(cfg, resume=(Path(cfg.train.run_dir) / "last.pt").exists()))


# %% [markdown]
# ## Two translators of the same data and clock
#
# The RNN with additive attention of the main job (`configs/quickstart.yaml`; notebook 1
# trained it into the same run, which is then loaded) and the attention-only model of
# `configs/multi30k_en_fr_transformer.yaml`: two layers of self-attention in the encoder, two
# in the decoder, four heads each, about as many parameters. Both train `MINUTES` minutes here;
# `docs/study.md` compares them at the full 12 minutes, three seeds each.

# %%
rnn = trained("quickstart", "multi30k")
tf = trained("multi30k_en_fr_transformer", "multi30k_transformer")
for name, t in (("RNN", rnn), ("attention only", tf)):
    m = t.config.model
    size = sum(p.numel() for p in t.model.parameters())
    print(f"{name:15} encoder {m.encoder:11} decoder {m.decoder:11} {size / 1e6:.2f}M parameters")

sentence = "A little girl in a pink dress is climbing the stairs."
tf.translate([sentence], beam=5)[0]

# %% [markdown]
# ## 1. Self-attention by hand
#
# The encoder's first layer, for one sentence. Its input is each piece's embedding, scaled by
# `sqrt(d)`, plus the sines and cosines of its position: an RNN knows the order because it reads
# in order; attention sees a set, so the order is written into the vectors (Vaswani et al. 3.5).
#
#     PE(pos, 2i) = sin(pos / 10000^(2i/d)),   PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
#
# Then the notes' three steps, with the sentence attending to itself. Each head `i` has its own
# projections of the same states: queries `q = W^Q_i x`, keys `k = W^K_i x`, values `v = W^V_i x`.
#
#     (1) e_ij     = q_i . k_j / sqrt(d_k)       every word scores every word
#     (2) alpha_ij = softmax_j(e_ij)
#     (3) c_i      = sum_j alpha_ij v_j          and the heads' c joined, through W^O

# %%
from lookback.model.transformer import positions

model = tf.model
ids = tf.source_ids([sentence])[0]
src = torch.tensor([ids])  # (1, S)
pieces = tf.src_tok.pieces(ids)
S, d = len(ids), model.encoder.out_size
layer = model.encoder.layers[0]
attn = layer.self_attn
H, d_k = attn.heads, attn.d_k
print(f"{S} source pieces, d = {d}, {H} heads of d_k = {d_k}")

with torch.no_grad():
    x = model.encoder.embed(src)[0] * math.sqrt(d) + positions(0, S, d)  # (S, d)
    x = layer.sub.input(x, 0)  # the layer norm before the sub-layer (pre-norm)
    q = attn.W_q(x).view(S, H, d_k).transpose(0, 1)  # (H, S, d_k): every head's queries
    k, v = attn.W_kv(x).view(S, 2, H, d_k).permute(1, 2, 0, 3)  # (H, S, d_k) each
    e = q @ k.transpose(1, 2) / math.sqrt(d_k)  # (1) (H, S, S)
    alpha = torch.softmax(e, dim=-1)  # (2) (H, S, S), each row sums to 1
    c = alpha @ v  # (3) (H, S, d_k)
    c = attn.W_o(c.transpose(0, 1).reshape(S, H * d_k))  # the heads joined: (S, d)

    # the model's own numbers for the same sentence
    enc = model.encode(src, torch.tensor([S]))
    theirs = enc.self_alpha[0, 0]  # (H, S, S): layer 1's weights, every head
    own_c = attn(x.unsqueeze(0), attn.keys(x.unsqueeze(0)), enc.src_mask)[0][0]
torch.testing.assert_close(alpha, theirs)
torch.testing.assert_close(c, own_c)
print("alpha and c by hand are the model's: max difference", float((alpha - theirs).abs().max()))

# %% [markdown]
# ## 2. The heads side by side
#
# Each head is an attention of its own, with its own projections, so each can look for
# something else. Rows: the piece that attends; columns: the piece attended to. The first
# layer's four heads, then the last layer's:

# %%
L = len(model.encoder.layers)
fig, axes = plt.subplots(L, H, figsize=(3.2 * H, 3.2 * L), squeeze=False)
for i in range(L):
    for j in range(H):
        ax = axes[i, j]
        ax.imshow(enc.self_alpha[0, i, j].float(), cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"layer {i + 1}, head {j + 1}", fontsize=9)
        ax.set_xticks(range(S), pieces, rotation=90, fontsize=7)
        ax.set_yticks(range(S), pieces, fontsize=7)
fig.suptitle("encoder self-attention")
fig.tight_layout()

# %% [markdown]
# And the decoder's attention over the source, the notes' alignment, in every layer and head
# (`trace` replays the translation step by step; `Step.heads` holds each layer's and head's
# weights over the source). The explorer (`lookback serve`) draws the same strips.

# %%
from lookback.explain.trace import trace

tr = trace(tf, sentence, beam=5, gradients=False)
heads = torch.tensor([st.heads for st in tr.steps])  # (T, L, H, S)
targets = [st.token for st in tr.steps]
fig, axes = plt.subplots(L, H, figsize=(3.2 * H, 3.4 * L), squeeze=False)
for i in range(L):
    for j in range(H):
        ax = axes[i, j]
        ax.imshow(heads[:, i, j], cmap="Greens", vmin=0, vmax=1)
        ax.set_title(f"layer {i + 1}, head {j + 1}", fontsize=9)
        ax.set_xticks(range(S), tr.src_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(targets)), targets, fontsize=7)
fig.suptitle("decoder attention over the source")
fig.tight_layout()

# %% [markdown]
# ## 3. The same sentence through the RNN and the attention-only model
#
# The RNN's alpha (one attention, at each step) beside the attention-only model's (its last
# layer's heads averaged, which is what `Translation.attention` holds for it):

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 5))
both = {"RNN, additive attention": rnn, "attention only, last layer": tf}
for ax, (name, t) in zip(axes, both.items(), strict=True):
    out = t.translate([sentence], beam=5)[0]
    ax.imshow(out.attention.float(), cmap="Blues", vmin=0, vmax=1)
    ax.set_title(f"{name}\n{out.text}", fontsize=9)
    ax.set_xticks(range(len(out.src_tokens)), out.src_tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(len(out.tokens)), out.tokens, fontsize=8)
fig.tight_layout()

# %% [markdown]
# The RNN's alignment is one soft diagonal: its `h_i` already knows the words around `i`, and
# its attention picks where to read. The attention-only model spreads the alignment over layers
# and heads, and its last layer's mean need not be the sharpest of them: "which word was
# translated from which" is one head's answer at best.
#
# Two minutes are not a fair clock for it. In the same updates the attention-only model learns
# less (on a 2-core Xeon, 14 validation BLEU after 2 minutes against the RNN's 34), and a model
# that has not yet learned where it is in the sentence may repeat a word, its attention stuck on
# one source piece. `docs/study.md` compares them after the main job's 12 minutes, with three
# seeds each, by sentence length and by speed.

# %% [markdown]
# ## Exercises
#
# 1. Write `future_mask(T)`: the (T, T) boolean mask of the decoder's self-attention, True where
#    target step `t` may read position `j` (itself and the steps before it, never a later one).
# 2. Write `positions(T, d)`: the (T, d) sinusoidal position encodings above (d even).

# %%
from lookback.exercises import check_future_mask, check_positions


def future_mask(T):
    return torch.ones(T, T, dtype=torch.bool)  # your answer: no step may read ahead


def positions_by_hand(T, d):
    pos = torch.arange(T).unsqueeze(1).float()  # (T, 1)
    return torch.sin(pos / 10000 ** (torch.arange(d) / d))  # your answer: which i, sin or cos?


for check, answer in ((check_future_mask, future_mask), (check_positions, positions_by_hand)):
    try:
        check(answer)
    except AssertionError as wrong:
        print(f"{answer.__name__}, not yet:", wrong)
