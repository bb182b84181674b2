"""The web explorer as a real process: a bounded load test, its bind address and raw HTTP paths.

`lookback serve` runs as a child process with its default host, on a free port, serving a tiny
trained model; every request goes to 127.0.0.1. bench/loadtest.py runs the same load test
against a real model (figures in docs/reliability.md).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench.loadtest import Server, run_load, still_answers
from lookback.config import from_dict
from lookback.training.train import train

from ..helpers import require, tiny_train_config, toy_pairs


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    raw = tiny_train_config(tmp, train={"max_steps": 60, "valid_every": 60})
    run_dir = train(from_dict(raw))
    with Server([str(run_dir)], threads=1, host=None) as s:  # host=None: lookback serve's default
        yield s, run_dir


def test_2000_requests_from_16_clients_without_an_error(server):
    s, _ = server
    sentences = [en for en, _ in toy_pairs(40, seed=7)]
    model = s.models[0]["name"]
    result = run_load(s.port, sentences, model, requests=2000, clients=16, beams=(1, 3), deadline_s=240)
    figures = result.summary()
    print(f"\nload test, tiny model: {figures}")  # pytest -n 0 -s shows it; docs/reliability.md quotes it
    assert result.errors == []
    assert figures["requests"] == 2000 and len(result.latencies_s) == 2000
    assert figures["p50_ms"] <= figures["p95_ms"]
    assert still_answers(s.port, model, sentences[0])  # and it answers normally afterwards


def _listening_addresses(port: int) -> set[str]:
    """Addresses that listen on TCP `port`, read from /proc/net/tcp{,6} (no traffic needed)."""
    found = set()
    for name, size in (("tcp", 4), ("tcp6", 16)):
        table = Path("/proc/net") / name
        if not table.exists():
            continue
        for row in table.read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if size == 4:
                    found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))  # little-endian
                else:
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def test_the_default_bind_is_loopback_only(server):
    s, _ = server
    require(Path("/proc/net/tcp").exists(), "no /proc/net/tcp to read listening sockets from")
    assert _listening_addresses(s.port) == {"127.0.0.1"}


def _raw_get(port: int, target: str) -> tuple[int, str]:
    """GET `target` sent byte for byte (an HTTP client would normalise '..' away)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.decode("utf-8", "replace").partition("\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "target",
    [
        "/static/../serve.py",
        "/static/../../pyproject.toml",
        "/static/%2e%2e/serve.py",
        "/static/..%2fserve.py",
        "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/../../etc/passwd",
    ],
)
def test_raw_paths_cannot_leave_the_web_folder(server, target):
    s, run_dir = server
    status, body = _raw_get(s.port, target)
    assert status in (400, 404)
    assert "import" not in body and "root:" not in body and "[project]" not in body
    assert str(run_dir.parent) not in body and "lookback/web" not in body
    assert _raw_get(s.port, "/static/app.js")[0] == 200  # the folder itself is served
