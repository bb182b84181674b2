"""Attention only: the Transformer's encoder and decoder (Vaswani et al. 2017), from lookback's parts.

The notes' next lecture removes the RNNs and keeps only attention. Every
attention here is the notes' three steps, with the scaled-dot score and the
one masked `attend` of attention.py, in H heads (Vaswani et al. 3.2):

    q^i_t = W^Q_i s_t,  k^i_j = W^K_i h_j,  v^i_j = W^V_i h_j    head i's projections, d_k = A / H
    (1) e^i_{t,j}     = q^i_t . k^i_j / sqrt(d_k)               ScaledDotScore
    (2) alpha^i_{t,j} = softmax_j(e^i_{t,j})                     attend: padding, and in the decoder's
    (3) c^i_t         = sum_j alpha^i_{t,j} v^i_j                         self-attention the future, masked
        c_t           = W^O [c^1_t; ...; c^H_t]

Self-attention reads its own layer's states (h = s); the decoder's attention
over the source reads the encoder's states h, its keys and values computed
once per sentence (EncoderOutput.keys). Each layer (3.1, 3.3):

    encoder:  h <- h + SelfAttn(h);   h <- h + FFN(h)
    decoder:  s <- s + SelfAttn(s_t, s_<=t);   s <- s + Attn(s, h);   s <- s + FFN(s)
    FFN(x) = W_2 max(0, W_1 x + b_1) + b_2

with a layer norm at each sub-layer: LayerNorm(x + Sublayer(x)) as the paper
writes it (`model.norm_position: post`), or x + Sublayer(LayerNorm(x)) and
one last norm on top of the stack (`pre`: Wang et al. 2019, Xiong et al.
2020; it trains without the long warm-up that post-norm needs, which a short
clock on small data cannot afford). Dropout on each sub-layer's output before
the sum, and on the embeddings plus positions (5.4). Positions are sines and
cosines of each token's index (3.5), added to embeddings scaled by sqrt(d) (3.4).

The decoder's state carries every layer's keys and values of the steps so far
(DecoderState.cache), so that a search step computes one position, not the
whole prefix again.

Legend: B batch (sentences), R rows (B, or K beams per sentence), S source length,
T target steps computed now, P target positions so far (cached + T), d model size,
A all heads' attention size, H heads, L layers, V target vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..config import CHECKS, Config, ModelConfig
from ..data.tokenizer import PAD
from .attention import ScaledDotScore, attend
from .decoder import SOFT, DecoderOutput, DecoderState, Look
from .dropout import Dropout, drop_words
from .encoder import EncoderOutput

Change = Callable[[Tensor, Tensor], Tensor]  # alpha, src_mask -> the weights to use instead


def positions(start: int, T: int, d: int, device: torch.device | None = None) -> Tensor:
    """The sinusoidal encodings of positions start .. start + T - 1 (Vaswani et al. 3.5): (T, d).

    PE(pos, 2i) = sin(pos / 10000^(2i / d)),  PE(pos, 2i + 1) = cos(pos / 10000^(2i / d))."""
    pos = torch.arange(start, start + T, device=device, dtype=torch.float).unsqueeze(1)  # (T, 1)
    angle = pos / 10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float) / d)  # (T, ceil(d/2))
    pe = torch.empty(T, d, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe


def future_mask(past: int, T: int, device: torch.device | None = None) -> Tensor:
    """Which positions each of T new target steps may see, after `past` cached ones: (1, T, P),
    True where step t reads position j <= past + t (the decoder must not read ahead)."""
    j = torch.arange(past + T, device=device)
    t = torch.arange(T, device=device).unsqueeze(1) + past
    return (j <= t).unsqueeze(0)


def glorot(*linears: nn.Linear, parts: int = 1) -> None:
    """Glorot & Bengio's (2010) uniform initialisation of each layer's weight, `parts` matrices
    side by side along its outputs each on its own, with zero biases, as fairseq's Transformer
    starts (tensor2tensor's unit-scaling uniform has the same variance on square layers). With
    PyTorch's default for nn.Linear, a third of this variance, the attention over the source
    stayed near uniform for the first few hundred updates, then collapsed onto the wrong words,
    and the model never took off on long synthetic sentences (docs/lab/transformer.md, 2026-12-04)."""
    for linear in linears:
        for w in linear.weight.data.chunk(parts, 0):
            nn.init.xavier_uniform_(w)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 3.2.2) from the notes' steps: each head's scores by
    the scaled-dot score, weights and contexts by the one masked `attend`, heads along the batch."""

    def __init__(self, query_size: int, memory_size: int, attention_size: int, heads: int, normalizer: str):
        super().__init__()
        self.heads, self.d_k = heads, attention_size // heads
        self.W_q = nn.Linear(query_size, attention_size)  # every head's W^Q_i, side by side
        self.W_kv = nn.Linear(memory_size, 2 * attention_size)  # W^K_i and W^V_i
        self.W_o = nn.Linear(attention_size, query_size)  # W^O
        glorot(self.W_q, self.W_o)
        glorot(self.W_kv, parts=2)  # W^K and W^V each as its own matrix
        self.score = ScaledDotScore()
        self.normalizer = normalizer  # step (2): softmax, or model.normalizer's sparsemax or entmax15

    def keys(self, h: Tensor) -> Tensor:
        """Every head's keys and values of the states h (B, S, *): (B, S, 2A)."""
        return self.W_kv(h)

    def forward(
        self, s: Tensor, kv: Tensor, mask: Tensor, top_k: int = 0, change: Change | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries s (B, Q, d) attend over keys and values kv (B, S, 2A) from `keys`.

        mask: (B, S) True at real tokens, or (1, Q, S) True where a query may look.
        top_k: keep each head's k largest weights (hard attention at inference; 0: all).
        change: alpha (B, H*Q, S), mask (B, S) -> the weights to use instead (a counterfactual,
            which sees every head of a sentence as more queries of it, as in MultiHeadScore).
        Returns c (B, Q, d) and each head's e and alpha (B, H, Q, S)."""
        (B, Q, _), S, H = s.shape, kv.size(1), self.heads
        q = self.W_q(s).view(B, Q, H, self.d_k).transpose(1, 2).reshape(B * H, Q, self.d_k)
        k, v = kv.reshape(B, S, 2, H, self.d_k).permute(2, 0, 3, 1, 4).reshape(2, B * H, S, self.d_k)
        e = self.score(q, k)  # (1) (B*H, Q, S)
        transform = None
        if change is not None:  # heads along the queries and back: (B*H, Q, S) <-> (B, H*Q, S)
            transform = lambda alpha, _: change(alpha.reshape(B, H * Q, S), mask).reshape(B * H, Q, S)  # noqa: E731
        per_head = mask.repeat_interleave(H, 0) if mask.size(0) > 1 else mask  # each sentence's, per head
        c, alpha = attend(e, v, per_head, self.normalizer, top_k, transform=transform)  # (2), (3)
        c = c.view(B, H, Q, self.d_k).transpose(1, 2).reshape(B, Q, H * self.d_k)  # [c^1; ...; c^H]
        return self.W_o(c), e.view(B, H, Q, S), alpha.view(B, H, Q, S)


class FeedForward(nn.Sequential):
    """FFN(x) = W_2 max(0, W_1 x + b_1) + b_2, at each position alike (Vaswani et al. 3.3)."""

    def __init__(self, d: int, ff_size: int, dropout: float):
        super().__init__(nn.Linear(d, ff_size), nn.ReLU(), Dropout(dropout), nn.Linear(ff_size, d))
        glorot(self[0], self[3])


class Sublayers(nn.Module):
    """A layer's residual sub-layers, each with its layer norm (Vaswani et al. 3.1, 5.4):
    post: x <- LayerNorm(x + Dropout(Sublayer(x))); pre: x <- x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, d: int, n: int, cfg: ModelConfig):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(n))
        self.dropout = Dropout(cfg.dropout)
        self.pre = cfg.norm_position == "pre"

    def input(self, x: Tensor, i: int) -> Tensor:
        """What sub-layer i reads of x: LayerNorm(x) before it (pre), else x itself."""
        return self.norms[i](x) if self.pre else x

    def add(self, x: Tensor, fx: Tensor, i: int) -> Tensor:
        """x plus sub-layer i's output fx, then its norm (post)."""
        x = x + self.dropout(fx)
        return x if self.pre else self.norms[i](x)


class EncoderLayer(nn.Module):
    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(d, d, cfg.attention_size, cfg.heads, cfg.normalizer)
        self.ffn = FeedForward(d, cfg.ff_size, cfg.dropout)
        self.sub = Sublayers(d, 2, cfg)

    def forward(self, h: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """h (B, S, d) -> (B, S, d), and the self-attention's weights (B, H, S, S)."""
        x = self.sub.input(h, 0)
        c, _, alpha = self.self_attn(x, self.self_attn.keys(x), src_mask)  # 1) self-attention
        h = self.sub.add(h, c, 0)
        return self.sub.add(h, self.ffn(self.sub.input(h, 1)), 1), alpha  # 2) feed-forward


class TransformerEncoder(nn.Module):
    """Reads the source with self-attention only: h = Layers(sqrt(d) Embed(src) + PE) (3.1)."""

    def __init__(self, vocab_size: int, cfg: ModelConfig):
        super().__init__()
        d = self.out_size = cfg.enc_out_size
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.layers = nn.ModuleList(EncoderLayer(d, cfg) for _ in range(cfg.enc_layers))
        self.norm = nn.LayerNorm(d) if cfg.norm_position == "pre" else nn.Identity()  # the stack's last
        self.dropout = Dropout(cfg.dropout)
        self.word_dropout = cfg.word_dropout

    def forward(
        self, src: Tensor, src_len: Tensor, x: Tensor | None = None, written: bool = False
    ) -> EncoderOutput:
        """Read a padded batch src (B, S) whose true lengths are src_len (B,). `x` (B, S, E), when
        given, stands in for the embeddings of src (attribution.py differentiates through it).
        The fixed context c, which only an RNN decoder reads (its s_0), is the mean of the real h.
        `written` changes nothing: there is no recurrence to write out."""
        S, d = src.size(1), self.out_size
        src_mask = src != PAD
        x = (self.embed(src) if x is None else x) * math.sqrt(d)  # (B, S, d)
        x = drop_words(x, self.word_dropout, self.training)
        h = self.dropout(x + positions(0, S, d, src.device))
        weights = []
        for layer in self.layers:
            h, alpha = layer(h, src_mask)
            weights.append(alpha)
        h = self.norm(h)
        c = (h * src_mask.unsqueeze(-1)).sum(1) / src_len.to(h.dtype).unsqueeze(-1)  # (B, d)
        return EncoderOutput(h, src_mask, c, self_alpha=torch.stack(weights, 1))  # (B, L, H, S, S)


class DecoderLayer(nn.Module):
    def __init__(self, d: int, enc_size: int, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(d, d, cfg.attention_size, cfg.heads, cfg.normalizer)
        self.src_attn = MultiHeadAttention(d, enc_size, cfg.attention_size, cfg.heads, cfg.normalizer)
        self.ffn = FeedForward(d, cfg.ff_size, cfg.dropout)
        self.sub = Sublayers(d, 3, cfg)

    def forward(
        self,
        s: Tensor,
        cache: Tensor,
        future: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        top_k: int = 0,
        change: Change | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """T new steps s (R, T, d), this layer's cached keys and values of the steps before
        (R, P - T, 2A), `future` (1, T, P) and the source's keys and values `memory` (B, S, 2A)
        with src_mask (B, S); `top_k` and `change` as `Look` says, for the source attention.

        Returns s (R, T, d), the cache with the T steps (R, P, 2A), the self-attention's weights
        (R, H, T, P), and the source attention's context c (R, T, d) and its e and alpha
        (R, H, T, S)."""
        (R, T, d), B = s.shape, memory.size(0)
        x = self.sub.input(s, 0)  # 1) masked self-attention over the steps so far
        cache = torch.cat([cache.to(x.dtype), self.self_attn.keys(x)], 1)  # (R, P, 2A)
        c, _, self_alpha = self.self_attn(x, cache, future)
        s = self.sub.add(s, c, 0)
        # 2) attention over the source; the K rows of a sentence's beams read its h once, as K x T queries
        q = self.sub.input(s, 1).reshape(B, R // B * T, d)  # (B, Q, d)
        c, e, alpha = self.src_attn(q, memory, src_mask, top_k, change)  # (B, Q, d), (B, H, Q, S)
        c = c.view(R, T, d)
        s = self.sub.add(s, c, 1)
        s = self.sub.add(s, self.ffn(self.sub.input(s, 2)), 2)  # 3) feed-forward
        H, S = alpha.shape[1], alpha.size(-1)
        e, alpha = (w.view(B, H, R // B, T, S).transpose(1, 2).reshape(R, H, T, S) for w in (e, alpha))
        return s, cache, self_alpha, c, e, alpha


class TransformerDecoder(nn.Module):
    """Generates the target with attention only: masked self-attention over the steps so far,
    attention over the source, a feed-forward layer, L times; P(y_t) = softmax(W_o s_t).

    It keeps the RNN decoder's interface (init_state, prepare, forward, project), so that
    training, search and the tools drive either. DecoderOutput's e and alpha are the top
    layer's attention over the source, its heads' mean, and c that layer's context."""

    attends = True  # it always attends to the source
    parallel = True  # teacher forcing runs all T steps at once, the future masked
    coverage = False
    window = None

    def __init__(self, vocab_size: int, enc_size: int, cfg: ModelConfig):
        super().__init__()
        d = self.state_size = cfg.dec_hidden_size
        self.attention = cfg.attention
        self.normalizer = cfg.normalizer  # step (2) in every attention: softmax, sparsemax or entmax15
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.layers = nn.ModuleList(DecoderLayer(d, enc_size, cfg) for _ in range(cfg.dec_layers))
        self.norm = nn.LayerNorm(d) if cfg.norm_position == "pre" else nn.Identity()  # the stack's last
        self.out = nn.Linear(d, vocab_size)  # W_o
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight
        self.dropout = Dropout(cfg.dropout)
        self.word_dropout = cfg.word_dropout
        self.cache_size = 2 * cfg.attention_size

    def attention_parameters(self) -> list[nn.Parameter]:
        """The attention over the source, in every layer: what the notes call attention."""
        return [p for layer in self.layers for p in layer.src_attn.parameters()]

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """Every layer's keys and values of h, computed once per sentence: keys (B, S, L, 2A)."""
        return enc._replace(keys=torch.stack([layer.src_attn.keys(enc.h) for layer in self.layers], 2))

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """No step made: an empty cache (L, B, 0, 2A)."""
        B = enc.h.size(0)
        return DecoderState(None, None, 0, cache=enc.h.new_zeros(len(self.layers), B, 0, self.cache_size))

    def forward(
        self,
        y_prev: Tensor,
        enc: EncoderOutput,
        state: DecoderState,
        project: bool = True,
        stepwise: bool = False,
        look: Look = SOFT,
    ) -> DecoderOutput:
        """Run T steps on the previous tokens y_prev (R, T), after the state's cached steps: the
        whole target at once in teacher forcing, one token at a time in search. `stepwise` runs
        one step at a time through the cache (the same numbers, slower); `look`: hard attention
        or a counterfactual, in every layer's and head's attention over the source."""
        x = self.embed_inputs(y_prev)  # (R, T, d)
        if stepwise and y_prev.size(1) > 1:
            steps = []
            for t in range(y_prev.size(1)):
                steps.append(self._steps(x[:, t : t + 1], enc, state, look))
                state = steps[-1].state
            out = DecoderOutput.cat(steps)
        else:
            out = self._steps(x, enc, state, look)
        return out._replace(logits=self.project(out.s_tilde)) if project else out

    def project(self, s_tilde: Tensor) -> Tensor:
        """The logits of P(y_t) = softmax(W_o s_t): (..., d) -> (..., V)."""
        return self.out(s_tilde)

    def embed_inputs(self, y_prev: Tensor) -> Tensor:
        """sqrt(d) Embed(y_prev), with word dropout (3.4): (R, T, d); positions are added by step."""
        x = self.embed(y_prev) * math.sqrt(self.state_size)
        return drop_words(x, self.word_dropout, self.training)

    def _steps(self, x: Tensor, enc: EncoderOutput, state: DecoderState, look: Look) -> DecoderOutput:
        """T steps on the embedded previous tokens x (R, T, d), after state.step cached ones
        (counted from the cache, the same number, so that an ONNX graph reads it from there)."""
        (_, T, d), past = x.shape, state.cache.size(2)
        s = self.dropout(x + positions(past, T, d, x.device))  # (R, T, d)
        future = future_mask(past, T, x.device)  # (1, T, P)
        change = None if look.change is None else lambda alpha, mask: look.change(alpha, mask, past)
        caches, heads, self_heads = [], [], []
        for i, layer in enumerate(self.layers):
            memory = enc.keys[:, :, i]  # (B, S, 2A)
            s, cache, self_alpha, c, e, alpha = layer(
                s, state.cache[i], future, memory, enc.src_mask, look.top_k, change
            )
            caches.append(cache)
            heads.append(alpha)
            self_heads.append(self_alpha)
        s = self.norm(s)  # (R, T, d): what W_o reads, the RNN decoder's ~s_t
        next_state = DecoderState(None, None, past + T, cache=torch.stack(caches))  # (L, R, P, 2A)
        heads, self_heads = (
            torch.stack(w, 2).transpose(1, 3) for w in (heads, self_heads)
        )  # (R, T, L, H, *)
        e, alpha = e.mean(1), alpha.mean(1)  # the top layer's heads' mean: (R, T, S)
        return DecoderOutput(s, e, alpha, c, s, None, next_state, heads, self_heads)


def check_sizes(cfg: Config) -> list[str]:
    """What the attention-only encoder and decoder ask of model.* (run with the config's checks)."""
    m, problems = cfg.model, []
    if m.encoder == "transformer" and m.emb_size != m.hidden_size:
        problems.append(
            f"model.encoder: a transformer encoder adds positions to its embeddings, so model.emb_size "
            f"({m.emb_size}) must equal model.hidden_size ({m.hidden_size})"
        )
    if m.decoder == "transformer":
        if m.emb_size != m.dec_hidden_size:
            problems.append(
                f"model.decoder: a transformer decoder adds positions to its embeddings, so model.emb_size "
                f"({m.emb_size}) must equal model.dec_hidden_size ({m.dec_hidden_size})"
            )
        if m.attention != "scaled_dot":
            problems.append(
                f"model.attention: a transformer decoder attends with 'scaled_dot' heads, not '{m.attention}'"
            )
        for key, rnn_only in (
            ("model.readout", m.readout != "luong"),
            ("model.attend_from", m.attend_from != "current"),
            ("model.input_feeding", m.input_feeding),
            ("model.window", m.window != "global"),
        ):
            if rnn_only:
                problems.append(f"{key}: belongs to an RNN decoder, but model.decoder is 'transformer'")
    if m.encoder == m.decoder == "transformer" and m.layer_norm:
        problems.append(
            "model.layer_norm: normalises an RNN's h and readout; a transformer's norms are "
            "model.norm_position's"
        )
    return problems


CHECKS.append(check_sizes)
