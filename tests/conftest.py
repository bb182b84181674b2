"""Settings for every test. Shared plain helpers (tiny models, toy corpora, `require`) are in helpers.py."""

import pytest
import torch

from lookback import device

torch.set_num_threads(1)  # tiny tensors: threads cost more than they give


@pytest.fixture(autouse=True)
def _auto_precision_is_fp32(request, monkeypatch):
    """`precision: auto` (the default) means fp32 in every test, on any CPU, so that results do not
    depend on whether this machine has native bf16; test_device.py tests the detection itself."""
    if request.module.__name__.rsplit(".", 1)[-1] != "test_device":
        monkeypatch.setattr(device, "native_bf16", lambda _: False)
