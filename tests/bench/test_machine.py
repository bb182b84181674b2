"""bench/machine.py: FLOPs of matrix products from their shapes, the profile's categories, and
the command end to end on a tiny model (its figures mean nothing; their presence and sums do)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml

from bench import machine
from bench.common import counted_flops
from bench.machine import categorise, product_flops, size_bin

from ..helpers import tiny_train_config, toy_pairs, train_tiny, write_corpus


def test_a_products_flops_come_from_its_input_shapes():
    assert product_flops("aten::mm", [[3, 4], [4, 5]]) == 2 * 3 * 4 * 5
    assert product_flops("aten::addmm", [[5], [3, 4], [4, 5], [], []]) == 2 * 3 * 4 * 5  # bias first
    assert product_flops("aten::addmm", [[3, 5], [3, 4], [4, 5], [], []]) == 2 * 3 * 4 * 5
    assert product_flops("aten::bmm", [[2, 3, 4], [2, 4, 5]]) == 2 * 2 * 3 * 4 * 5
    assert product_flops("aten::baddbmm", [[2, 3, 5], [2, 3, 4], [2, 4, 5], [], []]) == 2 * 2 * 3 * 4 * 5
    assert product_flops("aten::mv", [[6, 7], [7]]) == 2 * 6 * 7


def test_the_counter_counts_a_linear_layers_forward_and_backward():
    layer = torch.nn.Linear(8, 16, bias=True)
    x = torch.randn(4, 8, requires_grad=True)
    _, flops = counted_flops(lambda: layer(x).sum().backward())
    assert flops == 3 * 2 * 4 * 8 * 16  # forward, the weights' gradient, the input's gradient


def test_sizes_fall_in_decades():
    assert size_bin(999_999) == "under 1 MFLOP"
    assert size_bin(1_000_000) == "1-10 MFLOP"
    assert size_bin(5e8) == "100 MFLOP-1 GFLOP"
    assert size_bin(4e9) == "1 GFLOP and more"


def test_self_times_are_shared_out_and_the_rest_is_python():
    rows = [
        ("aten::mm", 2_000.0, 10, [[100, 100], [100, 100]]),  # 10 calls of 2 MFLOP in 2 ms: 10 GFLOP/s
        ("aten::addmm", 1_000.0, 1, [[10], [1000, 1000], [1000, 10], [], []]),  # 20 MFLOP in 1 ms
        ("aten::_thnn_fused_gru_cell", 500.0, 5, []),
        ("aten::_log_softmax", 250.0, 1, []),
        ("aten::native_layer_norm", 250.0, 2, []),
        ("aten::_foreach_add_", 100.0, 1, []),
        ("aten::empty", 50.0, 40, []),
        ("aten::copy_", 150.0, 3, []),
        ("autograd::engine::evaluate_function: MmBackward0", 200.0, 4, []),
        ("aten::tanh", 500.0, 4, []),
    ]
    out = categorise(rows, wall_us=10_000.0, optimizer_us=700.0)
    assert out["optimizer_step_share"] == pytest.approx(0.07)  # inclusive, beside the shares
    assert out["operator_calls"] == 71
    shares = out["shares"]
    assert shares["matrix products"] == pytest.approx(0.3)
    assert shares["recurrence (the RNN cells' own work)"] == pytest.approx(0.05)
    assert shares["softmax and the loss"] == pytest.approx(0.025)
    assert shares["layer norm"] == pytest.approx(0.025)
    assert shares["gradient norms (clipping) and foreach ops"] == pytest.approx(0.01)
    assert shares["allocation"] == pytest.approx(0.005)
    assert shares["copies, views and indexing"] == pytest.approx(0.015)
    assert shares["autograd bookkeeping"] == pytest.approx(0.02)
    assert shares["elementwise"] == pytest.approx(0.05)
    assert shares["Python and the rest"] == pytest.approx(0.5)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert list(shares)[0] == "Python and the rest"  # largest first
    sizes = out["matrix_products_by_size"]
    mm = {"operator": "aten::mm", "input_shapes": [[100, 100], [100, 100]], "calls": 10, "share": 0.2}
    assert sizes["1-10 MFLOP"] == {
        "calls": 10,
        "share": 0.2,
        "gflops": 10.0,
        "heaviest": [{**mm, "gflops": 10.0}],
    }
    assert sizes["10-100 MFLOP"]["heaviest"][0]["input_shapes"] == [[10], [1000, 1000], [1000, 10]]
    assert sizes["10-100 MFLOP"]["gflops"] == 20.0
    heaviest = out["heaviest"]  # operators, heaviest first, the shapes of their heaviest row
    assert heaviest[0] == {
        "operator": "aten::mm",
        "calls": 10,
        "share": 0.2,
        "heaviest_shapes": mm["input_shapes"],
    }
    assert [h["operator"] for h in heaviest[1:3]] == ["aten::addmm", "aten::_thnn_fused_gru_cell"]
    assert len(heaviest) == len(rows)


def test_an_operators_shapes_add_up_and_its_heaviest_are_named():
    rows = [
        ("aten::sigmoid", 100.0, 2, [[4, 5]]),
        ("aten::sigmoid", 300.0, 1, [[8, 5]]),
        ("aten::add", 200.0, 3, []),
    ]
    heaviest = categorise(rows, wall_us=1_000.0)["heaviest"]
    assert heaviest[0] == {"operator": "aten::sigmoid", "calls": 3, "share": 0.4, "heaviest_shapes": [[8, 5]]}
    assert heaviest[1]["operator"] == "aten::add"


def test_the_peak_is_the_best_size_and_int8_is_measured_when_asked():
    out = machine.gemm_peak([32, 64], int8=True)
    assert set(out["fp32_gflops"]) == {"32", "64"}
    assert out["fp32_peak_gflops"] == max(out["fp32_gflops"].values()) > 0
    assert out["int8_peak_gops"] == max(
        *out["int8_int_mm_gops"].values(), *out["int8_dynamic_linear_gops"].values()
    )
    assert "int8_peak_gops" not in machine.gemm_peak([32], int8=False)


def test_the_command_measures_training_and_decoding_of_a_tiny_model(tmp_path, capsys):
    run = train_tiny(tmp_path / "runs", "additive")
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp_path)), encoding="utf-8")
    out = tmp_path / "machine.json"
    args = ["-o", str(out), "--config", str(config), "--run", str(run), "--updates", "3", "--sentences", "8"]
    assert machine.main([*args, "--threads", "1", "--sizes", "32", "64"]) == 0
    result = json.loads(out.read_text())
    assert (
        result["cpu_flags"] == machine.cpu_flags() and result["cpu"] and result["torch"] == torch.__version__
    )
    assert result["cpu_kernels"] == torch.backends.cpu.get_cpu_capability()  # AVX512, AVX2 ...
    train = result["training"]
    assert train["updates"] == 3 and train["target_tokens_per_s"] > 0 and train["flops_per_target_token"] > 0
    assert train["achieved_gflops"] == pytest.approx(
        train["flops_per_target_token"] * train["target_tokens_per_s"] / 1e9, rel=0.01
    )
    assert train["fraction_of_fp32_peak"] == round(
        train["achieved_gflops"] / result["peak"]["fp32_peak_gflops"], 3
    )
    assert sum(train["profile"]["shares"].values()) == pytest.approx(1.0, abs=0.01)
    assert train["profile"]["shares"]["matrix products"] > 0
    assert 0 < train["profile"]["optimizer_step_share"] < 1  # torch.optim's own label was found
    for name in ("greedy", "beam5"):
        d = result["decoding"][name]
        assert d["sentences"] == 8 and d["flops_per_sentence"] > 0 and d["sentences_per_s"] > 0
    assert (
        result["decoding"]["beam5"]["flops_per_sentence"] > result["decoding"]["greedy"]["flops_per_sentence"]
    )
    assert "of the fp32 peak" in capsys.readouterr().err


def test_decoding_is_left_out_without_a_run_and_bad_counts_are_refused(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp_path)), encoding="utf-8")
    out = tmp_path / "machine.json"
    args = ["-o", str(out), "--config", str(config), "--run", str(tmp_path / "none"), "--sizes", "32"]
    assert machine.main([*args, "--updates", "2", "--threads", "1"]) == 0
    assert json.loads(out.read_text())["decoding"] == {"left_out": f"no trained run in {tmp_path / 'none'}"}
    with pytest.raises(SystemExit):
        machine.main([*args, "--updates", "0"])
    assert "--updates must be at least 1, not 0" in capsys.readouterr().err


def test_like_for_like_trains_the_headlines_model_stepping_one_position_at_a_time(tmp_path, monkeypatch):
    """--like-for-like: the headline's "feed" config (input feeding) on the data the headline
    prepares; per update, its seconds, decoder steps and its products' floor at the peak."""
    from bench import prepare, settings

    monkeypatch.setitem(settings.TOKENIZER, "vocab_size", 40)  # the toy corpus has few words
    write_corpus(tmp_path / "data", "train", toy_pairs(80, seed=5))
    write_corpus(tmp_path / "data", "val", toy_pairs(10, seed=6))
    monkeypatch.setattr(prepare, "prepare_data", lambda work, limit: work / "data")
    out = tmp_path / "machine.json"
    small = ["--set", "model.hidden_size=16", "--set", "model.emb_size=8", "--set", "model.attention_size=8"]
    args = ["-o", str(out), "--like-for-like", str(tmp_path), "--run", str(tmp_path / "none"), *small]
    assert machine.main([*args, "--updates", "2", "--threads", "1", "--sizes", "32"]) == 0
    result = json.loads(out.read_text())
    assert result["config"] == "like for like (python -m bench headline --configs feed)"
    train = result["training"]
    assert train["seconds_per_update"] == pytest.approx(train["seconds"] / 2, abs=1e-3)
    assert train["decoder_steps_per_update"] >= 2  # the toy targets' padded length
    floor = train["fraction_of_fp32_peak"] * train["seconds_per_update"]
    assert train["products_seconds_per_update_at_peak"] == pytest.approx(floor, rel=0.05, abs=1e-4)


def test_headline_batches_are_the_headlines_and_need_like_for_like(tmp_path, capsys):
    """--headline-batches: each epoch the seeded permutation of the pairs cut into 80, as the
    headline gives both systems (bench/common.py), in place of the plan's own batches."""
    from bench import common, settings

    @dataclasses.dataclass
    class Plan:  # what headline_batches reads and replaces of lookback's UpdatePlan
        pairs: list
        epoch_batches: object

    plan = machine.headline_batches(Plan(list(range(200)), lambda epoch: [[0, 1]]))
    for epoch in (0, 1):
        batches = plan.epoch_batches(epoch)
        assert batches == common.epoch_batches(200, 80, settings.TRAIN["seed"], epoch)
        assert [len(b) for b in batches] == [80, 80, 40]
    assert plan.epoch_batches(0) != plan.epoch_batches(1)  # a new permutation each epoch
    with pytest.raises(SystemExit):
        machine.main(["-o", str(tmp_path / "m.json"), "--headline-batches"])
    assert "--headline-batches goes with --like-for-like WORK" in capsys.readouterr().err


def test_products_alone_replays_each_shape_for_its_calls(monkeypatch):
    timed = []
    monkeypatch.setattr(machine, "median_call_seconds", lambda call, *a, **k: timed.append(call()) or 0.5)
    rows = [
        ("aten::addmm", 10.0, 4, [[6], [3, 5], [5, 6]]),  # bias, then the two matrices
        ("aten::bmm", 10.0, 2, [[2, 3, 5], [2, 5, 7]]),
        ("aten::addmv_", 10.0, 1, [[3], [3, 5], [5]]),
        ("aten::sigmoid", 10.0, 9, [[3, 5]]),  # not a product: not replayed
        ("aten::mm", 10.0, 9, [[3, 5]]),  # too few shapes to replay
    ]
    assert machine.products_alone(rows) == pytest.approx(0.5 * (4 + 2 + 1))
    assert [tuple(t.shape) for t in timed] == [(3, 6), (2, 3, 7), (3,)]
