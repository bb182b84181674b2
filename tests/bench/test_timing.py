"""bench/common.py's timed training loop on a fake clock: the validation curve and time to quality."""

from __future__ import annotations

import itertools
import json

import pytest

from bench import common
from bench.common import minutes_to, timed_training
from lookback.config import from_dict

from ..helpers import assert_drawn


class Clock:
    """time.perf_counter that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(common.time, "perf_counter", c)
    return c


def test_validation_time_is_left_out_of_the_training_clock_and_the_budget(clock):
    bleus = iter([10.0, 25.0, 41.0, 52.0, 53.0])

    def step(batch) -> int:
        clock.now += 1.0  # one second an update, 10 target tokens
        return 10

    def validate() -> float:
        clock.now += 7.0  # slow validations must not eat the training budget
        return next(bleus)

    figures = timed_training(
        itertools.repeat(None), step, lambda b: 2, budget_s=40, warmup_steps=0, validate=validate,
        validate_every_s=10,
    )  # fmt: skip
    assert figures["steps"] == 40 and figures["seconds"] == 40.0  # 40 s of training; 4 x 7 s not counted
    curve = figures["curve"]
    assert [(p["seconds"], p["steps"], p["bleu"]) for p in curve] == [
        (10.0, 10, 10.0),
        (20.0, 20, 25.0),
        (30.0, 30, 41.0),
        (40.0, 40, 52.0),  # the end, after the budget
    ]
    assert all(p["validate_seconds"] == 7.0 for p in curve)
    assert figures["target_tokens_per_s"] == 10.0  # 400 tokens in 40 s of training
    assert minutes_to(curve, 40) == pytest.approx(0.5) and minutes_to(curve, 25) == pytest.approx(1 / 3)
    assert minutes_to(curve, 60) is None


class Killed(Exception):
    """The process dies mid-training (a session's end, a kill)."""


def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_figures(clock):
    def run(kill_at: int | None = None, resume: dict | None = None):
        """40 s of training, one update a second (and its batch number as its tokens), a 7 s
        validation every 10 s, a 2 s checkpoint after each; killed at update `kill_at`."""
        saved = []

        def step(batch) -> int:
            if batch == kill_at:
                raise Killed
            clock.now += 1.0
            return batch

        def validate() -> float:
            clock.now += 7.0
            return 50.0

        def checkpoint(progress):
            clock.now += 2.0
            saved.append(json.loads(json.dumps(progress)))  # what a file keeps

        first = resume["steps"] + 1 if resume else 1
        try:
            figures = timed_training(
                itertools.count(first), step, lambda b: 1, budget_s=40, warmup_steps=3,
                validate=validate, validate_every_s=10, checkpoint=checkpoint, resume=resume,
            )  # fmt: skip
        except Killed:
            figures = None
        return figures, saved

    whole, saved_whole = run()
    assert [p["steps"] for p in saved_whole] == [10, 20, 30]  # none after the last validation
    assert [p.get("checkpoint_seconds") for p in whole["curve"]] == [2.0, 2.0, 2.0, None]
    killed, saved = run(kill_at=25)
    assert killed is None and [p["steps"] for p in saved] == [10, 20]
    clock.now += 1000.0  # the next session
    resumed, _ = run(resume=saved[-1])
    for key in ("steps", "seconds", "measured_steps", "measured_seconds", "measured_target_tokens"):
        assert resumed[key] == whole[key], key
    assert resumed["steps"] == 40 and resumed["seconds"] == 40.0
    assert resumed["target_tokens_per_s"] == whole["target_tokens_per_s"] == sum(range(4, 41)) / 37
    points = [(p["seconds"], p["steps"]) for p in resumed["curve"]]
    assert points == [(p["seconds"], p["steps"]) for p in whole["curve"]]
    assert points == [(10.0, 10), (20.0, 20), (30.0, 30), (40.0, 40)]
    assert whole["processes"] == 1 and resumed["processes"] == 2


def test_without_validation_the_loop_is_as_before(clock):
    def step(batch) -> int:
        clock.now += 0.5
        return 4

    figures = timed_training(itertools.repeat(None), step, lambda b: 1, budget_s=10, warmup_steps=4)
    assert "curve" not in figures and figures["steps"] == 20 and figures["seconds"] == 10.0
    assert figures["measured_steps"] == 16 and figures["measured_seconds"] == 8.0
    assert figures["target_tokens_per_s"] == 8.0


def test_time_to_quality_levels_and_joeys_final_score_with_ratios(tmp_path):
    from bench.curves import main as plot
    from bench.headline import figures_and_ratios

    def system(points):
        curve = [{"seconds": s, "steps": 1, "bleu": b, "validate_seconds": 1.0} for s, b in points]
        return {"train": {"figures": {"curve": curve}}}

    systems = {
        "lookback": system([(60, 10), (120, 45), (180, 52)]),
        "joey": system([(60, 5), (120, 30), (240, 41)]),
    }
    table, ratios = figures_and_ratios(systems)
    assert table["minutes to validation BLEU 40"] == {"lookback": 2.0, "joey": 4.0}
    assert table["minutes to validation BLEU 50"] == {"lookback": 3.0, "joey": None}
    assert table["minutes to Joey's final validation BLEU"] == {"lookback": 2.0, "joey": 4.0}  # 41
    assert ratios["minutes to Joey's final validation BLEU"] == 0.5  # half Joey's time
    assert table["validation BLEU at the end"] == {"lookback": 52, "joey": 41}
    record = {"config": "feed", "machine": {"cpu_model": "AMD EPYC", "gpu": None}, "systems": systems}
    common.write_json(tmp_path / "r.json", record)
    assert plot([str(tmp_path / "r.json"), "-o", str(tmp_path / "curves.png")]) == 0
    assert_drawn(tmp_path / "curves.png")


def test_named_results_label_their_curves_and_a_reused_joey_curve_is_drawn_once(tmp_path):
    from bench.curves import lines, named

    def curve(points):
        return {"train": {"figures": {"curve": [{"seconds": s, "bleu": b} for s, b in points]}}}

    def record(recipe_points):
        systems = {"joey": curve([(60, 5), (120, 30)]), "recipe": curve(recipe_points)}
        return {"config": "feed", "settings": {"recipe": {"path": "configs/x.yaml"}}, "systems": systems}

    assert named("before=a.json") == ("before", "a.json") and named("a.json") == ("", "a.json")
    (tmp_path / "odd=name.json").write_text("{}")
    assert named(str(tmp_path / "odd=name.json")) == ("", str(tmp_path / "odd=name.json"))  # a file
    drawn = lines([("before", record([(60, 20)])), ("after", record([(60, 40)]))])
    assert [label for label, _, _ in drawn] == [
        "before: joey, feed",
        "before: recipe, x.yaml",
        "after: recipe, x.yaml",
    ]
    assert drawn[2][1:] == ([1.0], [40])
    only = lines([("before", record([(60, 20)])), ("after", record([(60, 40)]))], ["recipe"])
    assert [label for label, _, _ in only] == ["before: recipe, x.yaml", "after: recipe, x.yaml"]


def test_curves_draw_only_the_named_systems_and_say_when_none_is_there(tmp_path, capsys):
    from bench.curves import main as plot

    curve = {"train": {"figures": {"curve": [{"seconds": 60, "bleu": 30}, {"seconds": 120, "bleu": 50}]}}}
    record = {"config": "feed", "machine": {"cpu_model": "AMD EPYC", "gpu": None}, "systems": {"joey": curve}}
    common.write_json(tmp_path / "r.json", record)
    out = tmp_path / "zoom.png"
    assert plot([str(tmp_path / "r.json"), "--systems", "joey", "--ylim", "25", "55", "-o", str(out)]) == 0
    assert_drawn(out)
    with pytest.raises(SystemExit):
        plot([str(tmp_path / "r.json"), "--systems", "recipe", "-o", str(tmp_path / "none.png")])
    assert "no curve of recipe in the result files" in capsys.readouterr().err


def test_the_recipe_system_has_its_own_ratios_to_joey():
    from bench.headline import figures_and_ratios

    def system(points):
        curve = [{"seconds": s, "steps": 1, "bleu": b, "validate_seconds": 1.0} for s, b in points]
        return {"train": {"figures": {"curve": curve}}}

    systems = {
        "lookback": system([(60, 10), (240, 41)]),
        "joey": system([(60, 5), (120, 30), (360, 41)]),
        "recipe": system([(60, 20), (120, 42)]),
    }
    table, ratios = figures_and_ratios(systems)
    _, recipe = figures_and_ratios(systems, "recipe")
    assert table["minutes to Joey's final validation BLEU"] == {"lookback": 4.0, "joey": 6.0, "recipe": 2.0}
    assert ratios["minutes to Joey's final validation BLEU"] == 4 / 6
    assert recipe["minutes to Joey's final validation BLEU"] == 2 / 6  # a third of Joey's time


def test_a_recipe_takes_the_model_and_training_recipe_of_its_config_file(tmp_path):
    from bench import settings

    path = tmp_path / "r.yaml"
    path.write_text(
        "tokenizer: {vocab_size: 8000}\nmodel: {attention: general, dropout: 0.2}\n"
        "train: {lr: 0.003, warmup: 200, max_tokens: 1000, time_limit: 12, run_dir: elsewhere}\n"
    )
    recipe = settings.recipe_settings(path)
    assert recipe["model"] == {"attention": "general", "dropout": 0.2}
    assert recipe["train"] == {"lr": 0.003, "warmup": 200, "max_tokens": 1000}  # limits stay the bench's
    raw = settings.lookback_config("feed", "RUN", "DATA", recipe=recipe)
    assert raw["model"] == {"attention": "general", "dropout": 0.2}
    assert raw["train"]["lr"] == 0.003 and raw["train"]["run_dir"] == "RUN"
    assert raw["train"]["precision"] == "fp32" and raw["tokenizer"] == settings.TOKENIZER
    assert settings.lookback_config("feed", "RUN", "DATA")["train"]["lr"] == settings.TRAIN["lr"]
    # the bench's budget for the recipe is its time limit: where a cosine by time ends
    path.write_text("tokenizer: {vocab_size: 8000}\ntrain: {schedule: cosine, time_limit: 12}\n")
    recipe = settings.recipe_settings(path, 30.0)
    assert recipe["train"] == {"schedule": "cosine", "time_limit": 30.0}
    from_dict(settings.lookback_config("feed", "RUN", "DATA", recipe=recipe))  # a valid config
    path.write_text("tokenizer: {vocab_size: 4000}\n")
    with pytest.raises(SystemExit, match="vocab_size.*4000.*not the bench's"):
        settings.recipe_settings(path)
    path.write_text("model: {atention: dot}\n")
    with pytest.raises(Exception, match="atention"):
        settings.recipe_settings(path)


def test_the_shipped_recipe_is_a_bench_recipe():
    from bench import settings

    recipe = settings.recipe_settings(settings.RECIPE_DEFAULT)
    assert recipe["model"]["attention"] == "additive" and "lr" in recipe["train"]


def test_bench_scores_every_hypothesis_file_as_evaluate_does(tmp_path):
    from bench.scores import main as scores_main
    from bench.scores import scores
    from lookback.decoding.evaluate import score

    refs = ["Un chien court dans la neige.", "Deux hommes sont assis sur un banc."]
    hyps = ["Un chien court dans la neige.", "Deux hommes assis sur un banc."]
    (tmp_path / "test.fr").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    common.write_json(run / "spec.json", {"data_dir": str(tmp_path), "test": "test"})
    with pytest.raises(SystemExit, match="no SYSTEM.beamK.txt in"):
        scores(run)
    (run / "joey.beam5.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (run / "recipe.beam1.txt").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    result = scores(run)
    assert list(result) == ["joey.beam5", "recipe.beam1"]
    assert result["joey.beam5"]["multi30k_bleu"] == score(hyps, refs, "fr").multi30k_bleu
    assert result["recipe.beam1"]["bleu"] == pytest.approx(100.0)
    assert scores_main([str(run), "--json", str(tmp_path / "s.json")]) == 0
    written = common.read_json(tmp_path / "s.json")
    assert written.pop("machine") == {"cpu": common.cpu_model(), "cpu_flags": common.cpu_flags()}
    assert written == result


def offline_bench(bench_main, tmp_path, monkeypatch) -> None:
    """The harness with a two-line test set, a stand-in seed run and Joey taken as installed."""
    data = tmp_path / "work" / "data"
    data.mkdir(parents=True)
    (data / f"{bench_main.settings.TEST_SET}.{bench_main.settings.SRC_LANG}").write_text("a\nb\n")
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "bench_seed.json").write_text('{"train_pairs": 2}')
    monkeypatch.setattr(bench_main, "ensure_joey", lambda venv: None)
    monkeypatch.setattr(bench_main, "prepare_data", lambda work, limit: data)
    monkeypatch.setattr(bench_main, "prepare_seed", lambda *a, **k: seed)


def test_the_recipe_trains_for_its_own_budget_against_joey_alone(tmp_path, monkeypatch):
    """`--only joey --recipe --recipe-budget-minutes`: Joey to its plateau, the recipe for a third."""
    import bench.headline as bench_main

    offline_bench(bench_main, tmp_path, monkeypatch)
    runs = []

    def run_child(system, task, spec_path, out_dir, timeout, venv):
        runs.append((system, task, bench_main.read_json(spec_path)["budget_s"], timeout))
        return {"system": system, "task": task}

    monkeypatch.setattr(bench_main, "run_child", run_child)
    monkeypatch.setattr(bench_main, "gemm_peak", lambda device: {"fp32_peak_gflops": 100.0})
    args = bench_main.parse_args(
        [
            "--only",
            "joey",
            "--recipe",
            "--budget-minutes",
            "90",
            "--recipe-budget-minutes",
            "30",
            "--work-dir",
            str(tmp_path / "work"),
        ]
    )
    plan = bench_main.make_plan(args)
    assert plan.systems == ["joey", "recipe"] and plan.recipe_budget_s == 1800
    bench_main.measure(plan, "feed", tmp_path / "out")
    assert runs == [
        ("joey", "train", 5400, 5400 + 900),
        ("joey", "translate", 5400, 3600),
        ("recipe", "train", 1800, 1800 + 900),
        ("recipe", "translate", 1800, 3600),
    ]
    record = bench_main.make_record(plan, "feed", {}, {s: {} for s in plan.systems}, {})
    assert (record["settings"]["budget_s"], record["settings"]["recipe_budget_s"]) == (5400, 1800)


def test_joey_can_come_from_an_earlier_run_on_this_machine(tmp_path, monkeypatch):
    """--joey-from: Joey's results and test translations are read, not trained again."""
    import bench.headline as bench_main

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for task in ("train", "translate"):
        bench_main.write_json(earlier / f"joey.{task}.json", {"system": "joey", "task": task, "figures": {}})
    (earlier / "joey.beam5.txt").write_text("une phrase\n")
    monkeypatch.setattr(bench_main, "ensure_joey", lambda venv: pytest.fail("Joey is not needed"))
    data = tmp_path / "work" / "data"
    data.mkdir(parents=True)
    (data / f"{bench_main.settings.TEST_SET}.{bench_main.settings.SRC_LANG}").write_text("a\n")
    monkeypatch.setattr(bench_main, "prepare_data", lambda work, limit: data)
    monkeypatch.setattr(bench_main, "gemm_peak", lambda device: None)
    args = ["--only", "joey", "--recipe", "--joey-from", str(earlier), "--work-dir", str(tmp_path / "work")]
    plan = bench_main.make_plan(bench_main.parse_args(args))
    assert plan.joey_error is None and plan.systems == ["joey", "recipe"]
    out = tmp_path / "out"
    out.mkdir()
    result = bench_main.earlier_result(earlier, "joey", "train", out, "feed")
    assert result["from"] == str(earlier / "joey.train.json")
    assert (out / "joey.beam5.txt").read_text() == "une phrase\n"
    assert "no " in bench_main.earlier_result(tmp_path, "joey", "train", out, "feed")["error"]


def test_joey_can_come_from_a_committed_results_file(tmp_path):
    """--joey-from results/bench/....json: a machine without Joey's run folder still compares."""
    import bench.headline as bench_main

    joey = {"train": {"system": "joey", "task": "train", "figures": {"steps": 7161}}}
    results = tmp_path / "2026-11-25_035736_cpu_feed.json"
    bench_main.write_json(results, {"config": "feed", "systems": {"joey": joey}})
    out = tmp_path / "out"
    out.mkdir()
    result = bench_main.earlier_result(results, "joey", "train", out, "feed")
    assert result["figures"] == {"steps": 7161}
    assert result["from"] == f"{results}#systems.joey.train"
    assert list(out.iterdir()) == []  # the file holds no translations to copy
    missing = bench_main.earlier_result(results, "joey", "translate", out, "feed")["error"]
    assert missing.startswith(f"--joey-from: {results} holds no joey translate result")
    other = bench_main.earlier_result(results, "joey", "train", out, "nofeed")["error"]
    assert other == f"--joey-from: {results} measured 'feed', not 'nofeed'"
    (tmp_path / "broken.json").write_text("{")
    broken = bench_main.earlier_result(tmp_path / "broken.json", "joey", "train", out, "feed")["error"]
    assert broken.startswith(f"--joey-from: {tmp_path / 'broken.json'} holds no joey train result")


def test_joey_at_its_best_is_a_fourth_system_with_its_recipe_and_budget(tmp_path, monkeypatch):
    """--joey-best: Joey like for like and Joey by its own recipe, in the same run, each its spec."""
    import bench.headline as bench_main

    offline_bench(bench_main, tmp_path, monkeypatch)
    monkeypatch.setattr(bench_main, "gemm_peak", lambda device: {"fp32_peak_gflops": 100.0})
    specs = {}

    def run_child(system, task, spec_path, out_dir, timeout, venv):
        specs[system] = bench_main.read_json(spec_path)
        return {"system": system, "task": task}

    monkeypatch.setattr(bench_main, "run_child", run_child)
    argv = ["--recipe", "--joey-best", "iwslt", "--joey-set", "lr=5e-4", "--budget-minutes", "30"]
    argv += ["--joey-best-budget-minutes", "100", "--work-dir", str(tmp_path / "work")]
    plan = bench_main.make_plan(bench_main.parse_args(argv))
    assert plan.systems == ["lookback", "joey", "recipe", "joey_best"]
    bench_main.measure(plan, "feed", tmp_path / "out")
    assert "joey" not in specs["joey"] and specs["joey"]["budget_s"] == 1800  # like for like
    best = specs["joey_best"]
    assert best["system"] == "joey_best" and best["budget_s"] == 6000
    assert (best["joey"]["name"], best["joey"]["lr"], best["joey"]["schedule"]) == ("iwslt", 5e-4, "plateau")
    record = bench_main.make_record(plan, "feed", {}, {s: {} for s in plan.systems}, {})
    assert record["settings"]["joey_best"]["lr"] == 5e-4 and record["settings"]["joey_best_budget_s"] == 6000
    assert record["ratios_recipe_joey_best"] is not None


def test_each_systems_flops_per_token_give_its_share_of_the_cpus_peak():
    from bench.headline import figures_and_ratios

    def system(tokens_per_s, flops_per_token, points):
        curve = [{"seconds": s, "steps": 1, "bleu": b, "validate_seconds": 1.0} for s, b in points]
        figures = {
            "target_tokens_per_s": tokens_per_s,
            "flops_per_target_token": flops_per_token,
            "curve": curve,
        }
        return {"train": {"figures": figures}}

    systems = {
        "joey": system(1_000, 30e6, [(60, 20), (600, 50)]),
        "recipe": system(4_000, 20e6, [(60, 30), (300, 51)]),
        "joey_best": system(1_500, 30e6, [(60, 25), (900, 53)]),
    }
    table, ratios = figures_and_ratios(systems, "recipe", "joey_best", peak={"fp32_peak_gflops": 160.0})
    assert table["training, MFLOP per target token"] == {"joey": 30.0, "recipe": 20.0, "joey_best": 30.0}
    assert table["training, GFLOP/s (matrix products)"] == {"joey": 30.0, "recipe": 80.0, "joey_best": 45.0}
    assert table["training, share of the fp32 GEMM peak"]["recipe"] == 0.5
    assert table["minutes to joey_best's final validation BLEU"] == {
        "joey": None,
        "recipe": None,
        "joey_best": 15.0,
    }
    assert ratios["training, target tokens/s"] == pytest.approx(4_000 / 1_500)  # against Joey at its best
    assert ratios["training, share of the fp32 GEMM peak"] == pytest.approx(80 / 45)


def test_flops_per_token_of_a_step_are_counted_by_torch():
    import torch

    layer = torch.nn.Linear(8, 16)

    def step(x) -> int:
        layer(x).sum().backward()  # the input needs no gradient: forward and the weights' gradient
        return x.shape[0]

    batches = [torch.randn(4, 8), torch.randn(6, 8)]
    assert common.matmul_flops_per_token(step, batches) == 2 * 2 * 8 * 16  # per row: 2 products
    assert common.matmul_flops_per_token(step, []) is None


def test_a_recurrences_products_are_counted_with_cudnn_out_of_the_way():
    """A GRU's FLOPs by hand: 5 steps of 3 gates, each an input (3 -> 4) and a hidden (4 -> 4)
    product. cuDNN is off while counting (its fused RNN would hide them on a GPU), on only then."""
    import torch

    gru = torch.nn.GRU(3, 4, batch_first=True)
    with torch.no_grad():
        _, flops = common.counted_flops(lambda: gru(torch.randn(1, 5, 3)))
    assert flops == 5 * 2 * (3 * 4 * 3 + 3 * 4 * 4)
    before = torch.backends.cudnn.enabled
    assert common.counted_flops(lambda: torch.backends.cudnn.enabled)[0] is False
    assert torch.backends.cudnn.enabled == before
