"""The attention-only model in every tool (issue 59, item 3): a tiny transformer trained on the toy
corpus, then resumed, averaged, translated, evaluated, explained, plotted, aligned, served and
exported; where a tool cannot apply, it says so in one line."""

import json

import pytest
import torch
from fastapi.testclient import TestClient

from lookback.cli import main
from lookback.config import from_dict
from lookback.serve.app import create_app
from lookback.translator import Translator

from .helpers import TINY_TRANSFORMER as TRANSFORMER
from .helpers import tiny_train_config

SENTENCE = "the small dog sees a big cat in the park ."


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from lookback.training.train import train

    tmp = tmp_path_factory.mktemp("transformer")
    raw = tiny_train_config(
        tmp,
        model=TRANSFORMER,
        train={"run_dir": str(tmp / "run"), "max_steps": 120, "valid_every": 40, "keep_checkpoints": 3},
    )
    return train(from_dict(raw))


def test_it_learns_the_toy_translation_and_resumes(run, tmp_path):
    valid = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "valid"
    ]
    assert valid[-1]["bleu"] > 30.0, [r["bleu"] for r in valid]
    assert main(["train", str(run / "config.yaml"), "--resume", "--set", "train.max_steps=140"]) == 0
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert steps[-1] == 140


def test_the_translator_gives_weights_over_the_source(run):
    translator = Translator.load(run)
    (t,) = translator.translate([SENTENCE])
    assert t.attention.shape == (len(t.tokens), len(t.src_tokens))
    assert torch.allclose(t.attention.sum(-1), torch.ones(len(t.tokens)), atol=1e-5)


def test_translate_evaluate_average_explain_plot_and_align_from_the_cli(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(SENTENCE + "\n"))
    assert main(["translate", str(run), "--beam", "3"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["evaluate", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bleu"] >= 0
    assert main(["average", str(run)]) == 0
    assert main(["evaluate", str(run), "--checkpoint", "averaged", "--json"]) == 0
    capsys.readouterr()
    assert main(["explain", str(run), SENTENCE, "--step", "2"]) == 0
    assert "step 2" in capsys.readouterr().out
    plot = tmp_path / "a.png"
    assert main(["attention", str(run), SENTENCE, "-o", str(plot)]) == 0
    assert plot.stat().st_size > 1000
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text(SENTENCE + "\n", encoding="utf-8")
    tgt.write_text(Translator.load(run).translate([SENTENCE])[0].text + "\n", encoding="utf-8")
    assert main(["align", str(run), "--src", str(src), "--tgt", str(tgt)]) == 0
    assert capsys.readouterr().out.strip()


def test_the_explorer_explains_a_transformer(run):
    client = TestClient(create_app([str(run)]))
    response = client.post("/api/explain", json={"model": "run", "text": SENTENCE})
    assert response.status_code == 200, response.text
    trace = response.json()
    for step in trace["steps"]:
        assert abs(sum(step["weights"]) - 1) < 1e-5
        assert len(step["heads"]) == 2 and len(step["heads"][0]) == 4  # layers, heads
        assert len(step["self_weights"][0][0]) == step["index"]
    assert len(trace["encoder_self"]) == 2
    (info,) = client.get("/api/models").json()
    assert (info["encoder"], info["decoder"]) == ("transformer", "transformer")


def test_an_onnx_export_translates_as_pytorch_and_its_int8_stays_close(run, tmp_path):
    """The decoder graph takes every layer's cached keys and values (L, R, P, 2A) and gives them
    back one position longer, so ONNX Runtime searches with the cache as PyTorch does: the same
    outputs at beam 1 and 3, attention equal to float32 rounding; int8 keeps most outputs."""
    from .helpers import toy_pairs

    assert main(["export", str(run), "-o", str(tmp_path / "onnx"), "--onnx"]) == 0
    test = [en for en, _ in toy_pairs(30, seed=3)]
    torch_model = Translator.load(run)
    fast = Translator.load(tmp_path / "onnx", backend="onnxruntime", threads=1)
    for beam in (1, 3):
        ours, theirs = torch_model.translate(test, beam=beam), fast.translate(test, beam=beam)
        for x, y in zip(ours, theirs, strict=True):
            assert x.tokens == y.tokens
            torch.testing.assert_close(y.attention, x.attention, atol=1e-5, rtol=1e-4)
    fp32 = torch_model.translate(test, beam=1)
    for backend in ("torch", "onnxruntime"):
        int8 = Translator.load(run, backend=backend, quantize="int8", threads=1).translate(test, beam=1)
        assert sum(x.tokens == y.tokens for x, y in zip(fp32, int8, strict=True)) >= 0.8 * len(test)


def test_the_trace_shows_every_layer_and_head_and_the_self_attention(run):
    """Each step's weights over the source in every layer and head (L x H x S), its masked
    self-attention over <s> y_1 .. y_{t-1} (L x H x t), the encoder's (L x H x S x S); each row sums
    to one; the top layer's heads' mean is the step's alpha; and the notebook display draws them."""
    from lookback import display
    from lookback.explain.trace import trace

    tr = trace(Translator.load(run), SENTENCE, gradients=False)
    S = len(tr.src_tokens)
    for step in tr.steps:
        heads, own = torch.tensor(step.heads), torch.tensor(step.self_weights)
        assert heads.shape == (2, 4, S) and own.shape == (2, 4, step.index)
        assert torch.allclose(heads.sum(-1), torch.ones(2, 4), atol=1e-5)
        assert torch.allclose(own.sum(-1), torch.ones(2, 4), atol=1e-5)
        assert torch.allclose(heads[-1].mean(0), torch.tensor(step.weights), atol=1e-5)
    assert torch.tensor(tr.encoder_self).shape == (2, 4, S, S)
    html = display.trace(tr)
    assert "layer 2, head 4" in html and "over the output so far" in html


def test_faithfulness_changes_every_layers_attention_and_cost_counts_it(run):
    """A counterfactual replaces the weights over the source in every layer and head: uniform
    weights change what the model says; the FLOPs of attention over the source grow with S."""
    from lookback.data.read import read_parallel
    from lookback.explain.cost import step_flops
    from lookback.explain.faithfulness import faithfulness

    translator = Translator.load(run)
    data = translator.config.data
    src, ref = read_parallel(data.test, data.src_lang, data.tgt_lang)
    report = faithfulness(translator, src, ref, kinds=("uniform", "permute", "other"))
    assert report["by_length"]["all"]["uniform"]["changed_outputs"] > 0
    short, long = step_flops(translator.model, 5), step_flops(translator.model, 40)
    assert long["attention_flops_per_step"] > short["attention_flops_per_step"] > 0
    assert long["keys_flops"] > short["keys_flops"] > 0


def test_the_cache_bench_finds_the_same_translations_as_recomputing_the_prefix(run, tmp_path, capsys):
    from bench import __main__ as bench

    out = tmp_path / "cache.json"
    test = Translator.load(run).config.data.test
    assert bench.main(["transformer-cache", str(run), "--test", test, "--beams", "1,3", "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["beam3"]["same_translations"] == result["beam3"]["sentences"] == 20
    assert result["cpu_flags"] and result["beam3"]["speedup"] > 0


def test_an_ensemble_of_a_transformer_and_an_rnn_translates_as_one(run, tmp_path):
    """The members share the toy corpus's vocabularies; each keeps its own state (a cache, a hidden
    state), and the ensemble's weights over the source are their mean."""
    from .helpers import train_tiny

    rnn = train_tiny(tmp_path, "additive")
    both = Translator.ensemble([run, rnn])
    (t,) = both.translate([SENTENCE], beam=3)
    assert t.text and t.attention.shape == (len(t.tokens), len(t.src_tokens))
    assert torch.allclose(t.attention.sum(-1), torch.ones(len(t.tokens)), atol=1e-5)
