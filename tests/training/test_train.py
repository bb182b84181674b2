"""Training: a tiny model must learn; checkpoints round-trip; a stopped run resumes exactly."""

from __future__ import annotations

import json
import time

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import UpdatePlan, pad, token_batches
from lookback.decoding.search import beam_search, greedy
from lookback.training.checkpoint import CheckpointError, RunDir, load_checkpoint, save_checkpoint
from lookback.training.train import Trainer
from lookback.translator import Translator

from ..helpers import tiny_train_config, toy_pairs


def test_a_tiny_model_learns_the_toy_translation(trained):
    records = [json.loads(x) for x in (trained.run.path / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in valid] == [100, 200, 300]
    assert train[-1]["loss"] < train[0]["loss"] / 4
    assert valid[-1]["bleu"] > 80.0
    pairs = toy_pairs(50, seed=9)  # sentences it has not seen
    outs = Translator.load(trained.run.path).translate([e for e, _ in pairs], beam=3)
    refs = [trained.tgt_tok.decode(trained.tgt_tok.encode(f)) for _, f in pairs]
    exact = sum(o.text == r for o, r in zip(outs, refs, strict=True))
    assert exact >= 35  # an untrained model gets none
    assert all(o.attention.shape == (len(o.tokens), len(o.src_tokens)) for o in outs)


def test_run_directory_holds_config_tokenizers_metrics_and_checkpoints(trained):
    names = {p.name for p in trained.run.path.iterdir()}
    assert {"config.yaml", "tokenizer.json", "metrics.jsonl", "best.pt", "last.pt"} <= names
    state = load_checkpoint(trained.run.path / "last.pt")
    assert state["progress"]["step"] == 300
    assert state["config"]["model"]["attention"] == "additive"


def test_beam_finds_higher_scoring_outputs_than_greedy_on_average(trained):
    """Not a per-sentence guarantee: beam search is approximate too."""
    model = trained.model.eval()
    pairs = [trained.src_tok.encode(e) for e, _ in toy_pairs(80, seed=11, max_words=9)]
    src, src_len = pad(pairs)
    g = greedy(model, src, src_len)
    b = beam_search(model, src, src_len, beam=5, length_penalty=0.0)
    mean_greedy = sum(h.logprob for h in g) / len(g)
    mean_beam = sum(hs[0].logprob for hs in b) / len(b)
    assert mean_beam >= mean_greedy


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_a_wider_beam_never_returns_a_worse_hypothesis_under_its_own_objective(trained, length_penalty):
    """On a trained model, over many sentences: beam 5's and beam 2's choice scores at least what
    greedy's (beam 1's) output scores under the same log P / lp(length)."""
    model = trained.model.eval()
    pairs = [trained.src_tok.encode(e) for e, _ in toy_pairs(80, seed=12, max_words=9)]
    src, src_len = pad(pairs)
    scores = {}
    for k in (1, 2, 5):
        hyps = beam_search(model, src, src_len, beam=k, length_penalty=length_penalty)
        scores[k] = [hs[0].score for hs in hyps]
    for narrow, wide in ((1, 2), (2, 5), (1, 5)):
        worse = [i for i, (a, b) in enumerate(zip(scores[narrow], scores[wide], strict=True)) if b < a - 1e-4]
        assert not worse, f"beam {wide} below beam {narrow} on sentences {worse}"


def params(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_a_stopped_and_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    straight = Trainer(from_dict(tiny_train_config(tmp_path / "a", train={"max_steps": 40})))
    straight.train()
    first = from_dict(tiny_train_config(tmp_path / "b", train={"max_steps": 20}))
    Trainer(first).train()
    second = from_dict(tiny_train_config(tmp_path / "b", train={"max_steps": 40}))
    resumed = Trainer(second, resume=True)
    assert resumed.progress.step == 20
    resumed.train()
    a, b = params(straight), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.progress.step == straight.progress.step == 40


def test_resume_crosses_an_epoch_boundary_exactly(tmp_path):
    # 300 short pairs in batches of <= 400 tokens: a few batches an epoch; resume mid-epoch
    def config(folder, steps):
        return from_dict(tiny_train_config(tmp_path / folder, train={"max_steps": steps, "valid_every": 15}))

    straight = Trainer(config("a", 45))
    straight.train()
    Trainer(config("b", 30)).train()
    resumed = Trainer(config("b", 45), resume=True)
    resumed.train()
    assert straight.progress.epoch >= 1
    assert all(torch.equal(v, params(resumed)[k]) for k, v in params(straight).items())


def test_an_existing_run_is_not_overwritten(tmp_path, trained):
    cfg = from_dict(tiny_train_config(tmp_path, train={"run_dir": str(trained.run.path)}))
    with pytest.raises(FileExistsError, match="pass --resume"):
        Trainer(cfg)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        Trainer(from_dict(tiny_train_config(tmp_path / "new")), resume=True)


def test_batches_are_bounded_seeded_and_cover_every_pair():
    lengths = [(i % 17 + 1, (i * 7) % 13 + 1) for i in range(500)]
    a = [b.tolist() for b in token_batches(lengths, 120, seed=3, epoch=0)]
    assert a == [b.tolist() for b in token_batches(lengths, 120, seed=3, epoch=0)]
    assert a != [b.tolist() for b in token_batches(lengths, 120, seed=3, epoch=1)]
    assert sorted(i for b in a for i in b) == list(range(500))
    for b in a:
        longest = max(max(lengths[i][0], lengths[i][1] + 1) for i in b)
        assert longest * len(b) <= 120


def test_checkpoints_are_written_atomically_and_corruption_is_one_line(tmp_path):
    path = tmp_path / "x.pt"
    save_checkpoint({"model": {"w": torch.ones(2)}, "config": {}}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]  # no temporary file left
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"x.pt: not a readable lookback checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_finished_run_stays_finished_and_a_larger_budget_trains_on(tmp_path):
    Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 20, "valid_every": 10}))).train()
    again = Trainer(
        from_dict(tiny_train_config(tmp_path, train={"max_steps": 20, "valid_every": 10})), resume=True
    )
    assert again.train().step == 20  # nothing more to do
    more = Trainer(
        from_dict(tiny_train_config(tmp_path, train={"max_steps": 30, "valid_every": 10})), resume=True
    )
    assert more.train().step == 30


def test_device_and_precision_are_checked_before_any_work(tmp_path):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            Trainer(from_dict(tiny_train_config(tmp_path, train={"device": "cuda"})))
        with pytest.raises(ValueError, match="fp16 needs a CUDA GPU"):
            Trainer(from_dict(tiny_train_config(tmp_path, train={"precision": "fp16"})))
        assert not (tmp_path / "run" / "config.yaml").exists()  # nothing written
    with pytest.raises(ValueError, match="train.device"):
        from_dict(tiny_train_config(tmp_path, train={"device": "tpu"}))


@pytest.mark.parametrize(
    "model, smoothing",
    [({}, 0.0), ({"cell": "lstm"}, 0.1)],
    ids=["gru", "lstm_label_smoothing"],  # the main job's cell, and the candidate of docs/recipe.md
)
def test_bf16_training_learns_and_resumes_like_fp32(tmp_path, caplog, model, smoothing):
    """bf16 autocast (on the CPU, or the GPU where there is one): the loss falls, the log names
    device and precision, resume is exact."""
    steps = {"precision": "bf16", "label_smoothing": smoothing, "valid_every": 20}
    raw = tiny_train_config(tmp_path, model=model, train={**steps, "max_steps": 40})
    full = Trainer(from_dict(raw))
    with caplog.at_level("INFO"):
        full.train()
    where = "cuda" if torch.cuda.is_available() else "cpu"  # train.device auto
    assert f"device: {where} (" in caplog.text and "precision: bf16" in caplog.text
    raw_half = tiny_train_config(tmp_path / "b", model=model, train={**steps, "max_steps": 20})
    Trainer(from_dict(raw_half)).train()
    raw_half["train"]["max_steps"] = 40
    resumed = Trainer(from_dict(raw_half), resume=True)
    resumed.train()
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    records = [json.loads(x) for x in (full.run.path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    assert "scaler" in load_checkpoint(full.run.path / "last.pt")


def test_fused_adam_takes_the_same_steps_and_resumes_exactly(tmp_path):
    """train.fused_adam: the same updates as torch's per-parameter Adam, to float rounding; and a
    fused run stopped and resumed ends where an uninterrupted fused one does, bit for bit. On the
    CPU, whose kernels are deterministic: on an H200 (cuDNN's GRU, CUDA's own fused Adam) the two
    runs differed by more than 1e-5 after 20 updates (the cause not taken apart)."""
    runs = {}
    cpu = {"device": "cpu"}
    for fused in (False, True):
        raw = tiny_train_config(tmp_path / str(fused), train={"max_steps": 20, "fused_adam": fused, **cpu})
        runs[fused] = Trainer(from_dict(raw))
        runs[fused].train()
    assert runs[True].optimizer.defaults["fused"] and not runs[False].optimizer.defaults["fused"]
    a, b = params(runs[False]), params(runs[True])
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    half = tiny_train_config(tmp_path / "half", train={"max_steps": 10, "fused_adam": True, **cpu})
    Trainer(from_dict(half)).train()
    half["train"]["max_steps"] = 20
    resumed = Trainer(from_dict(half), resume=True)
    resumed.train()
    c = params(resumed)
    assert all(torch.equal(b[k], c[k]) for k in b)


@pytest.mark.slow
@pytest.mark.parametrize("model", [{}, {"input_feeding": True}], ids=["whole", "step"])
def test_compiled_training_takes_the_same_steps_as_eager(tmp_path, model):
    """train.compile: the compiled loss (a decoder that runs all steps at once) or the compiled step
    (input feeding: the decoder steps) gives the eager run's weights, to float tolerance."""
    runs = {}
    for compiled in (False, True):
        raw = tiny_train_config(
            tmp_path / str(compiled), model=model, train={"max_steps": 10, "compile": compiled}
        )
        runs[compiled] = Trainer(from_dict(raw))
        runs[compiled].train()
    a, b = params(runs[False]), params(runs[True])
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    whole = hasattr(runs[True].loss_module, "_orig_mod")  # torch.compile's wrapper of the loss
    assert (runs[True].model.decoder._compiled_step is not None, whole) == (bool(model), not model)
    # compiling happens in the first update, on the training clock, and is reported once
    (compiled,) = records(runs[True].run, "compile")
    assert compiled["step"] == 0 and 0 < compiled["first_update_seconds"] <= runs[True].progress.seconds
    assert records(runs[False].run, "compile") == []


def records(run: RunDir, kind: str) -> list[dict]:
    lines = (run.path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_the_last_update_of_the_last_epoch_is_validated_once(tmp_path):
    raw = tiny_train_config(tmp_path, train={"max_steps": 0, "max_epochs": 1, "log_every": 1})
    n = len(Trainer(from_dict(raw)).plan.epoch_batches(0))  # updates in one epoch, one batch each
    raw = tiny_train_config(tmp_path / "b", train={"max_steps": 0, "max_epochs": 1, "valid_every": n})
    trainer = Trainer(from_dict(raw))
    assert trainer.train().step == n
    assert [r["step"] for r in records(trainer.run, "valid")] == [n]


def test_tokens_per_second_leave_out_the_validation_pauses(tmp_path, monkeypatch):
    raw = tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2, "log_every": 4})
    trainer = Trainer(from_dict(raw))
    real = Trainer._evaluate
    monkeypatch.setattr(Trainer, "_evaluate", lambda self: (time.sleep(2.0), real(self))[1])
    trainer.train()
    (line,) = records(trainer.run, "train")
    assert line["seconds"] > 2.0  # the validation at step 2 slept inside the window ...
    tokens = sum(b.n_tokens for b in _first_updates(trainer, 4))
    assert line["tokens_per_s"] > tokens / 2.0  # ... but the rate counts the updates alone


def _first_updates(trainer: Trainer, n: int):
    plan = UpdatePlan(trainer.plan.pairs, trainer.plan.epoch_batches)
    updates = iter(plan)
    return [b for _ in range(n) for b in next(updates)]


def test_resume_refuses_a_change_that_breaks_an_exact_resume_unless_asked(tmp_path, caplog):
    Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2}))).train()
    changed = tiny_train_config(tmp_path, train={"max_steps": 8, "valid_every": 2, "seed": 7})
    changed["model"]["dropout"] = 0.2
    with pytest.raises(ConfigError) as err:
        Trainer(from_dict(changed), resume=True)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    assert "model.dropout: 0.0 -> 0.2" in lines[0] and "train.seed: 1 -> 7" in lines[1]
    assert all("--accept-changes" in line for line in lines)
    trainer = Trainer(from_dict(changed), resume=True, accept_changes=True)
    assert trainer.train().step == 8
    saved = load_checkpoint(trainer.run.last)["config"]
    assert saved["train"]["seed"] == 7
    assert "seed: 7" in (trainer.run.path / "config.yaml").read_text()


def test_a_changed_learning_rate_and_schedule_apply_on_resume(tmp_path):
    Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2}))).train()
    raw = tiny_train_config(
        tmp_path, train={"max_steps": 8, "valid_every": 2, "log_every": 2, "lr": 0.002, "lr_patience": 5}
    )
    trainer = Trainer(from_dict(raw), resume=True)  # no refusal: lr and schedule may change
    assert trainer.optimizer.param_groups[0]["lr"] == 0.002
    assert trainer.lr.plateau.patience == 5
    trainer.train()
    assert records(trainer.run, "train")[-1]["lr"] == 0.002


def test_the_cli_refuses_a_changed_resume_in_one_line_per_key_until_told(tmp_path, capsys):
    import yaml

    from lookback.cli import main

    raw = tiny_train_config(tmp_path, train={"max_steps": 2, "valid_every": 2})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["train", str(path)]) == 0
    more = ["--set", "train.max_steps=4", "--set", "train.max_tokens=300"]
    assert main(["train", str(path), "--resume", *more]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.max_tokens: 400 -> 300" in err[0] and "--accept-changes" in err[0]
    assert main(["train", str(path), "--accept-changes"]) == 2  # only with --resume
    assert main(["train", str(path), "--resume", "--accept-changes", *more]) == 0
    assert load_checkpoint(tmp_path / "run" / "last.pt")["progress"]["step"] == 4
