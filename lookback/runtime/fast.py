"""Fast CPU decoding: int8 weights, and the network on ONNX Runtime.

Translating spends its time in the same places in every RNN toolkit: the
decoder's RNN step and the output layer W_o (D x V), once per step and
beam. Two ways to make that arithmetic cheaper, without changing the search:

* int8 (`quantize="int8"`, `translate --quantize int8`): dynamic
  quantisation. Weights of the linear and RNN layers are stored as 8-bit
  integers with one scale each; activations are quantised on the fly, step
  by step. On PyTorch this is `torch.ao.quantization.quantize_dynamic`
  (Linear, GRU, LSTM); on ONNX Runtime it is its own `quantize_dynamic`
  (MatMul/Gemm and LSTM: it has no int8 GRU, so the decoder graph writes a
  GRU as its matrix products and gates, `RNNInOps`, which it then quantises).
* ONNX Runtime (`backend="onnxruntime"`, `translate --backend onnxruntime`):
  two graphs, written by `lookback export RUN_DIR -o DIR --onnx`:

      encoder.onnx   src (B, S), src_len (B,) -> h, src_mask, c, keys, and s_0
      decoder.onnx   one step: y_{t-1} (R, 1), the source, the state, n -> logits (R, V),
                     the n best tokens' log P (R, n) and ids (R, n), log P(</s>) (R, 1),
                     alpha_t (R, S) and the next state

  The state is DecoderState's tensors: an RNN decoder's s_{t-1} (and LSTM memory, attentional
  vector, coverage), or an attention-only decoder's cache of every layer's keys and values of
  the steps so far (L, R, P, 2A), which the graph gives back one position longer (P + 1).

  `OnnxSeq2Seq` runs them and looks like a `Seq2Seq` to search.py (as an
  Ensemble does), so greedy and beam search are the very same code on either
  backend: the search loop stays in Python and PyTorch, the network runs in
  ONNX Runtime. The graphs are traced from the PyTorch modules, not written
  again, so the two backends compute the same function. The decoder graph
  also picks each row's n best next tokens (search.top_tokens, traced too):
  the logits, 10 MB a step for 320 rows of 8,000 words, then never leave ONNX
  Runtime, and the top-k and log-sum-exp over them run on its threads.

Legend: B batch (A sentences still searched), R rows (A x beam), S source
length, D decoder state size, L decoder layers, V target vocabulary.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .. import device
from ..decoding.search import top_tokens
from ..errors import CheckpointError
from ..model.decoder import SOFT, DecoderOutput, DecoderState, Look
from ..model.encoder import EncoderOutput
from ..model.seq2seq import Seq2Seq
from ..model.transformer import TransformerDecoder

logger = logging.getLogger(__name__)

QUANTIZE = ("int8",)
BACKENDS = ("torch", "onnxruntime")
ONNX_DIR = "onnx"  # in an export: encoder.onnx, decoder.onnx and their int8 twins
INT8, INT8_VNNI = ".int8.onnx", ".int8-vnni.onnx"  # 7-bit weights for any CPU, 8-bit for VNNI
GRAPHS = ("encoder", "decoder")
TOP = ("top_logp", "top_tokens", "eos_logp")  # the decoder graph's search.top_tokens
OPSET = 17


def quantize_torch(model: nn.Module) -> nn.Module:
    """int8 dynamic quantisation of a model's Linear, GRU and LSTM layers, on PyTorch (CPU)."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao warns of its move to torchao; 2.13 still ships it
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {nn.Linear, nn.GRU, nn.LSTM}, dtype=torch.qint8)


def supports_onnx(model: nn.Module) -> None:
    """Raise ValueError when part of `model` is not in the ONNX graphs."""
    if not isinstance(model, Seq2Seq):
        raise ValueError("--backend onnxruntime runs one model; an ensemble runs on --backend torch")


def _require_onnxruntime():
    """The onnxruntime module, or an error that says how to install it."""
    try:
        import onnx  # noqa: F401  (the quantiser reads graphs with it)
        import onnxruntime
    except ImportError as exc:  # a ValueError: one line from the CLI, like every error a user can fix
        raise ValueError(f"--backend onnxruntime needs {exc.name}: pip install 'lookback[onnx]'") from None
    return onnxruntime


# -- export ------------------------------------------------------------------------------------


class _EncoderGraph(nn.Module):
    """encode + init_state: what search needs once per sentence."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, ...]:
        enc = self.model.encode(src, src_len)
        state = self.model.decoder.init_state(enc)
        hidden = state.hidden if isinstance(state.hidden, tuple) else (state.hidden,)
        hidden = () if state.hidden is None else hidden  # a transformer decoder starts from no state
        keys = () if enc.keys is None else (enc.keys,)
        return (enc.h, enc.src_mask, enc.c, *keys, *hidden)


class RNNInOps(nn.Module):
    """A batch-first nn.GRU or tanh nn.RNN written as matrix products and gates, for the
    decoder graph. Traced as ONNX's own GRU op, the decoder's RNN stays fp32 in the int8
    graph (ONNX Runtime quantises MatMul, Gemm and LSTM, not GRU or RNN), the costliest node
    of an int8 step after the output layer. As products, the quantiser makes them int8 like
    every other layer (docs/performance.md, issue 17's third run).

    The same weights and the equations of PyTorch's nn.GRU, per layer, for input x_t:

        r_t = sigmoid(W_ir x_t + b_ir + W_hr s_{t-1} + b_hr)      reset gate
        z_t = sigmoid(W_iz x_t + b_iz + W_hz s_{t-1} + b_hz)      update gate
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn s_{t-1} + b_hn))
        s_t = (1 - z_t) * n_t + z_t * s_{t-1}

    and of nn.RNN: s_t = tanh(W_ih x_t + b_ih + W_hh s_{t-1} + b_hh). Eval mode only (no
    dropout between layers).
    """

    def __init__(self, rnn: nn.GRU | nn.RNN):
        super().__init__()
        self.rnn = rnn  # holds the weights: weight_ih_l0 (G*D, In), weight_hh_l0 (G*D, D), biases

    @staticmethod
    def fits(rnn: nn.Module) -> bool:
        """Whether `rnn` is one this can write (a one-way GRU or tanh RNN, batch first)."""
        kind = isinstance(rnn, nn.GRU) or (isinstance(rnn, nn.RNN) and rnn.nonlinearity == "tanh")
        return kind and rnn.batch_first and not rnn.bidirectional and not rnn.proj_size

    def forward(self, x: Tensor, s0: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, In), s0 (L, B, D) -> s (B, T, D) of the last layer, s_T (L, B, D)."""
        rnn, last = self.rnn, []
        for layer in range(rnn.num_layers):
            W_ih, W_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
            b_ih, b_hh = (getattr(rnn, f"{b}_l{layer}", None) for b in ("bias_ih", "bias_hh"))
            gi = nn.functional.linear(x, W_ih, b_ih)  # (B, T, G*D): every step's input at once
            s, steps = s0[layer], []
            for t in range(x.size(1)):
                gh = nn.functional.linear(s, W_hh, b_hh)  # (B, G*D)
                if isinstance(rnn, nn.GRU):
                    (i_r, i_z, i_n), (h_r, h_z, h_n) = gi[:, t].chunk(3, -1), gh.chunk(3, -1)
                    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
                    s = (1 - z) * torch.tanh(i_n + r * h_n) + z * s  # (B, D)
                else:
                    s = torch.tanh(gi[:, t] + gh)
                steps.append(s)
            x = torch.stack(steps, 1)  # (B, T, D): the next layer's input
            last.append(s)
        return x, torch.stack(last)


@contextlib.contextmanager
def _rnn_in_ops(decoder: nn.Module) -> Iterator[None]:
    """decoder.rnn as RNNInOps while the decoder graph is traced (an LSTM stays ONNX's LSTM,
    which ONNX Runtime quantises)."""
    rnn = getattr(decoder, "rnn", None)  # a transformer decoder has none
    if rnn is not None and RNNInOps.fits(rnn):
        decoder.rnn = RNNInOps(rnn)
    try:
        yield
    finally:
        decoder.rnn = rnn


class _DecoderGraph(nn.Module):
    """One decoder step, inputs and outputs as flat tensors, in the order of `_names`: the
    source's, the state's (DecoderState.names) and their next values (NAME_out)."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.decoder = model.decoder
        self.inputs = _names(model)["decoder_in"]

    def forward(self, *inputs):
        d = self.decoder
        x = dict(zip(self.inputs, inputs, strict=True))
        enc = EncoderOutput(x["h"], x["src_mask"], x["c"], x.get("keys"))
        state = DecoderState.from_tensors(x, x["step"])
        out = d(x["y_prev"], enc, state, project=False)
        logits = d.project(out.s_tilde[:, -1])  # (R, V), made once (a slice of it is a copy in a graph)
        outputs = [logits, *top_tokens(logits, x["n"])]  # (R, V), (R, n) x 2, (R, 1)
        if out.alpha is not None:
            outputs.append(out.alpha[:, -1])  # (R, S)
        return (
            *outputs,
            *out.state.tensors().values(),
        )  # hidden (L, R, D), [cell], feed (R, D), [coverage (R, S)]; a transformer's cache (L, R, P, 2A)


def _kind(decoder: nn.Module) -> tuple[bool, bool]:
    """Whether the decoder's state holds an LSTM's memory, and whether it is a transformer's cache."""
    transformer = isinstance(decoder, TransformerDecoder)
    return not transformer and decoder.is_lstm, transformer


def _names(model: Seq2Seq) -> dict[str, list[str]]:
    """The graphs' input and output names; which exist depends on the model's config."""
    d, (lstm, transformer) = model.decoder, _kind(model.decoder)
    state = DecoderState.names(lstm, d.coverage, transformer)
    source = ["h", "src_mask", "c"] + (["keys"] if d.attends else [])
    hidden = [] if transformer else ["hidden", "cell"] if lstm else ["hidden"]  # what the encoder hands on
    return {
        "encoder_in": ["src", "src_len"],
        "encoder_out": source + hidden,
        "decoder_in": ["y_prev", *source, *state, "step", "n"],
        "decoder_out": ["logits", *TOP] + (["alpha"] if d.attends else []) + [f"{n}_out" for n in state],
    }


_AXES = {  # dynamic axes by name: B batch (A in search), S source, R rows; the state's below
    "src": {0: "B", 1: "S"},
    "src_len": {0: "B"},
    "h": {0: "B", 1: "S"},
    "src_mask": {0: "B", 1: "S"},
    "c": {0: "B"},
    "keys": {0: "B", 1: "S"},
    "y_prev": {0: "R"},
    "logits": {0: "R"},
    "top_logp": {0: "R", 1: "n"},
    "top_tokens": {0: "R", 1: "n"},
    "eos_logp": {0: "R"},
    "alpha": {0: "R", 1: "S"},
}
_MORE = {"coverage": {1: "S"}, "cache": {2: "P"}}  # coverage's source axis, the cache's steps so far
for _name, _row in DecoderState.ROWS.items():  # the state's tensors, in and out: rows, and the axes above
    _AXES[_name] = _AXES[f"{_name}_out"] = {_row: "R", **_MORE.get(_name, {})}


def export_onnx(model: Seq2Seq, folder: str | Path, int8: bool = True) -> list[Path]:
    """Write encoder.onnx and decoder.onnx for `model` into `folder` (and, with `int8`, their
    dynamically quantised twins: NAME.int8.onnx, NAME.int8-vnni.onnx); returns the paths."""
    supports_onnx(model)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    names = _names(model)
    # Example inputs: 2 sentences of 7 and 5 tokens, 3 rows each (a beam); every size is a
    # dynamic axis, so other sizes run too (tests/runtime/test_fast.py checks several).
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 0, 0]])
    src_len = torch.tensor([7, 5])
    with torch.no_grad():
        enc_outputs = _EncoderGraph(model)(src, src_len)
    enc = dict(zip(names["encoder_out"], enc_outputs, strict=True))
    rows = torch.tensor([0, 0, 0, 1, 1, 1])
    R = len(rows)
    with torch.no_grad():  # the state after two steps (a transformer's cache then holds two positions)
        encoded = model.encode(src, src_len)
        state = model.decoder.init_state(encoded).index_select(rows)
        y = torch.full((R, 2), 5)
        state = model.decoder(y, encoded, state, project=False, stepwise=True).state
    example = {
        "y_prev": torch.full((R, 1), 5),
        **enc,
        **state.tensors(),
        "step": torch.tensor(state.step),
        "n": torch.tensor(4),  # a dynamic k: the graph's TopK reads it as an input
    }
    example = {name: example[name] for name in names["decoder_in"]}  # the graph's order
    paths = []
    with warnings.catch_warnings(), _rnn_in_ops(model.decoder):  # the exporter's notes on traced shapes
        warnings.simplefilter("ignore")
        for graph, module, inputs in (
            ("encoder", _EncoderGraph(model), (src, src_len)),
            ("decoder", _DecoderGraph(model), tuple(example.values())),
        ):
            path = folder / f"{graph}.onnx"
            torch.onnx.export(
                module.eval(),
                inputs,
                str(path),
                dynamo=False,  # the TorchScript exporter: it writes packed RNNs as ONNX's own GRU/LSTM
                opset_version=OPSET,
                input_names=names[f"{graph}_in"],
                output_names=names[f"{graph}_out"],
                dynamic_axes={
                    n: _AXES[n] for n in names[f"{graph}_in"] + names[f"{graph}_out"] if n in _AXES
                },
            )
            paths.append(path)
    model.train(was_training)
    if int8:  # an export made on one CPU runs on others: both int8 twins, chosen when loaded
        paths += [quantize_onnx(p, full_range) for full_range in (False, True) for p in paths]
    return paths


def quantize_onnx(path: Path, full_range: bool = False) -> Path:
    """ONNX Runtime's int8 dynamic quantisation of the graph at `path`, one scale per output
    column: NAME.onnx -> NAME.int8.onnx with 7-bit weights, which any x86 CPU runs exactly;
    `full_range`: NAME.int8-vnni.onnx with 8-bit ones, for CPUs with VNNI only.

    Without VNNI, ONNX Runtime's x86 kernels add pairs of byte products in 16 bits, which
    8-bit weights can overflow; its docs advise the reduced range there. With VNNI the sums
    are 32-bit and the eighth bit is free precision: on Multi30k val it brought the int8
    beam-5 outputs unlike fp32's from 302 to 180 of 1,014 (docs/performance.md)."""
    _require_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = path.with_suffix(INT8_VNNI if full_range else INT8)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs and prints a line per tensor it leaves out
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            ready = Path(tmp) / path.name
            # shapes inferred and the graph simplified, as the quantiser asks; auto_merge lets the
            # symbolic inference join a transformer's lengths (the cache's P + 1, a query's T and S)
            quant_pre_process(path, ready, auto_merge=True)
            quantize_dynamic(
                ready, out, weight_type=QuantType.QInt8, per_channel=True, reduce_range=not full_range
            )
    finally:
        root.setLevel(level)
    return out


# -- running on ONNX Runtime ---------------------------------------------------------------------


def int8_suffix(folder: Path) -> str:
    """Which int8 graphs of `folder` to run: the 8-bit ones on a CPU with VNNI (where the
    folder has them: exports before them have the 7-bit ones only), else the 7-bit ones."""
    full = all((folder / f"{graph}{INT8_VNNI}").is_file() for graph in GRAPHS)
    return INT8_VNNI if full and device.vnni() else INT8


class OnnxEncoding(NamedTuple):
    """What the encoder graph gives search: the source, and s_0 (with the LSTM memory) beside it."""

    enc: EncoderOutput
    hidden0: tuple[Tensor, ...]  # (L, B, D) each: s_0, and for an LSTM its zero memory

    def index_select(self, idx: Tensor) -> OnnxEncoding:
        return OnnxEncoding(self.enc.index_select(idx), tuple(x.index_select(1, idx) for x in self.hidden0))


class _Out(nn.Module):
    """Stands in for W_o: search reads the vocabulary size from decoder.out.out_features."""

    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features


class OnnxDecoder(nn.Module):
    def __init__(self, session, decoder: nn.Module):
        """Run `session`, the graph of one step of `decoder` (the PyTorch decoder it was exported
        from, which says what its state holds)."""
        super().__init__()
        self.session = session
        self.attends, self.coverage = decoder.attends, decoder.coverage
        self.is_lstm, transformer = _kind(decoder)
        self.cache = (len(decoder.layers), decoder.cache_size) if transformer else None  # L, 2A
        self.out = _Out(decoder.out.out_features)
        self.inputs = [i.name for i in session.get_inputs()]  # unused inputs are left out of a graph
        self.outputs = [o.name for o in session.get_outputs()]
        # False: pick the n best tokens in PyTorch, as for graphs exported without them (bench.decoding
        # measures what picking them in the graph gives)
        self.top_in_graph = TOP[0] in self.outputs

    def init_state(self, enc: OnnxEncoding) -> DecoderState:
        h = enc.enc.h
        if self.cache is not None:  # a transformer: no step cached yet, (L, B, 0, 2A)
            L, size = self.cache
            return DecoderState(None, None, 0, cache=h.new_zeros(L, h.size(0), 0, size))
        hidden = enc.hidden0 if self.is_lstm else enc.hidden0[0]
        coverage = h.new_zeros(h.shape[:2]) if self.coverage else None
        return DecoderState(hidden, h.new_zeros(enc.hidden0[0].shape[1:]), 0, coverage)

    def _run(self, y_prev: Tensor, enc: OnnxEncoding, state: DecoderState, n: int, wanted: list[str]):
        """One step of the graph on y_prev (R, 1): the outputs `wanted`, by name, and the next state."""
        e = enc.enc
        feed = {
            "y_prev": y_prev,
            "h": e.h,
            "src_mask": e.src_mask,
            "c": e.c,
            "keys": e.keys,
            **state.tensors(),
            "step": torch.tensor(state.step),
            "n": torch.tensor(n),
        }
        ort_in = {name: feed[name].contiguous().numpy() for name in self.inputs}
        out = dict(zip(wanted, map(torch.from_numpy, self.session.run(wanted, ort_in)), strict=True))
        next_state = DecoderState.from_tensors(
            {name.removesuffix("_out"): x for name, x in out.items() if name.endswith("_out")}, state.step + 1
        )
        alpha = out.get("alpha")
        alpha = None if alpha is None else alpha.unsqueeze(1)  # (R, 1, S)
        logits = out["logits"].unsqueeze(1) if "logits" in out else None  # (R, 1, V)
        return out, DecoderOutput(None, None, alpha, None, None, logits, next_state)

    def forward(
        self, y_prev: Tensor, enc: OnnxEncoding, state: DecoderState, look: Look = SOFT
    ) -> DecoderOutput:
        """One step on y_prev (R, 1), as Decoder.forward computes it; attention looks as trained."""
        if look != SOFT:
            raise ValueError(
                "hard attention and interventions are not in the ONNX graph; use --backend torch"
            )
        return self._run(y_prev, enc, state, 1, [o for o in self.outputs if o not in TOP])[1]

    def forward_top(
        self, y_prev: Tensor, enc: OnnxEncoding, state: DecoderState, n: int
    ) -> tuple[DecoderOutput, Tensor, Tensor, Tensor]:
        """One step and search.top_tokens of its logits, computed inside the graph (search.decode_step);
        the logits stay in ONNX Runtime. A graph exported before it had them falls back on PyTorch."""
        if not self.top_in_graph:
            out = self(y_prev, enc, state)
            return (out, *top_tokens(out.logits[:, -1], n))
        values, out = self._run(y_prev, enc, state, n, [o for o in self.outputs if o != "logits"])
        return (out, *(values[name] for name in TOP))


class OnnxSeq2Seq(nn.Module):
    """A Seq2Seq whose encoder and decoder step run on ONNX Runtime (search.py runs it unchanged)."""

    # While search runs around it, PyTorch (the top-k, log-sum-exp and reordering) keeps to one
    # thread: its threads and ONNX Runtime's would contend for the same cores at every step (beam 5
    # is 15-20% faster so, on 2 cores; docs/performance.md). decoding/translate.py reads it.
    torch_threads = 1

    def __init__(self, folder: str | Path, model: Seq2Seq, quantize: str | None = None, threads: int = 0):
        """Run the graphs in `folder` (int8 ones with quantize='int8'); `model` (the PyTorch
        model they were exported from) says which inputs and outputs exist. threads 0: ONNX
        Runtime's default, one per core."""
        ort = _require_onnxruntime()
        super().__init__()
        suffix = ".onnx" if quantize != "int8" else int8_suffix(Path(folder))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # ONNX Runtime's threads spin-wait for the next op by default: between two steps they
        # would hold the cores that PyTorch needs for the search (3x slower beam search)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sessions = {}
        for graph in GRAPHS:
            path = Path(folder) / f"{graph}{suffix}"
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path}: no ONNX graph; write it with `lookback export RUN_DIR -o DIR --onnx`"
                )
            try:
                sessions[graph] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime's own errors: a truncated or foreign file
                reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise CheckpointError(f"{path}: not a readable ONNX graph ({reason})") from None
        self.names = _names(model)
        self.encoder_session = sessions["encoder"]
        self.decoder = OnnxDecoder(sessions["decoder"], model.decoder)

    def encode(self, src: Tensor, src_len: Tensor) -> OnnxEncoding:
        outs = self.encoder_session.run(None, {"src": src.numpy(), "src_len": src_len.numpy()})
        out = dict(zip(self.names["encoder_out"], map(torch.from_numpy, outs), strict=True))
        enc = EncoderOutput(out["h"], out["src_mask"], out["c"], out.get("keys"))
        return OnnxEncoding(enc, tuple(out[n] for n in ("hidden", "cell") if n in out))


def onnx_model(model: Seq2Seq, folder: str | Path | None, quantize: str | None, threads: int) -> OnnxSeq2Seq:
    """The ONNX Runtime twin of `model`: from the graphs in `folder` (an export's onnx/), or,
    when there are none, from graphs exported now into a temporary folder."""
    if folder is not None and (Path(folder) / "encoder.onnx").is_file():
        return OnnxSeq2Seq(folder, model, quantize, threads)
    tmp = tempfile.TemporaryDirectory(prefix="lookback-onnx-")
    logger.info("exporting the model to ONNX for this run (`lookback export --onnx` keeps the graphs)")
    export_onnx(model, tmp.name, int8=quantize == "int8")
    twin = OnnxSeq2Seq(tmp.name, model, quantize, threads)
    twin._tmp = tmp  # the folder lives as long as the model
    return twin


def fast_model(
    model: Seq2Seq,
    backend: str,
    quantize: str | None,
    threads: int,
    device: torch.device,
    graphs: Path | None = None,
) -> nn.Module:
    """`model` on `backend`, int8 with quantize='int8'; `graphs`: an export's onnx/ folder."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if quantize not in (None, *QUANTIZE):
        raise ValueError(f"quantize {quantize!r}: choose {', '.join(QUANTIZE)} (or leave it out for fp32)")
    if device.type != "cpu":
        raise ValueError(
            f"backend {backend} with quantize {quantize}: runs on the CPU only, not {device.type}"
        )
    if backend == "torch":
        return quantize_torch(model) if quantize else model
    return onnx_model(model, graphs, quantize, threads or torch.get_num_threads())
