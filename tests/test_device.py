"""Precision that fits the hardware: auto picks bf16 only where the device runs it natively."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys

import pytest
import torch

from lookback import device as device_module
from lookback.device import resolve_precision

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _no_onednn_cap(monkeypatch):
    """The flags alone decide, unless a test sets oneDNN's cap itself."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


@pytest.mark.parametrize(
    ("flags", "auto"),
    [
        ("fpu avx2 fma", "fp32"),
        ("avx2 avx512f avx512_bf16", "bf16"),
        ("avx2 amx_bf16 amx_tile", "bf16"),
        (None, "fp32"),
    ],
)
def test_auto_is_bf16_only_on_a_cpu_that_runs_it_natively_and_says_why(monkeypatch, caplog, flags, auto):
    monkeypatch.setattr(device_module, "_cpuinfo", lambda key: flags if key == "flags" else "Some CPU")
    with caplog.at_level(logging.INFO, logger="lookback.device"):
        assert resolve_precision(CPU, "auto") == auto
    native = "runs native bf16" if auto == "bf16" else "has no native bf16"
    assert caplog.messages == [f"train.precision auto: {auto} (this cpu {native})"]


@pytest.mark.parametrize(
    ("isa", "auto"),
    [
        (None, "bf16"),
        ("ALL", "bf16"),
        ("avx2", "fp32"),
        ("AVX512_CORE", "fp32"),
        ("AVX512_CORE_BF16", "bf16"),
    ],
)
def test_auto_is_fp32_where_onednn_is_capped_below_bf16(monkeypatch, caplog, isa, auto):
    """ONEDNN_MAX_CPU_ISA=AVX2 makes an AVX-512 CPU behave as one without it: bf16 is then emulated."""
    monkeypatch.setattr(
        device_module, "_cpuinfo", lambda key: "avx2 avx512f avx512_bf16" if key == "flags" else None
    )
    if isa is not None:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    with caplog.at_level(logging.INFO, logger="lookback.device"):
        assert resolve_precision(CPU, "auto") == auto
    capped = f" with ONEDNN_MAX_CPU_ISA={isa}" if auto == "fp32" else ""
    assert caplog.messages[-1].endswith(f"native bf16{capped})")


def test_asked_for_bf16_without_native_support_runs_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(device_module, "_cpuinfo", lambda key: "avx2 fma" if key == "flags" else None)
    with caplog.at_level(logging.WARNING, logger="lookback.device"):
        assert resolve_precision(CPU, "bf16", "precision") == "bf16"
        assert resolve_precision(CPU, "fp32") == "fp32"
    (warning,) = caplog.messages
    assert warning.startswith("precision bf16: this cpu has no native bf16") and "emulated" in warning
    assert "(no avx512_bf16 or amx_bf16)" in warning


def test_a_gpu_without_bf16_is_not_blamed_on_cpu_flags(monkeypatch, caplog):
    monkeypatch.setattr(device_module, "native_bf16", lambda _: False)  # an older GPU, say
    with caplog.at_level(logging.WARNING, logger="lookback.device"):
        assert resolve_precision(torch.device("cuda"), "bf16") == "bf16"
    (warning,) = caplog.messages
    expected = "train.precision bf16: this cuda has no native bf16, so it is emulated, 2-20x slower than fp32"
    assert warning == expected


def test_gradients_in_eval_mode_turn_on_autograd_and_keep_cudnns_rnn_out():
    """cuDNN's RNN backward runs only in training mode; the diagnostics take gradients in eval."""
    before = torch.backends.cudnn.enabled
    with torch.no_grad():
        with device_module.gradients_in_eval_mode():
            assert torch.is_grad_enabled() and not torch.backends.cudnn.enabled
            gru = torch.nn.GRU(3, 4).eval()
            x = torch.randn(5, 1, 3, requires_grad=True)
            (grad,) = torch.autograd.grad(gru(x)[0].sum(), x)
            assert grad.shape == (5, 1, 3)
        assert not torch.is_grad_enabled()
    assert torch.backends.cudnn.enabled == before  # as it was, afterwards


@pytest.mark.parametrize("onednn_bf16", [None, False], ids=["this_cpu", "a_cpu_without_onednn_bf16"])
def test_an_lstm_trains_under_bf16_autocast_on_any_cpu(monkeypatch, onednn_bf16):
    """oneDNN's LSTM, which torch takes for a padded batch or a packed one of equal lengths,
    refuses bf16 where oneDNN has no bf16 kernels (an AVX2-only CPU): there autocast runs torch's
    own LSTM, and oneDNN is back on afterwards. The states stay near fp32's."""
    if onednn_bf16 is not None:
        monkeypatch.setattr(device_module, "onednn_bf16", lambda: onednn_bf16)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 16, batch_first=True, bidirectional=True)
    x = torch.randn(3, 5, 8, requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 5, 5]), batch_first=True)
    before = torch.backends.mkldnn.enabled
    with device_module.autocast(CPU, "bf16"):
        assert torch.backends.mkldnn.enabled == (onednn_bf16 is None and device_module.onednn_bf16())
        h, _ = lstm(x)  # (3, 5, 32)
        h_packed, _ = lstm(packed)
    assert torch.backends.mkldnn.enabled == before
    (grad,) = torch.autograd.grad(h.float().sum() + h_packed.data.float().sum(), x)
    assert grad.shape == x.shape and torch.isfinite(grad).all()
    fp32 = lstm(x)[0]
    assert torch.allclose(h.float(), fp32, atol=0.02)
    assert torch.allclose(h_packed.data.view(5, 3, 32).transpose(0, 1).float(), fp32, atol=0.02)  # packed


def test_no_shipped_config_hard_codes_bf16():
    from pathlib import Path

    from lookback.config import load_config

    configs = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
    assert configs and all(load_config(p).train.precision in ("auto", "fp32") for p in configs)


@pytest.mark.parametrize("flags, chosen", [("avx2 fma", "fp32"), ("avx512f avx512_bf16", "bf16")])
def test_auto_is_the_default_for_training_and_translating(monkeypatch, flags, chosen):
    from lookback.config import Config

    cfg = Config()
    assert cfg.train.precision == cfg.decode.precision == "auto"
    monkeypatch.setattr(device_module, "_cpuinfo", lambda key: flags if key == "flags" else "Some CPU")
    cpu = torch.device("cpu")
    assert (
        resolve_precision(cpu, cfg.train.precision) == resolve_precision(cpu, cfg.decode.precision) == chosen
    )


def test_validations_during_training_decode_in_the_precision_training_runs_in(monkeypatch, tmp_path):
    """On a CPU with native bf16, train.precision fp32 must not validate in bf16 (decode.precision auto)."""
    from lookback.config import from_dict
    from lookback.training.train import Trainer

    from .helpers import tiny_train_config

    monkeypatch.setattr(device_module, "native_bf16", lambda _: True)
    for asked, runs in (("fp32", "fp32"), ("auto", "bf16")):
        raw = tiny_train_config(tmp_path / asked, train={"precision": asked, "max_steps": 1})
        raw["decode"]["precision"] = "auto" if asked == "fp32" else "fp32"  # what translate would use
        trainer = Trainer(from_dict(raw))
        assert trainer.precision == trainer.translator.precision == runs


def test_the_log_line_names_the_cpu_its_threads_its_kernels_and_the_precision(monkeypatch):
    monkeypatch.setattr(device_module, "_cpuinfo", lambda key: "Some CPU" if key == "model name" else None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    for n, threads in ((1, "1 thread"), (2, "2 threads")):
        monkeypatch.setattr(torch, "get_num_threads", lambda n=n: n)
        line = f"device: cpu (Some CPU, {threads}, AVX2 kernels); precision: fp32"
        assert device_module.describe(CPU, "fp32") == line


def test_a_results_file_names_the_kernels_torch_uses_beside_the_cpus_flags():
    record = device_module.machine()
    assert record["kernels"] == torch.backends.cpu.get_cpu_capability()
    assert set(record) == {"cpu", "cpu_flags", "kernels", "threads", "torch"}


def test_compile_is_taken_as_said_and_true_on_a_cpu_needs_a_compiler(monkeypatch):
    monkeypatch.setattr(device_module, "cpp_compiler", lambda: "/usr/bin/g++")
    assert device_module.resolve_compile(CPU, True) is True
    assert device_module.resolve_compile(CPU, False) is False
    monkeypatch.setattr(device_module, "cpp_compiler", lambda: None)
    assert device_module.resolve_compile(CPU, False) is False  # eager needs none
    assert device_module.resolve_compile(torch.device("cuda"), True) is True  # a GPU builds Triton kernels
    with pytest.raises(ValueError, match=r"^train.compile true needs a C\+\+ compiler on a CPU"):
        device_module.resolve_compile(CPU, True)


def test_the_cpp_compiler_is_cxx_when_set(monkeypatch, tmp_path):
    cxx = tmp_path / "my-c++"
    cxx.write_text("#!/bin/sh\n")
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    assert device_module.cpp_compiler() == str(cxx)
    monkeypatch.setenv("CXX", str(tmp_path / "missing"))
    assert device_module.cpp_compiler() is None  # CXX names the one to use: no other is guessed


FREE_AND_ASK_AGAIN = """
import sys
import torch
from lookback.device import keep_freed_memory
def rss_mb():
    line = next(x for x in open("/proc/self/status") if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
x = torch.ones(64 * 2**18)  # 64 MB, written
before = rss_mb()
del x
print(kept, before - rss_mb())
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's malloc: Linux only")
@pytest.mark.parametrize("keep", [False, True])
def test_training_on_a_cpu_keeps_the_memory_it_frees_for_the_next_update(keep):
    """A freed 64 MB block goes back to the system at once (its pages to be faulted in and
    zeroed again by the next update), unless keep_freed_memory has told malloc to keep it."""
    run = subprocess.run(
        [sys.executable, "-c", FREE_AND_ASK_AGAIN, "keep" if keep else "free"],
        capture_output=True,
        text=True,
        check=True,
    )
    kept, returned_mb = run.stdout.split()
    assert kept == ("True" if keep else "None")
    assert (float(returned_mb) < 4) if keep else (float(returned_mb) > 60)
