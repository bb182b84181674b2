"""Joey NMT's training recipes in the bench (issue 39): like for like, the peer file's and Joey's
own, with --joey-set for the search of its best; the Joey config each one writes, and Joey's
plateau scheduler under torch 2.13. Joey itself is not needed: its config is plain data."""

from __future__ import annotations

import pytest
import torch

from bench import settings
from bench.headline import parse_args
from bench.peers.joey import joey_config, plateau


def spec(**changes) -> dict:
    base = {
        "config": "feed",
        "device": "cpu",
        "seed": 1,
        "model": settings.model_settings("feed"),
        "lr": settings.TRAIN["lr"],
        "clip": 1.0,
        "batch_sentences": settings.TRAIN["batch_sentences"],
        "max_len": 100,
        "data_dir": "/data",
        "test": "test_2016_flickr",
        "src_lang": "en",
        "tgt_lang": "fr",
        "spm_model": "/seed/spm.joint.model",
        "joey_vocab": "/work/joey_vocab.txt",
        "decode_batch_size": 64,
        "length_penalty": 1.0,
        "out_dir": "/out",
    }
    return {**base, **changes}


def test_the_named_recipes():
    assert settings.joey_recipe("same") == {
        "name": "same", "lr": 1e-3, "batch_sentences": 80, "schedule": "constant",
        "decrease_factor": 0.1, "patience": 10, "normalization": "tokens", "hidden_dropout": 0.3,
        "arch": "recurrent", "warmup": 0, "label_smoothing": 0.0,
    }  # fmt: skip
    peer = settings.joey_recipe("peer")
    assert (peer["schedule"], peer["lr"], peer["decrease_factor"], peer["patience"]) == (
        "plateau",
        1e-3,
        0.1,
        10,
    )
    iwslt = settings.joey_recipe("iwslt", ["batch_sentences=40", "lr=5e-4"])
    assert (iwslt["lr"], iwslt["batch_sentences"], iwslt["decrease_factor"], iwslt["patience"]) == (
        5e-4,
        40,
        0.7,
        8,
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["lr"], "--joey-set 'lr': expected KEY=VALUE with KEY one of lr, batch_sentences"),
        (["dropout=0.1"], "--joey-set 'dropout=0.1': expected KEY=VALUE"),
        (["schedule=warmupinversesquareroot"], "warmup=0: warmupinversesquareroot needs at least 1"),
        (["layers=2"], "--joey-set layers: only a transformer recipe has it"),
        (["lr=fast"], "--joey-set 'lr=fast': 'fast' is not a number"),
        (["batch_sentences=4.5"], "'4.5' is not a whole number"),
        (["schedule=cosine"], "--joey-set schedule=cosine: expected one of constant, plateau"),
        (["lr=-1"], "lr must be positive"),
        (["decrease_factor=1.5"], "--joey-set decrease_factor=1.5: must lie between 0 and 1"),
        (["normalization=sum"], "--joey-set normalization=sum: expected one of tokens, batch"),
        (["hidden_dropout=1"], "--joey-set hidden_dropout=1.0: must lie in [0, 1)"),
        (["hidden_dropout=none"], "--joey-set 'hidden_dropout=none': 'none' is not a number"),
    ],
)
def test_a_bad_setting_is_named_in_one_line(items, message):
    with pytest.raises(ValueError) as error:
        settings.joey_recipe("peer", items)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_command_line_refuses_a_bad_setting_and_records_a_good_one(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--joey-best", "peer", "--joey-set", "lr=fast"])
    assert stop.value.code == 2 and "--joey-set 'lr=fast': 'fast' is not a number" in capsys.readouterr().err
    args = parse_args(["--joey-best", "peer", "--joey-set", "patience=3"])
    assert args.joey["name"] == "peer" and args.joey["patience"] == 3
    assert parse_args([]).joey is None  # Joey like for like only, unless asked


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--joey-set", "lr=1e-3"],
            "--joey-set changes joey_best's recipe: name one with --joey-best RECIPE",
        ),
        (["--only", "joey_best"], "--only joey_best needs --joey-best RECIPE"),
        (["--joey-best", "fast"], "argument --joey-best: invalid choice: 'fast'"),
    ],
)
def test_joey_best_needs_its_recipe_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_like_for_like_joey_runs_at_lookbacks_constant_rate():
    train = joey_config(spec(), "train")["training"]
    assert train["learning_rate"] == 1e-3 and train["batch_size"] == 80
    assert train["scheduling"] == "decaying" and "patience" not in train  # built, never stepped
    assert joey_config(spec(joey=settings.joey_recipe("same")), "train")["training"] == train


def test_joeys_own_recipe_writes_its_plateau_scheduler():
    recipe = settings.joey_recipe("iwslt", ["batch_sentences=40"])
    train = joey_config(spec(joey=recipe), "train")["training"]
    assert (train["scheduling"], train["decrease_factor"], train["patience"]) == ("plateau", 0.7, 8)
    assert train["learning_rate"] == 2e-4 and train["batch_size"] == 40
    assert train["early_stopping_metric"] == "bleu"  # Joey then steps the plateau in mode max


def test_the_loss_normalisation_and_attention_dropout_reach_joeys_config():
    default = joey_config(spec(joey=settings.joey_recipe("peer")), "train")
    assert default["training"]["normalization"] == "tokens"  # lookback's mean over target tokens
    assert default["model"]["decoder"]["hidden_dropout"] == 0.3  # the model's dropout
    assert joey_config(spec(), "train")["training"]["normalization"] == "tokens"  # like for like
    recipe = settings.joey_recipe("peer", ["normalization=batch", "hidden_dropout=0"])
    cfg = joey_config(spec(joey=recipe), "train")
    assert cfg["training"]["normalization"] == "batch"  # Joey's default: summed, over sentences
    assert cfg["model"]["decoder"]["hidden_dropout"] == 0.0
    assert cfg["model"]["decoder"]["dropout"] == 0.3 and cfg["model"]["encoder"]["dropout"] == 0.3


def test_joeys_plateau_scheduler_builds_under_this_torch_and_decays_as_joey_asks():
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([weight], lr=1e-3)
    # what joeynmt.builders.build_scheduler passes for "plateau", with decrease_factor 0.5, patience 1
    scheduler = plateau(
        optimizer, mode="max", verbose=False, threshold_mode="abs", eps=0.0, factor=0.5, patience=1
    )
    for bleu in (10.0, 20.0, 20.0):  # better, better, not better once: within patience
        scheduler.step(metrics=bleu)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    scheduler.step(metrics=19.0)  # not better twice: more than patience
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_joeys_transformer_recipe_writes_its_own_model_and_warm_up():
    recipe = settings.joey_recipe("transformer", ["lr=1e-3", "warmup=500", "layers=2"])
    cfg = joey_config(spec(joey=recipe), "train")
    train, model = cfg["training"], cfg["model"]
    assert (train["scheduling"], train["learning_rate"], train["learning_rate_warmup"]) == (
        "warmupinversesquareroot",
        1e-3,
        500,
    )
    assert train["optimizer"] == "adamw" and train["label_smoothing"] == 0.1
    assert model["tied_embeddings"] and model["tied_softmax"]  # one joint vocabulary
    assert (model["initializer"], model["bias_initializer"]) == ("xavier_uniform", "zeros")
    for side in (model["encoder"], model["decoder"]):
        assert side["type"] == "transformer" and side["layer_norm"] == "pre"
        assert (side["num_layers"], side["num_heads"], side["hidden_size"], side["ff_size"]) == (
            2,
            4,
            256,
            768,
        )
        assert side["embeddings"] == {"embedding_dim": 256, "scale": True, "dropout": 0.0}
    # the recurrent recipes keep the bench's model and Adam
    peer = joey_config(spec(joey=settings.joey_recipe("peer")), "train")
    assert peer["model"]["encoder"]["type"] == "recurrent" and peer["training"]["optimizer"] == "adam"
