"""The web explorer: translations, beam candidates and attention of several models, side by side.

    lookback serve runs/none runs/additive            # then open http://127.0.0.1:8000/
    lookback serve base=runs/none attn=runs/additive  # NAME=DIR names a model

A thin FastAPI layer over `Translator` and `explain.trace`; the page in
`lookback/serve/web/` is plain HTML, CSS and JavaScript (no build step, no CDN).
The JSON API is documented at /docs and /openapi.json:

    GET  /api/models      the loaded models
    POST /api/translate   {text, beam, nbest, models} -> one result per model
    POST /api/explain     {model, text, beam, hypothesis} -> a step-by-step trace

A model name in a request is only ever looked up among the loaded models;
it never reaches the filesystem.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from ..config import search_width
from ..device import cores
from ..errors import first_line
from ..explain.trace import trace
from ..model.seq2seq import count_parameters
from ..training.checkpoint import parse_run_dirs
from ..translator import Translator

log = logging.getLogger(__name__)

WEB = Path(__file__).parent / "web"  # index.html, app.js, style.css
HEATMAP_CSS = Path(__file__).parent.parent / "heatmap.css"  # the heatmap, as notebooks draw it too
MAX_BODY = 64 * 1024  # bytes; a sentence of max_chars fits many times over
MAX_BEAM = 10


# The JSON API: requests and responses, so that /openapi.json documents them.


class ModelInfo(BaseModel):
    name: str
    attention: str = Field(description="score function: none, dot, general or additive")
    encoder: str = Field("rnn", description="rnn, or transformer: attention only")
    decoder: str = Field("rnn", description="rnn, or transformer: attention only")
    cell: str = Field(description="the RNN cell of an RNN encoder or decoder")
    hidden_size: int = Field(description="encoder hidden size per direction (a transformer's d)")
    parameters: int
    src_lang: str
    tgt_lang: str
    beam: int = Field(description="the run's default beam size")


class TranslateRequest(BaseModel):
    text: str = Field(description="one source sentence", examples=["a small dog runs in the park ."])
    beam: int = Field(5, ge=1, le=MAX_BEAM, description="beam size (1: greedy)")
    nbest: int | None = Field(
        None,
        ge=1,
        le=MAX_BEAM,
        description="candidates per model (default: the beam); a smaller beam grows to it",
    )
    models: list[str] | None = Field(None, description="model names; leave out for all")


class Candidate(BaseModel):
    text: str
    score: float = Field(description="log-probability over the length penalty")


class ModelResult(BaseModel):
    model: str
    attention: str
    translation: str
    score: float
    src_tokens: list[str]
    tokens: list[str]
    attention_matrix: list[list[float]] | None = Field(
        description="one row per output token, one column per source token; null without attention"
    )
    candidates: list[Candidate] = Field(description="best first")


class TranslateResponse(BaseModel):
    results: list[ModelResult]


class ExplainRequest(BaseModel):
    model: str
    text: str = Field(examples=["a small dog runs in the park ."])
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="beam size (1: greedy)")
    hypothesis: int = Field(0, ge=0, lt=MAX_BEAM, description="which beam hypothesis, 0 = the best")


class StepOut(BaseModel):  # mirrors explain.Step
    index: int = Field(description="t, counted from 1")
    token: str
    prob: float
    top: list[tuple[str, float]] = Field(description="the most probable next pieces, with probabilities")
    scores: list[float | None] | None = Field(
        description="e_{t,i}, one per source piece (null: outside a local window); null without attention"
    )
    weights: list[float] | None = Field(description="alpha_{t,i}, summing to 1; null without attention")
    focus: str | None
    context_size: int
    context_norm: float
    context_change: float | None
    gradient: list[float] | None = Field(
        None, description="integrated gradients of log P(token) per source piece (attribution.py)"
    )
    heads: list[list[list[float]]] | None = Field(
        None, description="a transformer decoder's weights over the source, [layer][head][source piece]"
    )
    self_weights: list[list[list[float]]] | None = Field(
        None, description="a transformer decoder's self-attention, [layer][head][<s> y_1 .. y_{t-1}]"
    )


class TraceOut(BaseModel):  # mirrors explain.Trace
    source: str
    src_tokens: list[str]
    translation: str
    tokens: list[str]
    attention: str
    normalizer: str = Field(description="softmax, sparsemax or entmax15")
    window: str = Field(description="global, local_m or local_p")
    beam: int
    hypothesis: int
    score: float
    steps: list[StepOut] = Field(description="one per output token, then </s>")
    agreement: dict[str, float | int | None] | None = Field(
        None, description="attention vs gradients: kendall_tau, same_top, tokens; null without attention"
    )
    diagnostics: dict[str, float | int | None] | None = Field(
        None, description="the sentence's attention diagnostics (diagnostics.py); null without attention"
    )
    encoder_self: list[list[list[list[float]]]] | None = Field(
        None, description="a transformer encoder's self-attention, [layer][head][piece i][piece j]"
    )


# Loading the models.


@dataclass
class Loaded:
    translator: Translator  # holds no state between calls: requests to one model run side by side
    info: ModelInfo


def load_model(
    name: str, run_dir: Path, checkpoint: str, device: str = "cpu", precision: str | None = None
) -> Loaded:
    translator = Translator.load(run_dir, checkpoint, device, precision)
    cfg = translator.config
    info = ModelInfo(
        name=name,
        attention=cfg.model.attention,
        encoder=cfg.model.encoder,
        decoder=cfg.model.decoder,
        cell=cfg.model.cell,
        hidden_size=cfg.model.hidden_size,
        parameters=count_parameters(translator.model),
        src_lang=cfg.data.src_lang,
        tgt_lang=cfg.data.tgt_lang,
        beam=translator.decode.beam,
    )
    return Loaded(translator, info)


# Requests: size limit and checks.


class BodyLimit:
    """Answer 413 to a request body over `limit` bytes, and 422 to one that is not UTF-8.

    The size is checked by Content-Length or as the body streams in. JSON is UTF-8 (RFC 8259);
    FastAPI would answer other bytes with a 400. The body is read here (at most `limit` bytes)
    and handed on to the app in one piece.
    """

    def __init__(self, app, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and not declared.isdigit():
            return await JSONResponse({"detail": "Content-Length is not a number"}, 400)(scope, receive, send)
        if declared is not None and int(declared) > self.limit:
            return await self._too_large(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:  # no Content-Length, or a false one
                return await self._too_large(scope, receive, send)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = {
                "type": "json_invalid",
                "loc": ["body", exc.start],
                "msg": "JSON decode error: not UTF-8",
            }
            return await JSONResponse({"detail": [problem]}, 422)(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()  # after the body: wait for a disconnect, as the server would
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        limit = f"{self.limit // 1024} KiB" if self.limit % 1024 == 0 else f"{self.limit} bytes"
        response = JSONResponse({"detail": f"request body too large: the limit is {limit}"}, 413)
        await response(scope, receive, send)


def _json_safe(x: str | int) -> str | int:
    """`x` with lone surrogates escaped, which JSON cannot carry."""
    return x.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(x, str) else x


def create_app(
    run_dirs: list[str],
    checkpoint: str = "best",
    max_chars: int = 500,
    device: str = "cpu",
    precision: str | None = None,
    workers: int | None = None,
) -> FastAPI:
    """The explorer's app, with every model of `run_dirs` loaded (`NAME=DIR` names one).

    The models keep no state between calls, so requests need no lock; at most `workers`
    (default: this machine's cores) translate at once, whatever the model. More threads
    than cores fight over them: measured in docs/reliability.md.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be 1 or more, not {max_chars}")
    slots = threading.BoundedSemaphore(workers or cores())
    models = {
        name: load_model(name, d, checkpoint, device, precision)
        for name, d in parse_run_dirs(run_dirs).items()
    }
    app = FastAPI(
        title="lookback explorer",
        summary="Translations, beam candidates and attention of RNN encoder-decoder models.",
        version="0.1.0",
    )
    app.add_middleware(BodyLimit, limit=MAX_BODY)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 with each problem's type, place and message, without echoing the input.

        Echoed back, the input could be large, or hold what JSON cannot carry (NaN, 1e400, lone
        surrogates), which would turn the answer into a 500.
        """
        detail = [
            {"type": e["type"], "loc": [_json_safe(x) for x in e["loc"]], "msg": _json_safe(e["msg"])}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail}, 422)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)  # the traceback stays in the log
        return JSONResponse({"detail": "internal error; the server log has the details"}, 500)

    def model(name: str) -> Loaded:
        if name not in models:
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise HTTPException(404, f"unknown model {shown!r}; loaded: {', '.join(models)}")
        return models[name]

    def check_text(text: str) -> None:
        if not text.strip():
            raise HTTPException(422, "text is empty: type a sentence to translate")
        if len(text) > max_chars:
            raise HTTPException(422, f"text is {len(text)} characters long; the limit is {max_chars}")
        if _json_safe(text) != text:  # "\ud800" in the JSON: no character, and no JSON answer could hold it
            raise HTTPException(422, "text is not valid Unicode: it holds a lone surrogate")

    def answer(m: Loaded, fn):
        """fn(translator), in one of the workers' slots; its ValueError becomes a 422."""
        try:
            with slots:
                return fn(m.translator)
        except ValueError as exc:
            raise HTTPException(422, first_line(exc)) from None

    @app.get("/api/models", response_model=list[ModelInfo], summary="the loaded models")
    def list_models() -> list[ModelInfo]:
        return [m.info for m in models.values()]

    @app.post("/api/translate", response_model=TranslateResponse, summary="translate with each model")
    def translate(req: TranslateRequest) -> TranslateResponse:
        check_text(req.text)
        names = list(models) if req.models is None else list(dict.fromkeys(req.models))
        if not names:
            raise HTTPException(422, "models is empty: name at least one model, or leave it out for all")
        chosen = [model(name) for name in names]  # 404 before any work
        nbest = req.nbest or req.beam
        beam = search_width(req.beam, nbest)  # the one policy: the beam grows to nbest
        results = []
        for m in chosen:
            outs = answer(m, lambda t: t.translate_nbest([req.text], beam, nbest)[0])
            best = outs[0]
            if not best.src_tokens:  # e.g. only control characters: the tokenizer keeps nothing
                raise HTTPException(422, f"nothing to translate: {req.text!r} has no source tokens")
            results.append(
                ModelResult(
                    model=m.info.name,
                    attention=m.info.attention,
                    translation=best.text,
                    score=best.score,
                    src_tokens=best.src_tokens,
                    tokens=best.tokens,
                    attention_matrix=None if best.attention is None else best.attention.tolist(),
                    candidates=[Candidate(text=o.text, score=o.score) for o in outs],
                )
            )
        return TranslateResponse(results=results)

    @app.post("/api/explain", response_model=TraceOut, summary="trace one translation step by step")
    def explain(req: ExplainRequest) -> dict:
        m = model(req.model)
        check_text(req.text)
        return answer(m, lambda t: trace(t, req.text, req.beam, req.hypothesis).to_dict())

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html")

    @app.get("/static/heatmap.css", include_in_schema=False)
    def heatmap_css() -> FileResponse:  # the heatmap's drawing, shared with notebooks (display.py)
        return FileResponse(HEATMAP_CSS, media_type="text/css")

    app.mount("/static", StaticFiles(directory=WEB), name="static")
    return app


def serve(run_dirs: list[str], host: str = "127.0.0.1", port: int = 8000, **options: Any) -> None:
    """Load the models (`options`: those of `create_app`) and serve the explorer until Ctrl-C."""
    import socket

    import uvicorn

    app = create_app(run_dirs, **options)
    try:  # a port in use gets the CLI's one-line error, before anything is printed
        socket.create_server((host, port)).close()
    except OSError as exc:
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets
    print(f"lookback explorer: http://{shown}:{port}/  (API: /openapi.json, /docs; Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
