"""The bottleneck study: a tiny study end to end with its numbers checked, the compression table
by hand, and study files checked as configs are."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from lookback.cli import main
from lookback.config import ConfigError, from_dict
from lookback.explain.curves import read_metrics
from lookback.model.seq2seq import count_parameters
from lookback.study import run as study_module
from lookback.study.run import _make_synth, compression_rows, load_study
from lookback.translator import Translator

from ..helpers import assert_drawn
from .studies import kept_evaluations, read_results, tiny_study


@pytest.fixture
def study_file(tmp_path):
    return tiny_study(tmp_path)


def test_a_tiny_study_writes_every_table_and_plot_with_the_right_numbers(study_file, monkeypatch, capsys):
    returned = {}  # run directory -> the Progress that training returned

    class Recording(study_module.Trainer):
        def train(self):
            progress = super().train()
            returned[self.cfg.train.run_dir] = progress
            return progress

    monkeypatch.setattr(study_module, "Trainer", Recording)
    assert main(["study", str(study_file)]) == 0
    out = study_file.parent / "out"
    result = read_results(out)
    assert set(result["models"]) == {"none", "additive"}
    assert result["device"].startswith("cpu")
    (spec,) = result["tests"]
    for name, model in result["models"].items():
        run_dir = out / "runs" / name
        assert model["parameters"] == count_parameters(Translator.load(run_dir).model)
        assert model["train_seconds"] == returned[str(run_dir)].seconds > 0
        assert model["overrides"] == [f'model.attention="{name}"']
        assert list(result["tests"][spec]) == ["beam1", "beam3", "significance", "hard1"]
        buckets = result["tests"][spec]["beam3"][name]
        assert {label: b["sentences"] for label, b in buckets.items()} == {"1-10": 3, "11-20": 2, "61+": 1}
        assert list(buckets) == ["1-10", "11-20", "61+"]  # short to long
        assert all(b["length_ratio"] > 0 for b in buckets.values())  # output over reference length
        assert buckets["61+"]["mean_src_words"] == 65 and buckets["11-20"]["mean_src_words"] == 15
        assert all(0 <= b["chrf"] <= 100 and 0 <= b["repeated_bigrams"] <= 1 for b in buckets.values())
        covered = [b["under_covered"] for b in buckets.values()]
        assert all(x is None for x in covered) if name == "none" else all(0 <= x <= 1 for x in covered)
        looks = [b["attention"] for b in buckets.values()]  # diagnostics.py, pooled per bucket
        if name == "none":
            assert all(x is None for x in looks)
        else:
            assert [x["sentences"] for x in looks] == [3, 2, 1] and all(0 <= x["entropy"] <= 1 for x in looks)
    assert list(result["tests"][spec]["hard1"]) == ["additive"]  # hard attention needs attention
    hard_bleu = {label: b["bleu"] for label, b in result["tests"][spec]["hard1"]["additive"].items()}
    with (out / f"hard_attention_{spec.strip('/').replace('/', '_')}.csv").open() as f:
        hard_rows = list(csv.DictReader(f))
    soft_bleu = {label: b["bleu"] for label, b in result["tests"][spec]["beam1"]["additive"].items()}
    for r in hard_rows:  # hard against the same model's soft greedy output
        assert float(r["hard_bleu"]) == pytest.approx(hard_bleu[r["bucket"]], abs=0.006)
        assert float(r["soft_bleu"]) == pytest.approx(soft_bleu[r["bucket"]], abs=0.006)
    flops = {(r["model"], r["source_tokens"]): r for r in result["attention_flops"]}
    assert set(flops) == {(m, S) for m in ("none", "additive") for S in (5, 20)}
    assert flops[("none", 20)]["attention_flops_per_step"] == 0
    assert (
        flops[("additive", 20)]["attention_flops_per_step"]
        > flops[("additive", 5)]["attention_flops_per_step"]
    )
    assert_drawn(out / "attention_flops.png")
    slug = spec.strip("/").replace("/", "_")
    with (out / f"bleu_by_length_{slug}.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["beam"], r["bucket"], r["sentences"]) for r in rows] == [
        (m, k, label, str(n))
        for k in ("1", "3")
        for m in ("none", "additive")
        for label, n in (("1-10", 3), ("11-20", 2), ("61+", 1))
    ]
    with (out / f"attention_diagnostics_{slug}.csv").open() as f:
        looks = list(csv.DictReader(f))  # attending models only
    assert {r["model"] for r in looks} == {"additive"} and len(looks) == 6  # 2 beams x 3 buckets
    assert "Attention diagnostics (diagnostics.py)" in (out / "report.md").read_text()
    assert (out / "takeoff.png").stat().st_size > 10_000 and "(takeoff.png)" in (
        out / "report.md"
    ).read_text()
    with (out / f"gain_over_none_{slug}.csv").open() as f:
        gains = list(csv.DictReader(f))  # additive against none at the same beam size, per bucket
    bleu = {(r["model"], r["beam"], r["bucket"]): float(r["bleu"]) for r in rows}
    assert [(r["model"], r["beam"], r["bucket"], r["baseline"]) for r in gains] == [
        ("additive", k, label, "none") for k in ("1", "3") for label in ("1-10", "11-20", "61+")
    ]
    for r in gains:
        assert float(r["baseline_bleu"]) == bleu[("none", r["beam"], r["bucket"])]
        assert float(r["gain"]) == pytest.approx(
            bleu[("additive", r["beam"], r["bucket"])] - bleu[("none", r["beam"], r["bucket"])], abs=0.011
        )
    with (out / f"compression_{slug}.csv").open() as f:
        compression = list(csv.DictReader(f))
    assert {r["model"] for r in compression} == {"none"}
    assert {r["numbers_kept"] for r in compression} == {"48"}  # c = 2 x 24: both directions
    with (out / f"cost_{slug}.csv").open() as f:
        cost = list(csv.DictReader(f))
    assert {r["model"] for r in cost} == {"none", "additive"}
    for suffix in ("png", "svg"):
        assert_drawn(out / f"bleu_by_length_{slug}.{suffix}", min_marks=2)  # a line per model
        assert_drawn(out / f"cost_{slug}.{suffix}", min_marks=2)
    assert "### Gain over the model without attention" in (out / "report.md").read_text()
    with (out / "learning.csv").open() as f:
        learning = {r["model"]: r for r in csv.DictReader(f)}
    kept = read_metrics(out / "curves.jsonl.xz")  # every run's log beside the report, gzipped
    for name in ("none", "additive"):  # the last validation, as the run's own metrics say
        own = read_metrics(out / "runs" / name)
        assert [{k: v for k, v in r.items() if k != "run"} for r in kept if r["run"] == name] == own
        last = [r for r in own if r["kind"] == "valid"][-1]
        assert int(learning[name]["updates"]) == last["step"]
        assert float(learning[name]["final_bleu"]) == pytest.approx(last["bleu"], abs=0.006)
    assert_drawn(out / "learning.png")
    saved = yaml.safe_load((out / "configs" / "additive.yaml").read_text())
    assert saved["train"]["lr"] == 0.005 and saved["train"]["run_dir"] == str(out / "runs" / "additive")
    first_mtime = (out / "runs" / "none" / "last.pt").stat().st_mtime
    # a second run trains nothing again, and --evaluate-only needs no training at all
    assert main(["study", str(study_file), "--evaluate-only"]) == 0
    assert all(m["train_seconds"] is None for m in read_results(out)["models"].values())
    assert main(["study", str(study_file)]) == 0
    assert (out / "runs" / "none" / "last.pt").stat().st_mtime == first_mtime
    evaluated = kept_evaluations(out)
    assert set(evaluated) == {"none", "additive"}
    (out / "runs" / "additive" / "best.pt").touch()  # as if retrained: --models none must not look at it
    assert main(["study", str(study_file), "--evaluate-only", "--models", "none"]) == 0
    # only none was asked for; the report still covers every model evaluated so far
    assert set(read_results(out)["models"]) == {"none", "additive"}
    assert (
        kept_evaluations(out) == evaluated
    )  # none's as it was; additive's not redone (its checkpoint differs)
    with (out / "learning.csv").open() as f:  # learning covers every model trained so far
        assert [r["model"] for r in csv.DictReader(f)] == ["none", "additive"]
    capsys.readouterr()
    assert main(["study", str(study_file), "--models", "dot"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "lookback: error: study tiny: no model or run named 'dot' (models: none, additive; a run: MODEL#SEED)"
    ]


def test_the_learning_table_by_hand(tmp_path):
    records = [
        {"step": 50, "seconds": 30.0, "kind": "train", "tokens_per_s": 3000.0},
        {"step": 100, "seconds": 60.0, "kind": "train", "tokens_per_s": 1000.0},
        {"step": 150, "seconds": 90.0, "kind": "train", "tokens_per_s": 2000.0},
        {"step": 100, "seconds": 66.0, "kind": "valid", "bleu": 12.0},
        {"step": 200, "seconds": 132.0, "kind": "valid", "bleu": 41.0},
        {"step": 300, "seconds": 198.0, "kind": "valid", "bleu": 38.5},
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (row,) = study_module.learning_rows({"m": run, "later": tmp_path / "not_yet"})
    assert study_module.learning_rows({"m": run / "metrics.jsonl"}) == [row]  # the file itself
    assert row == {
        "model": "m",
        "updates": 300,
        "minutes": 3.3,
        "tokens_per_s": 2000,  # the median window
        "final_bleu": 38.5,
        "best_bleu": 41.0,
        "min_to_20": 2.2,  # 41.0 at 132 s is the first at or above 20, 30 and 40
        "min_to_30": 2.2,
        "min_to_40": 2.2,
        "min_to_45": None,
        "min_to_50": None,
    }


def test_the_compression_table_by_hand():
    cfg = from_dict({"model": {"emb_size": 100, "hidden_size": 128, "bidirectional": True}})
    buckets = {
        "1-10": {"mean_src_tokens": 7.0, "bleu": 35.2},
        "41-60": {"mean_src_tokens": 50.0, "bleu": 8.1},
    }
    rows = compression_rows(cfg, buckets)
    # notes: 7 words x 100 dims = 700 numbers in, into a context of 2 x 128 = 256 numbers
    assert rows[0] == {
        "bucket": "1-10",
        "source_tokens": 7.0,
        "numbers_in": 700,
        "numbers_kept": 256,
        "ratio": 2.73,
        "bleu": 35.2,
    }
    assert rows[1]["numbers_in"] == 5000 and rows[1]["ratio"] == 19.53


def _problems(path, raw) -> list[str]:
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_study(path)
    lines = str(err.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)  # each names the file
    return [line.removeprefix(f"{path}: ") for line in lines]


def test_study_files_list_every_problem_at_once_with_did_you_mean(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    del raw["models"]
    raw.update(
        modles={"none": {}},
        tests=3,
        beam=0,
        grid={"h8": [1]},
        synth={"task": "revers", "lengths": "5-", "sed": 2},
    )
    assert _problems(tmp_path / "bad.yaml", raw) == [
        "tests: got 3, expected a list of strings",
        "modles: unknown key (did you mean 'models'?)",
        "grid.h8: got [1], expected a mapping",
        "synth.task: got 'revers', expected one of copy, reverse, translate, articles",
        "synth.sed: unknown key (did you mean 'seed'?)",
        "synth.out: required, but missing or empty",
        "models: required, but missing or empty",
        "beam: got 0, expected an integer >= 1, or a list of them",
        "synth.lengths: got '5-', expected LO-HI with 1 <= LO <= HI, such as 5-60, or one length",
    ]


def test_a_list_of_beam_sizes_is_checked_size_by_size(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    assert load_study(study_file).beam == [1, 3]
    for beam, expected in (
        ([1, 0], "an integer >= 1, or a list of them"),
        ([], "an integer >= 1, or a list of them"),
        (["5"], "an integer"),
    ):
        assert _problems(tmp_path / "bad.yaml", {**raw, "beam": beam}) == [
            f"beam: got {beam!r}, expected {expected}"
        ]


def test_every_model_config_problem_is_listed_with_its_models(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    raw["models"]["dot"] = {"model.atention": "dot"}
    raw["models"]["wide"] = {"model.hidden_size": 0}
    raw["set"]["train.lrr"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_study(bad)
    base = tmp_path / "base.yaml"
    assert str(err.value).splitlines() == [
        f"{base}: train.lrr: unknown key (did you mean 'lr'?) (in none, additive, dot, wide)",
        f"{base}: model.atention: unknown key (did you mean 'attention'?) (in dot)",
        f"{base}: model.hidden_size: got 0, expected an integer >= 1 (in wide)",
    ]


def test_a_study_file_may_leave_out_what_has_a_default(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    raw.update(tests=raw["tests"][0], set=None, models={"base": None, "none": {"model.attention": "none"}})
    del raw["out_dir"], raw["beam"]
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    study = load_study(path)
    assert study.tests == [raw["tests"]]  # one test set alone: a list of one
    assert study.out_dir == "studies/tiny" and study.beam == [1] and study.synth is None
    assert study.base == str(tmp_path / "base.yaml")  # relative to the study file
    configs = study.configs()
    assert configs["base"].model.attention == "additive" and configs["none"].model.attention == "none"


def test_a_study_writes_its_synthetic_corpus_when_missing(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    raw["synth"] = {"task": "reverse", "lengths": "3-5", "seed": 2, "out": str(tmp_path / "rev")}
    path = tmp_path / "with_synth.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    study = load_study(path)
    assert (study.synth.vocab, study.synth.seed) == (50, 2)
    _make_synth(study.synth)
    src = (tmp_path / "rev" / "test.src").read_text().splitlines()
    tgt = (tmp_path / "rev" / "test.tgt").read_text().splitlines()
    assert [t.split() for t in tgt] == [s.split()[::-1] for s in src]
    assert all(3 <= len(s.split()) <= 5 for s in src)
    raw["synth"] = {"task": "copy", "lengths": 4, "out": str(tmp_path / "copy"), "vocab": 5}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    _make_synth(load_study(path).synth)  # one length, given as a number
    src = (tmp_path / "copy" / "test.src").read_text().splitlines()
    assert all(len(s.split()) == 4 for s in src) and {w for s in src for w in s.split()} <= {
        f"a{i}" for i in range(5)
    }
    raw["synth"] = {"task": "reverse"}
    assert _problems(path, raw) == [
        "synth.lengths: required, but missing or empty",
        "synth.out: required, but missing or empty",
    ]


def test_the_gain_of_attention_is_over_the_fixed_context_of_its_own_size():
    """A study that varies the fixed context (none64 ... none512) compares each attention model
    with the model without attention whose encoder is its size, not with the first one listed."""
    from lookback.study.run import _baseline

    def cfg(**model):
        return from_dict({"model": {"hidden_size": 128, **model}})

    configs = {
        "none64": cfg(attention="none", hidden_size=32),
        "none": cfg(attention="none"),
        "additive": cfg(attention="additive"),
        "wide": cfg(attention="additive", hidden_size=256),  # no fixed-context model of its size
    }
    assert _baseline("additive", configs) == "none"
    assert _baseline("wide", configs) == "none64"  # the first, when no size matches
    assert _baseline("none64", configs) is None and _baseline("none", configs) is None


def test_seeds_and_paired_tests_in_a_study(study_file, capsys):
    """`seeds` adds runs MODEL#SEED; the report gives each model's BLEU over its seeds and tests
    every model against the models without attention on the first seeds' outputs."""
    import sacrebleu

    from lookback.decoding.significance import paired_test

    raw = yaml.safe_load(study_file.read_text())
    raw.update(seeds={"additive": [2]}, beam=[2])
    raw.pop("hard_attention")
    study_file.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    assert main(["study", str(study_file)]) == 0
    out = study_file.parent / "out"
    assert yaml.safe_load((out / "configs" / "additive#2.yaml").read_text())["train"]["seed"] == 2
    result = read_results(out)
    (spec,) = result["tests"]
    sig = result["tests"][spec]["significance"]
    assert sig["beam"] == 2 and set(sig["models"]) == {"none", "additive"}
    slug = spec.strip("/").replace("/", "_")
    ref = (study_file.parent / "data" / "lengths.fr").read_text().splitlines()
    hyps = {
        r: (out / "outputs" / f"{r}.{slug}.beam2.txt").read_text().splitlines()
        for r in ("none", "additive", "additive#2")
    }
    scores = [sacrebleu.corpus_bleu(hyps[r], [ref]).score for r in ("additive", "additive#2")]
    seeds = sig["models"]["additive"]["all"]
    assert seeds["seeds"] == 2 and seeds["mean"] == pytest.approx(sum(scores) / 2)
    assert seeds["range"] == pytest.approx(abs(scores[0] - scores[1]))
    assert sig["models"]["none"]["all"]["seeds"] == 1 and sig["models"]["none"]["all"]["range"] == 0
    rows = {(r["model"], r["against"], r["bucket"]): r for r in sig["pairs"]}
    assert set(rows) == {("additive", "none", b) for b in ("all", "1-10", "11-20", "61+")}
    whole = rows[("additive", "none", "all")]
    # one seed of none against each of additive's two: the larger p of each test
    each = [paired_test(hyps["none"], hyps[r], ref, ("none", "additive")) for r in ("additive", "additive#2")]
    assert whole["pairings"] == 2
    assert whole["p_bootstrap"] == max(e["p"]["bs"]["bleu"] for e in each)
    assert whole["p_randomisation"] == max(e["p"]["ar"]["bleu"] for e in each)
    assert whole["seed_range"] == pytest.approx(seeds["range"])  # none's own: unknown, so additive's
    p = max(whole["p_bootstrap"], whole["p_randomisation"])
    difference = p < 0.05 and abs(whole["mean_difference"]) > whole["seed_range"]
    assert whole["verdict"] == (
        "no difference" if not difference else "better" if whole["mean_difference"] > 0 else "worse"
    )
    report = (out / "report.md").read_text()
    assert (
        "BLEU over each model's seeds (beam 2" in report
        and "Paired tests (sacreBLEU: bootstrap, approximate randomisation) of every seed" in report
    )
    # lookback compare reads the same files
    capsys.readouterr()
    a, b = (str(out / "outputs" / f"{r}.{slug}.beam2.txt") for r in ("none", "additive"))
    assert main(["compare", a, b, "--ref", str(study_file.parent / "data" / "lengths.fr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["p"]["ar"]["bleu"] == whole["p_randomisation"]


@pytest.mark.parametrize("key", ["seeds", "compare"])
def test_seeds_and_compare_name_models_of_the_study(study_file, key):
    raw = yaml.safe_load(study_file.read_text())
    raw[key] = {"dot": [2]} if key == "seeds" else ["dot"]
    study_file.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{key}: no model named 'dot' \\(models: none, additive\\)"):
        load_study(study_file)


def test_a_study_goes_on_from_its_kept_evaluations_without_the_runs(study_file, monkeypatch):
    """A study's evaluations.json.xz and curves.jsonl.xz (committed, say) stand for runs that are
    gone: nothing is trained or evaluated again, the report is the same, and a model added later
    is trained alone."""
    import shutil

    import sacrebleu

    assert main(["study", str(study_file)]) == 0
    out = study_file.parent / "out"
    before = read_results(out)
    kept = kept_evaluations(out)
    assert set(kept) == {"none", "additive"}
    study = load_study(study_file)
    data = next(iter(study.configs([]).values())).data
    (spec,) = study.tests
    ref = study_module.read_parallel(spec, data.src_lang, data.tgt_lang)[1]
    for name, evaluation in kept.items():  # each beam's score; only the widest beam's outputs
        greedy, widest = evaluation["tests"][spec]["beam1"], evaluation["tests"][spec]["beam3"]
        assert "outputs" not in greedy and len(widest["outputs"]) == len(ref) == 6
        written = (out / "outputs" / f"{name}.{study_module._slug(spec)}.beam1.txt").read_text().splitlines()
        assert greedy["corpus"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(written, [ref]).score)
        assert widest["corpus"]["bleu"] == pytest.approx(
            sacrebleu.corpus_bleu(widest["outputs"], [ref]).score
        )
        assert greedy["corpus"]["sentences"] == widest["corpus"]["sentences"] == 6
    shutil.rmtree(out / "runs")  # a fresh clone: the evaluations and logs are kept, the runs not

    def refuse(*args, **kwargs):
        raise AssertionError("trained or loaded again")

    monkeypatch.setattr(study_module, "Trainer", refuse)
    monkeypatch.setattr(study_module.Translator, "load", refuse)
    assert main(["study", str(study_file)]) == 0
    after = read_results(out)
    assert after["tests"] == before["tests"] and after["learning"] == before["learning"]
    assert {m: r["parameters"] for m, r in after["models"].items()} == {
        m: r["parameters"] for m, r in before["models"].items()
    }
    monkeypatch.undo()
    raw = yaml.safe_load(study_file.read_text())
    raw["models"]["general"] = {"model.attention": "general"}
    study_file.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    trained = []

    class Recording(study_module.Trainer):
        def train(self):
            trained.append(self.cfg.train.run_dir)
            return super().train()

    monkeypatch.setattr(study_module, "Trainer", Recording)
    assert main(["study", str(study_file)]) == 0
    assert trained == [str(out / "runs" / "general")]
    assert set(read_results(out)["models"]) == {"none", "additive", "general"}


def test_one_seed_of_a_model_is_picked_by_its_run_name(study_file):
    raw = yaml.safe_load(study_file.read_text(encoding="utf-8"))
    raw["seeds"] = {"additive": [2, 3]}
    study_file.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    study = load_study(study_file)
    assert list(study.configs(only=["additive#2", "none"])) == ["none", "additive#2"]
    assert study.configs(only=["additive#2"])["additive#2"].train.seed == 2
    with pytest.raises(ConfigError, match="no model or run named 'additive#4'"):
        study.configs(only=["additive#4"])


def test_the_attention_only_study_compares_what_its_comments_say():
    """Issue 59's study: the transformer is the shipped config's, the mixed models are the two
    sides swapped, and all four are within 10% of the main job's parameters."""
    from lookback.config import load_config
    from lookback.model.seq2seq import build_model

    study = load_study("study/attention_only")
    configs = study.configs()
    assert len(configs) == 6 * 2 * 3  # models x (multi30k, long) x seeds
    shipped = load_config("multi30k_en_fr_transformer")
    tuned = load_config(str(Path(__file__).parents[2] / "results" / "tune" / "transformer" / "best.yaml"))
    keys = ("lr", "warmup", "schedule", "label_smoothing", "max_tokens", "time_limit")
    for name, config in (("transformer", shipped), ("transformer_tuned", tuned)):
        own = configs[f"{name}@multi30k"]
        assert own.model == config.model, name
        for key in keys:
            assert getattr(own.train, key) == getattr(config.train, key), (name, key)
    assert configs["rnn@multi30k"].model == load_config("quickstart").model
    # rnn: the main job as the study first measured it, before its smoothing; rnn_smoothed: as shipped
    assert configs["rnn@long"].train.label_smoothing == 0.0
    assert configs["rnn_smoothed@long"].model == load_config("quickstart").model
    assert (
        configs["rnn_smoothed@long"].train.label_smoothing
        == load_config("quickstart").train.label_smoothing
        > 0
    )
    sides = {
        name: (configs[f"{name}@multi30k"].model.encoder, configs[f"{name}@multi30k"].model.decoder)
        for name in study.models
    }
    assert sides == {
        "rnn": ("rnn", "rnn"),
        "rnn_smoothed": ("rnn", "rnn"),
        "transformer": ("transformer", "transformer"),
        "transformer_tuned": ("transformer", "transformer"),
        "rnn_enc_tf_dec": ("rnn", "transformer"),
        "tf_enc_rnn_dec": ("transformer", "rnn"),
    }
    sizes = {
        name: count_parameters(build_model(configs[f"{name}@multi30k"].model, 8000, 8000))
        for name in study.models
    }
    for name, size in sizes.items():
        assert abs(size / sizes["rnn"] - 1) <= 0.10, (name, size, sizes["rnn"])
    long = configs["rnn@long#2"]
    assert long.data.train == "concat:1-4:multi30k:train" and long.train.seed == 2
