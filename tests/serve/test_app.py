"""The web explorer's JSON API and page, through FastAPI's TestClient and two tiny trained models."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from lookback.serve.app import MAX_BODY, create_app
from lookback.translator import Translator

from ..helpers import train_tiny

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("serve")
    return {name: train_tiny(tmp / name, name) for name in ("none", "additive")}


@pytest.fixture(scope="module")
def client(runs) -> TestClient:
    app = create_app([str(runs["none"]), f"attn={runs['additive']}"], max_chars=60)
    return TestClient(app)


def translate(client, **body):
    return client.post("/api/translate", json={"text": "the small dog runs .", **body})


def test_models_lists_each_run_with_its_settings(client):
    models = client.get("/api/models").json()
    assert [m["name"] for m in models] == ["none", "attn"]  # basename, then NAME=DIR
    assert [m["attention"] for m in models] == ["none", "additive"]
    for m in models:
        assert m["cell"] == "gru" and m["hidden_size"] == 24 and m["parameters"] > 1000
        assert (m["src_lang"], m["tgt_lang"], m["beam"]) == ("en", "fr", 3)


def test_translate_gives_every_model_side_by_side(client):
    response = translate(client, beam=4, nbest=3)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["model"], r["attention"]) for r in results] == [("none", "none"), ("attn", "additive")]
    for r in results:
        assert r["translation"] and r["tokens"]
        assert r["src_tokens"] == ["the", "small", "dog", "runs", ".", "</s>"]  # data.src_eos, the default
        scores = [c["score"] for c in r["candidates"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert r["candidates"][0] == {"text": r["translation"], "score": r["score"]}
    assert results[0]["attention_matrix"] is None
    matrix = results[1]["attention_matrix"]
    assert len(matrix) == len(results[1]["tokens"])
    assert all(len(row) == len(results[1]["src_tokens"]) for row in matrix)
    assert all(abs(sum(row) - 1) < 1e-5 and min(row) >= 0 for row in matrix)


def test_translate_grows_the_beam_to_nbest_and_picks_models(client):
    results = translate(client, beam=2, nbest=5, models=["attn"]).json()["results"]
    assert [r["model"] for r in results] == ["attn"] and len(results[0]["candidates"]) == 5
    greedy = translate(client, beam=1, models=["attn"]).json()["results"][0]
    assert len(greedy["candidates"]) == 1  # nbest defaults to the beam


def test_explain_has_one_step_per_token_and_the_end(client):
    r = translate(client, beam=1, models=["attn"]).json()["results"][0]
    response = client.post("/api/explain", json={"model": "attn", "text": "the small dog runs ."})
    assert response.status_code == 200
    tr = response.json()
    assert tr["tokens"] == r["tokens"] and len(tr["steps"]) == len(tr["tokens"]) + 1
    assert [s["token"] for s in tr["steps"]] == [*tr["tokens"], "</s>"]
    for step, row in zip(tr["steps"], r["attention_matrix"], strict=False):
        assert abs(sum(step["weights"]) - 1) < 1e-5
        assert step["weights"] == pytest.approx(row, abs=1e-5)  # the trace replays the same matrix
        assert len(step["top"]) == 5 and step["context_size"] == 48  # bidirectional: 2 x 24
    assert all(len(s["gradient"]) == len(tr["src_tokens"]) for s in tr["steps"])  # </s> included
    assert tr["agreement"]["tokens"] == len(tr["steps"]) and -1 <= tr["agreement"]["kendall_tau"] <= 1
    assert 0 <= tr["diagnostics"]["entropy"] <= 1 and tr["diagnostics"]["steps"] == len(tr["tokens"])


def test_explain_without_attention_has_a_fixed_context(client):
    tr = client.post("/api/explain", json={"model": "none", "text": "a cat sleeps .", "beam": 2}).json()
    assert tr["attention"] == "none" and tr["beam"] == 2
    assert all(s["weights"] is None and s["scores"] is None for s in tr["steps"])
    assert all(s["context_change"] < 1e-6 for s in tr["steps"][1:])
    assert tr["agreement"] is None and tr["diagnostics"] is None  # no weights to compare
    assert all(len(s["gradient"]) == len(tr["src_tokens"]) for s in tr["steps"])  # gradients all the same


def test_a_value_error_of_the_trace_is_a_422_with_its_reason(client):
    response = client.post("/api/explain", json={"model": "attn", "text": "\x07"})  # no source tokens
    assert response.status_code == 422
    assert response.json() == {"detail": "nothing to explain: '\\x07' has no source tokens"}
    too_far = {"model": "attn", "text": "a", "hypothesis": 10}  # over the largest beam
    assert client.post("/api/explain", json=too_far).status_code == 422


def test_text_without_source_tokens_is_a_422(client):
    response = translate(client, text="\x07\x07")
    assert response.status_code == 422
    assert response.json() == {"detail": "nothing to translate: '\\x07\\x07' has no source tokens"}


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_a_422(client, text):
    for path, extra in (("/api/translate", {}), ("/api/explain", {"model": "attn"})):
        response = client.post(path, json={"text": text, **extra})
        assert response.status_code == 422
        assert response.json() == {"detail": "text is empty: type a sentence to translate"}


def test_text_over_max_chars_is_a_422_that_names_the_limit(client):
    response = client.post("/api/translate", json={"text": "dog " * 20})
    assert response.status_code == 422
    assert response.json()["detail"] == "text is 80 characters long; the limit is 60"


@pytest.mark.parametrize(
    "name",
    [
        "x",
        "../../etc/passwd",
        "/etc/passwd",
        "none/../attn",
        "../x",
        "..",
        "%2e%2e",
        "%2e%2e%2fnone",
        "",
        "~",
        "none\x00",
        "C:\\Windows\\win.ini",
        "file:///etc/passwd",
    ],
)
def test_unknown_models_are_a_404_without_paths(client, runs, name):
    for response in (
        translate(client, models=["attn", name]),
        client.post("/api/explain", json={"model": name, "text": "a dog ."}),
    ):
        assert response.status_code == 404
        assert response.json() == {"detail": f"unknown model {name!r}; loaded: none, attn"}
        assert str(runs["none"].parent.parent) not in response.text


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/translate", b'{"text": "a dog", "beam": 1e400}'),
        ("/api/translate", b'{"text": "a dog", "beam": NaN}'),
        ("/api/translate", b'{"text": "a dog", "nbest": -Infinity}'),
        ("/api/translate", b'{"text": "a dog", "beam": "\\ud800"}'),
        ("/api/translate", b'{"text": "a \\ud800 dog"}'),
        ("/api/translate", b'{"text": "a dog", "models": [1e400]}'),
        ("/api/explain", b'{"model": "attn", "text": "a dog", "hypothesis": NaN}'),
        ("/api/explain", b'{"model": "attn", "text": "\\udfff"}'),
        ("/api/explain", b'{"model": 1e400, "text": "a dog"}'),
        ("/api/translate", b"null"),
        ("/api/translate", b"[]"),
        ("/api/explain", b'"a dog"'),
        ("/api/translate", b"\xff\xfe{"),
        ("/api/explain", b'{"model": "attn", "text": "caf\xe9"}'),
        ("/api/translate", b""),
    ],
)
def test_bodies_that_json_cannot_echo_are_a_422_not_a_500(client, path, body):
    """Malformed or unrepresentable JSON: a 422 that says why, without echoing the input back
    (NaN, 1e400 and lone surrogates cannot be written as JSON, and would turn into a 500)."""
    response = client.post(path, content=body, headers=JSON)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


def test_a_model_name_that_json_cannot_echo_is_a_404(client):
    for path, body in (
        ("/api/translate", b'{"text": "a dog", "models": ["\\ud800"]}'),
        ("/api/explain", b'{"model": "\\ud800/..", "text": "a dog"}'),
    ):
        response = client.post(path, content=body, headers=JSON)
        assert response.status_code == 404 and response.json()["detail"].startswith("unknown model")


def test_serve_binds_loopback_unless_told(runs, monkeypatch):
    import uvicorn

    from lookback.cli import main

    hosts = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: hosts.append(host))
    assert main(["serve", str(runs["none"]), "--port", "0"]) == 0
    assert main(["serve", str(runs["none"]), "--port", "0", "--host", "0.0.0.0"]) == 0
    assert hosts == ["127.0.0.1", "0.0.0.0"]


def test_bad_requests_are_a_422(client):
    malformed = client.post("/api/translate", content=b'{"text": "a dog', headers=JSON)
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"
    assert translate(client, beam=11).status_code == 422
    assert translate(client, beam=0).status_code == 422
    assert client.post("/api/translate", json={"beam": 2}).status_code == 422  # no text
    assert translate(client, models=[]).json() == {
        "detail": "models is empty: name at least one model, or leave it out for all"
    }


def test_request_bodies_over_64_kib_are_a_413(client):
    big = json.dumps({"text": "a" * MAX_BODY}).encode()
    by_length = client.post("/api/translate", content=big, headers=JSON)
    assert by_length.status_code == 413
    assert by_length.json() == {"detail": "request body too large: the limit is 64 KiB"}

    def chunks():  # streamed without a Content-Length
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    streamed = client.post("/api/translate", content=chunks(), headers=JSON)
    assert streamed.status_code == 413
    small = json.dumps({"text": "a dog ."}).encode()
    ok = client.post("/api/translate", content=iter([small[:5], small[5:]]), headers=JSON)
    assert ok.status_code == 200  # a small streamed body reaches the app whole


def test_openapi_documents_the_api(client):
    schema = client.get("/openapi.json").json()
    assert {"/api/models", "/api/translate", "/api/explain"} <= set(schema["paths"])
    assert "/" not in schema["paths"]
    assert {"TranslateRequest", "TranslateResponse", "ExplainRequest", "TraceOut"} <= set(
        schema["components"]["schemas"]
    )
    assert client.get("/docs").status_code == 200


def test_the_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="text"' in page.text and "static/app.js" in page.text and "static/style.css" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN: works offline
    for asset, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        response = client.get(f"/static/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
        assert "http://" not in response.text and "https://" not in response.text
    assert client.get("/static/../serve.py").status_code == 404


def test_create_app_rejects_duplicate_names(runs):
    with pytest.raises(ValueError, match=r"^two models are named 'none' \(.+\); name them with NAME=DIR$"):
        create_app([str(runs["none"]), f"none={runs['additive']}"])
    with pytest.raises(ValueError, match="at least one run directory"):
        create_app([])
    with pytest.raises(ValueError, match="max_chars must be 1 or more, not 0"):
        create_app([str(runs["none"])], max_chars=0)


def test_concurrent_requests_get_the_answers_of_sequential_ones(client):
    """The decoder returns what it computed and holds nothing between calls: no lock is needed."""
    texts = ("the dog runs .", "a big red house in the park .")
    explain = [{"model": "attn", "text": t} for t in texts] * 4
    translate = [{"models": ["attn"], "text": t, "beam": 3, "nbest": 2} for t in texts] * 4
    alone = [client.post("/api/explain", json=b).json() for b in explain[:2]]
    alone_t = [client.post("/api/translate", json=b).json() for b in translate[:2]]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            assert list(pool.map(lambda b: client.post("/api/explain", json=b).json(), explain)) == alone * 4
            got = list(pool.map(lambda b: client.post("/api/translate", json=b).json(), translate))
            assert got == alone_t * 4


def test_translations_of_one_model_run_side_by_side_up_to_the_workers(runs, monkeypatch):
    """No lock per model: two requests to one model are inside it at once (a lock would time out
    here); `workers` bounds how many translate at once, over all models."""
    inside, most, meet, guard = [0], [0], [True], threading.Lock()
    both_inside = threading.Barrier(2, timeout=60)
    real = Translator.translate_nbest

    def counting(self, *args, **kwargs):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            if meet[0]:
                both_inside.wait()
            return real(self, *args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(Translator, "translate_nbest", counting)
    for workers in (2, 1):
        client = TestClient(create_app([str(runs["additive"])], workers=workers))
        most[0], meet[0] = 0, workers == 2
        with ThreadPoolExecutor(4) as pool:
            answers = pool.map(
                lambda _, c=client: c.post("/api/translate", json={"text": "a dog ."}), range(8)
            )
            assert [a.status_code for a in answers] == [200] * 8
        assert most[0] == workers


def test_an_unexpected_error_is_a_500_without_traceback_or_path(runs, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError(f"boom in {runs['none']}")

    monkeypatch.setattr(Translator, "translate_nbest", broken)
    client = TestClient(create_app([str(runs["none"])]), raise_server_exceptions=False)
    response = client.post("/api/translate", json={"text": "a dog ."})
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; the server log has the details"}
