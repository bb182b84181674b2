"""Fast CPU decoding (runtime.py): the network on ONNX Runtime, and int8 weights.

The ONNX graphs are traced from the PyTorch modules, so on every model
variant they must compute the same function: the same tokens from greedy
and beam search, attention equal to float32 rounding. int8 changes the
arithmetic, so its tests state a tolerance instead.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch
from torch import nn

from lookback.config import from_dict
from lookback.decoding.search import beam_search, greedy, top_tokens
from lookback.runtime.export import export
from lookback.runtime.fast import TOP, RNNInOps, export_onnx, fast_model, onnx_model, quantize_torch
from lookback.training.train import train
from lookback.translator import Translator

from ..helpers import tiny_model, tiny_train_config, toy_pairs, train_tiny

VARIANTS = {  # model config -> a tiny model of it
    "additive": {},
    "dot, LSTM, input feeding": {
        "attention": "dot",
        "cell": "lstm",
        "input_feeding": True,
        "dec_hidden_size": 24,
    },
    "general, 2 layers, one direction": {
        "attention": "general",
        "enc_layers": 2,
        "dec_layers": 2,
        "bidirectional": False,
    },
    "multihead": {"attention": "scaled_dot", "heads": 2, "attention_size": 12},
    "scaled_dot, mean context": {"attention": "scaled_dot", "context": "mean", "dec_hidden_size": 24},
    "sparsemax": {"normalizer": "sparsemax"},
    "entmax15": {"normalizer": "entmax15"},
    "coverage": {"coverage": True},
    "previous state, Bahdanau readout": {"attend_from": "previous", "readout": "bahdanau"},
    "layer norm, Bahdanau readout": {"layer_norm": True, "readout": "bahdanau"},
    "tied embeddings, layer norm": {"tie_embeddings": True, "layer_norm": True, "dec_hidden_size": 16},
    "tied embeddings, layer norm, Bahdanau readout (the main job's)": {
        "tie_embeddings": True,
        "layer_norm": True,
        "readout": "bahdanau",
        "dec_hidden_size": 16,
    },
    "local_p window": {"window": "local_p", "window_size": 2},
    "local_m window, LSTM": {"window": "local_m", "window_size": 1, "cell": "lstm"},
    "no attention": {"attention": "none"},
    "transformer": {  # attention only: the decoder's state is every layer's cached keys and values
        "encoder": "transformer",
        "decoder": "transformer",
        "attention": "scaled_dot",
        "heads": 2,
        "attention_size": 12,
        "emb_size": 16,
        "hidden_size": 16,
        "dec_hidden_size": 16,
        "ff_size": 24,
        "enc_layers": 2,
        "dec_layers": 2,
    },
    "post-norm transformer, tied": {
        **dict.fromkeys(("hidden_size", "dec_hidden_size", "emb_size"), 16),
        "encoder": "transformer",
        "decoder": "transformer",
        "attention": "scaled_dot",
        "heads": 4,
        "attention_size": 16,
        "norm_position": "post",
        "tie_embeddings": True,
    },
    "RNN encoder, transformer decoder": {
        **dict.fromkeys(("hidden_size", "dec_hidden_size", "emb_size"), 16),
        "decoder": "transformer",
        "attention": "scaled_dot",
        "heads": 2,
        "attention_size": 12,
    },
    "transformer encoder, RNN decoder": {
        **dict.fromkeys(("hidden_size", "emb_size"), 16),
        "encoder": "transformer",
        "heads": 2,
    },
}

# The source of the tests: 4 sentences of other lengths than the export's example (7 and 5)
SRC = torch.tensor(
    [
        [4, 9, 3, 12, 7, 8, 22, 5, 6],
        [3, 3, 11, 0, 0, 0, 0, 0, 0],
        [17, 2, 5, 9, 21, 0, 0, 0, 0],
        [8, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
)
SRC_LEN = torch.tensor([9, 3, 5, 1])


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """name -> (PyTorch model, its ONNX Runtime twin), one graph export per variant."""
    out = {}
    for name, overrides in VARIANTS.items():
        model = tiny_model(vocab=30, seed=3, **overrides)
        folder = tmp_path_factory.mktemp("onnx")
        export_onnx(model, folder, int8=False)
        out[name] = model, onnx_model(model, folder, None, threads=1)
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_onnx_search_matches_pytorch_token_for_token(twins, name):
    model, twin = twins[name]
    for ours, theirs in zip(greedy(model, SRC, SRC_LEN), greedy(twin, SRC, SRC_LEN), strict=True):
        assert ours.tokens == theirs.tokens
        assert ours.logprob == pytest.approx(theirs.logprob, abs=1e-4)
        if ours.alpha is None:
            assert theirs.alpha is None
        else:  # float32 rounding of the same sums in another order
            torch.testing.assert_close(theirs.alpha, ours.alpha, atol=1e-5, rtol=1e-4)
    for ours, theirs in zip(
        beam_search(model, SRC, SRC_LEN, 3, 3), beam_search(twin, SRC, SRC_LEN, 3, 3), strict=True
    ):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]


@pytest.mark.parametrize(
    "name", ["additive", "dot, LSTM, input feeding", "coverage", "local_p window", "transformer"]
)
def test_one_onnx_step_equals_the_decoder_step_for_any_beam(twins, name):
    """The graph was traced with 2 sentences x 3 rows; other batch, beam and source sizes run."""
    model, twin = twins[name]
    with torch.no_grad():
        for rows_per_sentence in (1, 4):
            enc, enc_x = model.encode(SRC, SRC_LEN), twin.encode(SRC, SRC_LEN)
            torch.testing.assert_close(enc_x.enc.h, enc.h, atol=1e-5, rtol=1e-4)
            state, state_x = model.decoder.init_state(enc), twin.decoder.init_state(enc_x)
            rows = torch.arange(len(SRC)).repeat_interleave(rows_per_sentence)
            state, state_x = state.index_select(rows), state_x.index_select(rows)
            y = torch.randint(4, 30, (len(rows), 1), generator=torch.Generator().manual_seed(0))
            for _ in range(3):  # three steps, each from the state the last one left
                out, out_x = model.decoder(y, enc, state), twin.decoder(y, enc_x, state_x)
                torch.testing.assert_close(out_x.logits, out.logits, atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(out_x.alpha, out.alpha, atol=1e-5, rtol=1e-4)
                for n in (1, 5):  # the n best tokens, picked inside the graph, as search picks them
                    logp, tokens, eos = top_tokens(out.logits[:, -1], n)
                    _, logp_x, tokens_x, eos_x = twin.decoder.forward_top(y, enc_x, state_x, n)
                    assert torch.equal(tokens_x, tokens)
                    torch.testing.assert_close(logp_x, logp, atol=1e-4, rtol=1e-4)
                    torch.testing.assert_close(eos_x, eos, atol=1e-4, rtol=1e-4)
                state, state_x = out.state, out_x.state
                assert state_x.step == state.step
                y = out.logits[:, -1:].argmax(-1)


def test_the_graphs_top_k_in_blocks_for_any_beam(tmp_path):
    """With 303 target ids, search.top_k works in 4 blocks of 64 and a tail of 47 inside the
    graph too: n over the 4 blocks (a wide beam) takes them all."""
    import onnx

    model = tiny_model(vocab=300, seed=3)
    export_onnx(model, tmp_path, int8=False)
    assert "ReduceMax" in {n.op_type for n in onnx.load(tmp_path / "decoder.onnx").graph.node}  # blocks
    twin = onnx_model(model, tmp_path, None, threads=1)
    src = SRC.clamp(max=299)
    with torch.no_grad():
        enc, enc_x = model.encode(src, SRC_LEN), twin.encode(src, SRC_LEN)
        state, state_x = model.decoder.init_state(enc), twin.decoder.init_state(enc_x)
        y = torch.full((len(src), 1), 7)
        out = model.decoder(y, enc, state)
        for n in (1, 3, 4, 6, 12):
            logp, tokens, _ = top_tokens(out.logits[:, -1], n)
            _, logp_x, tokens_x, _ = twin.decoder.forward_top(y, enc_x, state_x, n)
            assert torch.equal(tokens_x, tokens) and torch.equal(tokens, out.logits[:, -1].topk(n).indices)
            torch.testing.assert_close(logp_x, logp, atol=1e-4, rtol=1e-4)
    for ours, theirs in zip(
        beam_search(model, src, SRC_LEN, 6, 2), beam_search(twin, src, SRC_LEN, 6, 2), strict=True
    ):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]


def test_a_graph_without_top_tokens_still_searches(twins, monkeypatch):
    """Graphs exported before the decoder graph picked the n best tokens itself have no such
    outputs: search then picks them from the logits in PyTorch, with the same result."""
    model, twin = twins["additive"]
    assert set(TOP) <= set(twin.decoder.outputs) and twin.decoder.top_in_graph
    monkeypatch.setattr(twin.decoder, "top_in_graph", False)  # as OnnxDecoder sets it for such graphs
    monkeypatch.setattr(twin.decoder, "session", _NoTop(twin.decoder.session))
    for ours, theirs in zip(
        beam_search(model, SRC, SRC_LEN, 3, 2), beam_search(twin, SRC, SRC_LEN, 3, 2), strict=True
    ):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]


class _NoTop:
    """An ONNX Runtime session that refuses to be asked for the top-token outputs."""

    def __init__(self, session):
        self.session = session

    def run(self, names, feed):
        assert not set(TOP) & set(names)
        return self.session.run(names, feed)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("runtime"), "additive")


TEST = [en for en, _ in toy_pairs(40, seed=3)]


def test_an_onnx_export_translates_as_the_run_directory_and_loads_no_pickle(run, tmp_path, monkeypatch):
    out = tmp_path / "model"
    info = export(run, out, onnx=True)
    assert info["onnx"] == [
        "decoder.int8-vnni.onnx",
        "decoder.int8.onnx",
        "decoder.onnx",
        "encoder.int8-vnni.onnx",
        "encoder.int8.onnx",
        "encoder.onnx",
    ]
    assert "--backend onnxruntime" in (out / "README.md").read_text(encoding="utf-8")
    reference = Translator.load(run)

    def refuse(*args, **kwargs):
        raise AssertionError("an export must load without unpickling anything")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch.onnx, "export", refuse)  # the export's graphs are used, not made again
    fast = Translator.load(out, backend="onnxruntime", threads=1)
    for beam in (1, 3):
        for x, y in zip(reference.translate(TEST, beam=beam), fast.translate(TEST, beam=beam), strict=True):
            assert x.tokens == y.tokens
            torch.testing.assert_close(y.attention, x.attention, atol=1e-5, rtol=1e-4)


def test_exporting_again_without_onnx_drops_the_old_graphs(run, tmp_path):
    out = tmp_path / "model"
    export(run, out, onnx=True)
    export(run, out)
    assert not (out / "onnx").exists()


def _agreement(a: list, b: list) -> float:
    return sum(x.tokens == y.tokens for x, y in zip(a, b, strict=True)) / len(a)


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_int8_stays_close_to_fp32_on_a_trained_model(run, backend):
    """Stated tolerance: on the toy test set, int8 greedy outputs are the fp32 ones for at least
    90% of the sentences; where they are, their log-probability moves by under 0.03 per token on
    average and under 0.1 at most (this 24-unit model has few weights to share each scale)."""
    fp32 = Translator.load(run)
    int8 = Translator.load(run, backend=backend, quantize="int8", threads=1)
    a, b = fp32.translate(TEST, beam=1), int8.translate(TEST, beam=1)
    assert _agreement(a, b) >= 0.9
    same = [(x, y) for x, y in zip(a, b, strict=True) if x.tokens == y.tokens]
    moves = [abs(x.score - y.score) / (len(x.ids) + 1) for x, y in same]  # per token, </s> included
    assert sum(moves) / len(moves) < 0.03 and max(moves) < 0.1
    assert max(moves) > 0  # int8 arithmetic did run


def test_a_tied_model_exports_to_onnx_and_int8_translates_as_its_run(tmp_path):
    """The main job ties W_o to the target embeddings: one tensor in two places survives the graphs
    (the same outputs as PyTorch) and int8 (close to fp32 by the tolerance of the untied model's
    test above; trained 200 updates, since at 120 this tied model still has near-ties that int8
    flips: 0.875 agreement on PyTorch's int8 for one seed, against 0.975-1.0 from 200 on)."""
    raw = tiny_train_config(
        tmp_path,
        model={"tie_embeddings": True, "layer_norm": True},
        train={"max_steps": 200, "valid_every": 100},
    )
    run = train(from_dict(raw))
    export(run, tmp_path / "model", onnx=True)
    reference = Translator.load(run)
    assert reference.model.decoder.out.weight is reference.model.decoder.embed.weight
    fast = Translator.load(tmp_path / "model", backend="onnxruntime", threads=1)
    for x, y in zip(reference.translate(TEST, beam=3), fast.translate(TEST, beam=3), strict=True):
        assert x.tokens == y.tokens
    fp32 = reference.translate(TEST, beam=1)
    for backend in ("torch", "onnxruntime"):
        int8 = Translator.load(run, backend=backend, quantize="int8", threads=1)
        assert _agreement(fp32, int8.translate(TEST, beam=1)) >= 0.9


def test_int8_weights_are_int8():
    model = quantize_torch(tiny_model(vocab=30, seed=0))
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.GRU))]  # float ones left
    assert not layers
    quantized = {f"{type(m).__module__}.{type(m).__name__}" for m in model.modules()}
    dynamic = "torch.ao.nn.quantized.dynamic.modules"
    assert {f"{dynamic}.linear.Linear", f"{dynamic}.rnn.GRU"} <= quantized


@pytest.mark.parametrize(("suffix", "bound"), [(".int8.onnx", 64), (".int8-vnni.onnx", 127)])
def test_onnx_int8_weights_have_a_scale_per_column_and_7_or_8_bits(tmp_path, suffix, bound):
    """quantize_onnx asks for per-channel scales: the int8 weights of every matrix product have
    one scale per output column, and lie in [-64, 64] (7 bits, for any CPU) or use the full
    8 bits (the twin for CPUs with VNNI)."""
    import onnx
    from onnx import numpy_helper

    export_onnx(tiny_model(vocab=30, seed=0), tmp_path)
    graph = onnx.load(tmp_path / f"decoder{suffix}").graph
    tensors = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weights = {n.removesuffix("_quantized"): w for n, w in tensors.items() if n.endswith("_quantized")}
    weights = {n: w for n, w in weights.items() if w.dtype == "int8"}  # the products' (embeddings: uint8)
    assert len(weights) >= 3  # attention, readout, output layer (V = 33 columns)
    assert any(w.shape[1] == 33 for w in weights.values())
    for name, w in weights.items():
        assert w.min() >= -bound and w.max() <= bound, name
        assert tensors[f"{name}_scale"].shape == (w.shape[1],), name  # (1,) for a one-column product
    if bound == 127:  # the eighth bit is used
        assert max(int(abs(w).max()) for w in weights.values()) > 64


@pytest.mark.parametrize("vnni", [False, True])
def test_the_8_bit_graphs_run_only_on_a_cpu_with_vnni(tmp_path, monkeypatch, vnni):
    from lookback import device
    from lookback.runtime import fast as runtime

    export_onnx(tiny_model(vocab=30, seed=0), tmp_path)
    monkeypatch.setattr(device, "vnni", lambda: vnni)
    assert runtime.int8_suffix(tmp_path) == (".int8-vnni.onnx" if vnni else ".int8.onnx")
    (tmp_path / "encoder.int8-vnni.onnx").unlink()  # an export made before the 8-bit twins
    assert runtime.int8_suffix(tmp_path) == ".int8.onnx"


@pytest.mark.parametrize("cell", [nn.GRU, nn.RNN])
def test_an_rnn_in_products_is_the_rnn(cell):
    torch.manual_seed(0)
    rnn = cell(6, 5, num_layers=2, batch_first=True).eval()
    x, s0 = torch.randn(3, 4, 6), torch.randn(2, 3, 5)  # (B, T, In), (L, B, D)
    want, want_last = rnn(x, s0)
    got, got_last = RNNInOps(rnn)(x, s0)
    assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got_last, want_last, atol=1e-6)
    assert RNNInOps.fits(rnn)
    assert not RNNInOps.fits(nn.LSTM(6, 5, batch_first=True))
    assert not RNNInOps.fits(cell(6, 5, batch_first=True, bidirectional=True))


@pytest.mark.parametrize(("cell", "rnn_ops"), [("gru", set()), ("lstm", {"DynamicQuantizeLSTM"})])
def test_the_int8_decoder_graph_has_its_rnn_in_int8(cell, rnn_ops, tmp_path):
    """ONNX Runtime has no int8 GRU: the decoder's GRU goes into the graph as products, which
    the quantiser makes int8; an LSTM stays ONNX's LSTM, which it quantises itself."""
    import onnx

    export_onnx(tiny_model(vocab=30, seed=0, cell=cell), tmp_path)
    ops = {n.op_type for n in onnx.load(tmp_path / "decoder.int8.onnx").graph.node}
    assert not ops & {"GRU", "RNN", "LSTM"}
    assert {"DynamicQuantizeLSTM"} & ops == rnn_ops
    nodes = onnx.load(tmp_path / "decoder.int8.onnx").graph.node
    rnn_products = [n for n in nodes if n.name.startswith("/decoder/rnn/") and "MatMul" in n.op_type]
    assert (len(rnn_products) >= 2) == (cell == "gru")  # W_ih x and W_hh s
    assert all(n.op_type != "MatMul" for n in rnn_products)  # each one int8


def test_an_ensemble_runs_on_onnxruntime(run, tmp_path):
    other = train_tiny(tmp_path, "general")
    ref = Translator.ensemble([run, other])
    fast = Translator.ensemble([run, other], backend="onnxruntime", threads=1)
    for x, y in zip(ref.translate(TEST, beam=3), fast.translate(TEST, beam=3), strict=True):
        assert x.tokens == y.tokens


def test_what_the_fast_paths_cannot_do_is_a_clear_error(run):
    model = tiny_model(vocab=30)
    with pytest.raises(ValueError, match="CPU only"):
        fast_model(model, "onnxruntime", None, 1, torch.device("cuda"))
    with pytest.raises(ValueError, match="backend 'tvm'"):
        fast_model(model, "tvm", None, 1, torch.device("cpu"))
    with pytest.raises(ValueError, match="quantize 'int4'"):
        fast_model(model, "torch", "int4", 1, torch.device("cpu"))
    with pytest.raises(ValueError, match="fp32"):
        Translator.load(run, backend="onnxruntime", precision="bf16")
    fast = Translator.load(run, backend="onnxruntime", threads=1)
    fast.decode.hard_attention = 1
    with pytest.raises(ValueError, match="hard attention"):
        fast.translate(["the cat"])


def test_translate_cli_on_onnxruntime_int8(run, tmp_path):
    out = tmp_path / "model"
    export(run, out, onnx=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lookback",
            "translate",
            str(out),
            "--backend",
            "onnxruntime",
            "--quantize",
            "int8",
            "--threads",
            "1",
            "--beam",
            "3",
        ],
        input="the cat sees the dog .\na small bird .\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(done.stdout.splitlines()) == 2 and all(done.stdout.splitlines())
    assert "backend onnxruntime, int8 weights" in done.stderr


def test_a_corrupt_onnx_graph_is_a_one_line_error(run, tmp_path):
    out = tmp_path / "model"
    export(run, out, onnx=True)
    graph = out / "onnx" / "decoder.onnx"
    graph.write_bytes(graph.read_bytes()[:1000])  # cut short, as by a failed copy
    done = subprocess.run(
        [sys.executable, "-m", "lookback", "translate", str(out), "--backend", "onnxruntime"],
        input="the cat .\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"{graph}: not a readable ONNX graph" in done.stderr
