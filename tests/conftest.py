"""Settings for every test. Shared plain helpers (tiny models, toy corpora, `require`) are in helpers.py."""

import os

import pytest
import torch

from lookback import device

torch.set_num_threads(1)  # tiny tensors: threads cost more than they give

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # pytest -n N: N workers share this machine's cores
    # ... and so do the processes each starts (a training, a notebook's kernel, torchrun): a share
    # each, or two of them on two cores slow each other several times over
    share = max(1, device.cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(share)


_NATIVE_BF16 = device.native_bf16  # the real detection, which test_device.py tests


@pytest.fixture(autouse=True, scope="session")
def _auto_precision_is_fp32():
    """`precision: auto` (the default) means fp32 in every test, on any CPU, so that results do not
    depend on whether this machine has native bf16. Session-wide, so that module fixtures (a
    trained run, a server) are fp32 too; processes that tests start get fp32 from their config
    (helpers.tiny_train_config)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device, "native_bf16", lambda _: False)
        yield


@pytest.fixture(autouse=True)
def _real_bf16_detection_in_test_device(request, monkeypatch):
    """test_device.py tests the detection itself."""
    if request.module.__name__.rsplit(".", 1)[-1] == "test_device":
        monkeypatch.setattr(device, "native_bf16", _NATIVE_BF16)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A tiny attention model trained on the toy lexicon until it translates it (its Trainer)."""
    from lookback.config import from_dict
    from lookback.training.train import Trainer

    from .helpers import tiny_train_config

    tmp = tmp_path_factory.mktemp("trained")
    cfg = from_dict(tiny_train_config(tmp, train={"max_steps": 300, "valid_every": 100}))
    trainer = Trainer(cfg)
    trainer.train()
    return trainer
