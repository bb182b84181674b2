"""The attention-only encoder and decoder (model/transformer.py): the paper's positions, masks that
keep padding and the future out, a cache that changes nothing but the cost, the four mixes of
RNN and attention-only sides, and a tiny attention-only model that learns the reverse task."""

import json
import math
from pathlib import Path

import pytest
import torch

from lookback.config import from_dict
from lookback.data.synth import sequence_accuracy, synth_corpus
from lookback.data.tokenizer import BOS, EOS, PAD
from lookback.decoding.search import beam_search, greedy
from lookback.errors import ConfigError
from lookback.model.decoder import DecoderState
from lookback.model.seq2seq import build_model
from lookback.model.transformer import future_mask, positions
from lookback.translator import Translator

from ..helpers import threads

SIDES = [("transformer", "transformer"), ("rnn", "transformer"), ("transformer", "rnn"), ("rnn", "rnn")]
SMALL = {
    "emb_size": 32,
    "hidden_size": 32,
    "dec_hidden_size": 32,
    "attention_size": 32,
    "ff_size": 64,
    "heads": 4,
    "dropout": 0.0,
}


def _model(encoder="transformer", decoder="transformer", **more):
    attention = "scaled_dot" if decoder == "transformer" else "additive"
    layers = {"enc_layers": 2, "dec_layers": 2} if "transformer" in (encoder, decoder) else {}
    raw = {**SMALL, "encoder": encoder, "decoder": decoder, "attention": attention, **layers, **more}
    if encoder == "rnn" and decoder == "rnn":
        raw["heads"] = 1
    torch.manual_seed(0)
    return build_model(from_dict({"model": raw}).model, 30, 30).eval()


SRC = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, PAD, PAD, PAD]])
SRC_LEN = torch.tensor([6, 3])
TGT = torch.tensor([[BOS, 12, 13, 14, 15], [BOS, 16, 17, PAD, PAD]])  # <s> y_1 .. y_4


def test_positions_are_the_papers_sines_and_cosines():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), by hand for d = 6 (and an
    odd d, whose last column is a sine); positions from `start` are the rows of the whole table."""
    pe = positions(0, 4, 6)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    for pos, i in [(1, 0), (3, 1), (2, 2)]:
        angle = pos / 10000 ** (2 * i / 6)
        assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert torch.equal(positions(2, 2, 6), pe[2:])
    assert positions(0, 3, 5).shape == (3, 5)
    assert positions(0, 3, 5)[2, 4].item() == pytest.approx(math.sin(2 / 10000 ** (4 / 5)), abs=1e-6)


def test_projections_start_at_glorots_variance_with_zero_biases():
    """W^Q, W^K, W^V, W^O and the feed-forward's W_1, W_2 each start uniform on +-sqrt(6 / (fan_in
    + fan_out)), W^K and W^V as two matrices though they are one layer; PyTorch's default would
    start them at a third of that variance, which kept attention from taking off (lab log)."""
    torch.manual_seed(0)
    d, ff = 256, 512
    model = build_model(
        from_dict(
            {
                "model": {
                    **SMALL,
                    "emb_size": d,
                    "hidden_size": d,
                    "dec_hidden_size": d,
                    "attention_size": d,
                    "ff_size": ff,
                    "encoder": "transformer",
                    "decoder": "transformer",
                    "attention": "scaled_dot",
                }
            }
        ).model,
        30,
        30,
    )
    layer = model.decoder.layers[0]
    attn, ffn = layer.src_attn, layer.ffn
    square = math.sqrt(2 / (d + d))  # the std of U(-a, a) with a = sqrt(6 / (fan_in + fan_out))
    for w in (attn.W_q.weight, attn.W_kv.weight[:d], attn.W_kv.weight[d:], attn.W_o.weight):
        assert w.std().item() == pytest.approx(square, rel=0.02)
        assert w.abs().max().item() <= math.sqrt(3) * square
    for w in (ffn[0].weight, ffn[3].weight):
        assert w.std().item() == pytest.approx(math.sqrt(2 / (d + ff)), rel=0.02)
    for b in (attn.W_q.bias, attn.W_kv.bias, attn.W_o.bias, ffn[0].bias, ffn[3].bias):
        assert not b.any()


def test_the_future_mask_lets_each_step_read_only_itself_and_before():
    assert future_mask(0, 3)[0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert future_mask(2, 1)[0].int().tolist() == [[1, 1, 1]]  # step 3 after 2 cached: all of them
    assert future_mask(1, 2)[0].int().tolist() == [[1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("encoder,decoder", SIDES)
def test_each_mix_of_rnn_and_attention_only_sides_runs_and_learns_a_batch(encoder, decoder):
    """Teacher forcing gives (B, T, V) logits and weights over the source that sum to one on real
    tokens only; a few updates on one batch lower its loss (every part gets a gradient)."""
    model = _model(encoder, decoder).train()
    out = model(SRC, SRC_LEN, TGT)
    assert out.logits.shape == (2, 5, 30) and out.alpha.shape == (2, 5, 6)
    assert torch.allclose(out.alpha.sum(-1), torch.ones(2, 5), atol=1e-5)
    assert out.alpha[1, :, 3:].abs().max() == 0  # padding gets no weight
    tgt_out = torch.cat([TGT[:, 1:], torch.tensor([[EOS], [PAD]])], 1)
    tgt_out[1, 3] = EOS
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = model.loss(SRC, SRC_LEN, TGT, tgt_out)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2, losses
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_the_cache_gives_the_same_outputs_and_scores_as_recomputing_the_prefix(norm_position):
    """Step t with the cached keys and values of steps < t gives the logits and the weights that
    running the whole prefix again gives at its last position; and stepping through the cache
    gives what teacher forcing gives at once."""
    model = _model(norm_position=norm_position)
    enc = model.encode(SRC, SRC_LEN)
    state = model.decoder.init_state(enc)
    with torch.no_grad():
        whole = model.decoder(TGT, enc, model.decoder.init_state(enc))
        for t in range(TGT.size(1)):
            step = model.decoder(TGT[:, t : t + 1], enc, state)
            state = step.state
            again = model.decoder(TGT[:, : t + 1], enc, model.decoder.init_state(enc))
            assert torch.allclose(step.logits[:, 0], again.logits[:, -1], atol=1e-5)
            assert torch.allclose(step.alpha[:, 0], again.alpha[:, -1], atol=1e-6)
            assert torch.allclose(step.logits[:, 0], whole.logits[:, t], atol=1e-5)
    assert state.step == 5 and state.cache.shape == (2, 2, 5, 64)  # (L, B, t, 2A)
    stepwise = model.decoder(TGT, enc, model.decoder.init_state(enc), stepwise=True)
    assert torch.allclose(stepwise.logits, whole.logits, atol=1e-5)


def test_the_cache_follows_the_beam():
    """DecoderState.index_select picks rows of the cache, (L, R, t, 2A) along R, as of the RNN's
    hidden state: a reordered beam carries its own past keys and values."""
    model = _model()
    enc = model.encode(SRC, SRC_LEN)
    out = model.decoder(TGT[:, :3], enc, model.decoder.init_state(enc))
    picked = out.state.index_select(torch.tensor([1, 1, 0]))
    assert picked.step == 3 and torch.equal(picked.cache[:, 2], out.state.cache[:, 0])
    assert torch.equal(picked.cache[:, 0], out.state.cache[:, 1])
    named = out.state.tensors()
    assert list(named) == DecoderState.names(lstm=False, coverage=False, transformer=True) == ["cache"]
    assert torch.equal(DecoderState.from_tensors(named, 3).cache, out.state.cache)


@pytest.mark.parametrize("encoder,decoder", SIDES[:3])
def test_masks_keep_padding_and_the_future_out(encoder, decoder):
    """Changing what stands at a padded source position, or a target token after step t, changes
    nothing the model computes at real positions up to t."""
    model = _model(encoder, decoder)
    with torch.no_grad():
        x = model.encoder.embed(SRC)
        changed = x.clone()
        changed[1, 3:] = torch.randn(3, x.size(-1)) * 5  # the second sentence's padding
        outs = []
        for emb in (x, changed):
            enc = model.decoder.prepare(model.encoder(SRC, SRC_LEN, x=emb))
            outs.append(model.decoder(TGT, enc, model.decoder.init_state(enc)))
        assert torch.allclose(outs[0].logits, outs[1].logits, atol=1e-5)
        assert torch.allclose(outs[0].alpha, outs[1].alpha, atol=1e-6)
        future = TGT.clone()
        future[:, 3:] = 20  # steps 4 and 5 read other tokens
        a = model(SRC, SRC_LEN, TGT).logits
        b = model(SRC, SRC_LEN, future).logits
        assert torch.allclose(a[:, :3], b[:, :3], atol=1e-5)
        if decoder == "transformer":  # the mask must matter: later steps do read them
            assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-3)


@pytest.mark.parametrize("encoder,decoder", SIDES[:3])
def test_beam_of_one_is_greedy_and_a_beam_search_runs_through_the_cache(encoder, decoder):
    model = _model(encoder, decoder)
    g = greedy(model, SRC, SRC_LEN, max_ratio=1.0)
    b1 = beam_search(model, SRC, SRC_LEN, beam=1, length_penalty=0.0, max_ratio=1.0)
    assert [h.tokens for h in g] == [hs[0].tokens for hs in b1]
    b5 = beam_search(model, SRC, SRC_LEN, beam=5, nbest=5, max_ratio=1.0)
    for sent, hyps in enumerate(b5):
        assert len(hyps) == 5
        for hyp in hyps[:2]:  # its score is its log P under the model, recomputed without a cache
            tgt = torch.tensor([[BOS, *hyp.tokens, EOS]])  # <s> y_1 .. y_n </s>
            out = model(SRC[sent : sent + 1], SRC_LEN[sent : sent + 1], tgt[:, :-1])
            logp = out.logits.log_softmax(-1)[0].gather(1, tgt[0, 1:, None]).sum().item()
            assert logp == pytest.approx(hyp.logprob, abs=1e-4)


def test_a_registered_score_is_refused_where_a_transformer_decoder_needs_its_own():
    base = {**SMALL, "decoder": "transformer"}
    problems = {
        "model.attention: a transformer decoder attends with 'scaled_dot' heads, not 'additive'": {},
        "model.decoder: a transformer decoder adds positions to its embeddings, so model.emb_size (32) "
        "must equal model.dec_hidden_size (48)": {"attention": "scaled_dot", "dec_hidden_size": 48},
        "model.encoder: a transformer encoder adds positions to its embeddings, so model.emb_size (32) "
        "must equal model.hidden_size (16)": {
            "attention": "scaled_dot",
            "encoder": "transformer",
            "hidden_size": 16,
        },
        "model.readout: belongs to an RNN decoder, but model.decoder is 'transformer'": {
            "attention": "scaled_dot",
            "readout": "bahdanau",
        },
        "model.heads: model.attention_size (32) must divide into 3 heads": {
            "attention": "scaled_dot",
            "heads": 3,
        },
    }
    for message, more in problems.items():
        with pytest.raises(ConfigError) as err:
            from_dict({"model": {**base, **more}})
        assert message in str(err.value)
    # heads belong to the encoder's layers here, so an RNN decoder may keep its additive score
    m = from_dict({"model": {**SMALL, "encoder": "transformer", "attention": "additive"}}).model
    assert m.enc_out_size == 32 and m.heads == 4


def _tiny(tmp_path, task: str, lengths: tuple[int, int], vocab: int = 50, **train) -> tuple:
    """Train a tiny attention-only model (one layer each side, four heads, d = 64, fp32) on 3,000
    pairs of a synthetic task over `vocab` source words; the run directory and the validation
    pairs."""
    from lookback.training.train import train as run_training

    sizes = {"train": 3000, "val": 100}
    data = synth_corpus(task, tmp_path / "data", lengths, seed=1, sizes=sizes, vocab=vocab)
    raw = {
        "data": {
            "src_lang": "src",
            "tgt_lang": "tgt",
            "train": str(data["train"]),
            "valid": str(data["val"]),
        },
        "tokenizer": {"kind": "word", "vocab_size": 100, "joint": False},
        "model": {
            **SMALL,
            "emb_size": 64,
            "hidden_size": 64,
            "dec_hidden_size": 64,
            "attention_size": 64,
            "ff_size": 128,
            "encoder": "transformer",
            "decoder": "transformer",
            "attention": "scaled_dot",
        },
        "train": {
            "run_dir": str(tmp_path / "run"),
            "max_tokens": 2000,
            "max_epochs": 1000,
            "warmup": 100,
            "threads": threads(),
            "precision": "fp32",
            **train,
        },
        "decode": {"beam": 1, "precision": "fp32"},
    }
    val = [Path(f"{data['val']}.{side}").read_text().splitlines() for side in ("src", "tgt")]
    return run_training(from_dict(raw)), val


def test_a_tiny_attention_only_model_learns_to_reorder_sources_of_up_to_40_words(tmp_path):
    """The toy translation of 20 words (a lexicon, each adjective-noun pair swapped), sources of
    3-40 words: 90% of unseen sources translated exactly, greedily, after 400 updates (about 12 s
    on 2 cores). A model that cannot find where it is in the source gets
    every long sentence wrong somewhere."""
    run, (src, ref) = _tiny(
        tmp_path,
        "translate",
        (3, 40),
        vocab=20,
        lr=0.01,
        schedule="cosine",
        max_steps=400,
        valid_every=400,
        probe=0,
    )
    hyps = [t.text for t in Translator.load(run).translate(src, beam=1)]
    assert sequence_accuracy(hyps, ref) >= 90.0, sequence_accuracy(hyps, ref)


@pytest.mark.slow
def test_a_tiny_attention_only_model_learns_the_reverse_task(tmp_path):
    """Sources of 3-10 words reversed, word for word, to a validation BLEU above 90 in 600
    updates (about 20 s on 2 cores). Reversing is harder for an attention-only encoder than
    copying (which it learns in 200): it must find each word's place from the end, and its
    positions count from the start."""
    run, _ = _tiny(
        tmp_path, "reverse", (3, 10), lr=0.005, schedule="constant", max_steps=600, valid_every=300
    )
    valid = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "valid"
    ]
    assert valid[-1]["bleu"] > 90.0, [r["bleu"] for r in valid]
