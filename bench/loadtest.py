"""A bounded load test of the web explorer, on loopback only.

    python -m bench loadtest runs/multi30k_en_fr_additive             # 2,000 requests, 16 clients
    python -m bench loadtest RUN_DIR --requests 500 --clients 4 --json out.json

It starts `lookback serve RUN_DIR` on 127.0.0.1 (a free port, one torch
thread unless --threads says otherwise), sends a fixed number of requests
from concurrent clients (nine in ten POST /api/translate, one in ten POST
/api/explain, beam sizes in turn), then checks that the server still answers
normally, stops it and prints p50/p95 latency and requests per second.
`run_load` is also what tests/serve/test_app_under_load.py runs against a tiny model.

The standard library and httpx only. Every request goes to 127.0.0.1: the
URL is built here, never taken from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .common import cpu_model

# Multi30k-like English sentences, for a real model; tests pass their own.
SENTENCES = [
    "A dog runs in the snow.",
    "Two young men are playing football in a park.",
    "A woman in a red dress is walking down the street.",
    "A little girl is climbing a wooden fence.",
    "A man is cooking food in a small kitchen.",
    "Several people are waiting at a bus stop in the rain.",
    "A boy jumps into a swimming pool.",
    "An old man sits on a bench and reads a newspaper.",
    "Three children are playing with a ball on the beach.",
    "A musician plays the guitar on a stage.",
    "A black cat sleeps on a blue chair.",
    "Two women are talking in front of a shop.",
]


@dataclass
class LoadResult:
    requests: int  # requests sent
    clients: int
    wall_s: float  # from the first request to the last answer
    latencies_s: list[float] = field(repr=False)  # of the requests answered 200, in seconds
    errors: list[str]  # one line per failed request: status or exception

    def quantile(self, q: float) -> float:
        """The q-quantile of the latencies, in milliseconds (q = 0.5: the median)."""
        if len(self.latencies_s) < 2:
            return 1000 * (self.latencies_s or [float("nan")])[0]
        cuts = statistics.quantiles(self.latencies_s, n=100, method="inclusive")
        return 1000 * cuts[round(q * 100) - 1]

    def summary(self) -> dict:
        return {
            "requests": self.requests,
            "clients": self.clients,
            "errors": len(self.errors),
            "p50_ms": round(self.quantile(0.50), 1),
            "p95_ms": round(self.quantile(0.95), 1),
            "max_ms": round(1000 * max(self.latencies_s, default=float("nan")), 1),
            "requests_per_s": round(self.requests / self.wall_s, 1),
            "wall_s": round(self.wall_s, 2),
        }


def request_for(i: int, sentences: list[str], model: str, beams: tuple[int, ...], explain_every: int):
    """The i-th request of the test: (path, JSON body); the same i always gives the same request."""
    text = sentences[i % len(sentences)]
    if explain_every and i % explain_every == explain_every - 1:
        return "/api/explain", {"model": model, "text": text, "beam": 1}
    beam = beams[i % len(beams)]
    return "/api/translate", {"text": text, "beam": beam, "nbest": min(3, beam), "models": [model]}


def run_load(
    port: int,
    sentences: list[str],
    model: str,
    requests: int = 2000,
    clients: int = 16,
    beams: tuple[int, ...] = (1, 5),
    explain_every: int = 10,
    timeout_s: float = 30.0,
    deadline_s: float = 600.0,
) -> LoadResult:
    """Send `requests` requests from `clients` threads to 127.0.0.1:`port`; bounded in count and time.

    Each client takes the next request number until all are taken or `deadline_s` has passed;
    a request counts as an error unless it is answered 200 with a well-formed body.
    """
    base = f"http://127.0.0.1:{port}"
    lock, taken = threading.Lock(), iter(range(requests))
    latencies, errors = [], []
    start = time.perf_counter()

    def client() -> None:
        with httpx.Client(base_url=base, timeout=timeout_s, trust_env=False) as http:  # no proxy
            while time.perf_counter() - start < deadline_s:
                with lock:
                    i = next(taken, None)
                if i is None:
                    return
                path, body = request_for(i, sentences, model, beams, explain_every)
                t0 = time.perf_counter()
                try:
                    response = http.post(path, json=body)
                    problem = _check(response, path)
                except (
                    httpx.HTTPError,
                    ValueError,
                    KeyError,
                    TypeError,
                ) as exc:  # also a body not as documented
                    problem = f"{type(exc).__name__}: {exc}"
                elapsed = time.perf_counter() - t0
                with lock:
                    if problem:
                        errors.append(f"request {i} {path}: {problem}")
                    else:
                        latencies.append(elapsed)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s + timeout_s)
    wall = time.perf_counter() - start
    sent = len(latencies) + len(errors)
    if sent < requests:
        errors.append(f"only {sent} of {requests} requests were sent before the {deadline_s:g} s deadline")
    return LoadResult(sent, clients, wall, latencies, errors)


def _check(response: httpx.Response, path: str) -> str | None:
    """None for a good answer, else what was wrong with it."""
    if response.status_code != 200:
        return f"status {response.status_code}: {response.text[:200]}"
    body = response.json()
    if path == "/api/translate" and not _well_formed(body):
        return f"malformed translation: {response.text[:200]}"
    if path == "/api/explain" and not (body["steps"] and body["steps"][-1]["token"] == "</s>"):
        return f"malformed trace: {response.text[:200]}"
    return None


def _well_formed(body: dict) -> bool:
    """One result, with one attention row per output token (or no matrix, for attention none)."""
    if len(body["results"]) != 1:
        return False
    r = body["results"][0]
    matrix = r["attention_matrix"]
    return isinstance(r["translation"], str) and (matrix is None or len(matrix) == len(r["tokens"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`lookback serve` in a child process on 127.0.0.1, for the length of a `with` block.

    Its output goes to a temporary file (a pipe nobody reads could fill and stall it).
    """

    def __init__(
        self,
        run_dirs: list[str],
        threads: int = 1,
        host: str | None = "127.0.0.1",
        workers: int | None = None,
    ):
        self.port = free_port()
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        cmd = [sys.executable, "-m", "lookback", "serve", *run_dirs, "--port", str(self.port)]
        cmd += ["--workers", str(workers)] if workers else []  # default: the server's own (its cores)
        cmd += (
            ["--host", host] if host else []
        )  # None: the default, which tests/serve/test_app_under_load.py checks
        self.log = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
        self.process = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        """What the server has printed so far."""
        self.log.seek(0)
        return self.log.read()

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 180  # loading torch and the models
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"lookback serve exited with {self.process.returncode}: {self.output()}")
            try:
                url = f"http://127.0.0.1:{self.port}/api/models"
                self.models = httpx.get(url, timeout=5, trust_env=False).json()
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("lookback serve did not answer within 180 s")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def still_answers(port: int, model: str, sentence: str) -> bool:
    """After the load: the model list, one translation and one bad request, each as before."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False) as http:
        models = http.get("/api/models")
        good = http.post("/api/translate", json={"text": sentence, "beam": 2, "models": [model]})
        bad = http.post("/api/translate", content=b"{", headers={"Content-Type": "application/json"})
    return (
        models.status_code == 200
        and good.status_code == 200
        and _well_formed(good.json())
        and bad.status_code == 422
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench loadtest", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="run directory of the model to serve")
    ap.add_argument("--requests", type=int, default=2000, help="requests in all (default 2000)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--beams", default="1,5", help="beam sizes, taken in turn (default 1,5)")
    ap.add_argument(
        "--explain-every", type=int, default=10, help="every Nth request is /api/explain (0: none)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the server (default 1)")
    ap.add_argument("--workers", type=int, help="the server's --workers (default: its own, the cores)")
    ap.add_argument("--sentences", help="a file of source sentences, one per line (default: built in)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    sentences = SENTENCES
    if args.sentences:
        sentences = [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]
    beams = tuple(int(b) for b in args.beams.split(","))
    with Server([args.run_dir], threads=args.threads, workers=args.workers) as server:
        model = server.models[0]["name"]
        result = run_load(
            server.port, sentences, model, args.requests, args.clients, beams, args.explain_every
        )
        healthy = still_answers(server.port, model, sentences[0])
    figures = {
        **result.summary(),
        "server_answers_afterwards": healthy,
        "run_dir": args.run_dir,
        "beams": list(beams),
        "explain_every": args.explain_every,
        "server_threads": args.threads,
        "server_workers": args.workers,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average_after": os.getloadavg(),
        "python": platform.python_version(),
        "command": "python -m bench loadtest " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    for line in result.errors[:10]:
        print(f"error: {line}", file=sys.stderr)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if not result.errors and healthy else 1
