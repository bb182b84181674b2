// lookback explorer: translate with every loaded model, draw each attention matrix as a
// heatmap (one row per output token, one column per source token), and trace a step on click.
// Plain DOM code, no libraries; all text from the server goes in through textContent.
"use strict";

const MAX_BEAM = 10;
const DEFAULT_BEAM = 5;
const NO_ATTENTION = "no attention: one fixed context vector for every step";
// From this many source tokens a heatmap's cells shrink to its card's width (heatmap.css, .long)
// and the models stack, one card per row, so that every column shows at once.
const LONG = 24;

let shown = null; // {text, beam} of the results on the page
let asked = 0; // number of the latest translate request: older answers are dropped
const traces = new Map(); // "model|beam|text" -> Promise of the /api/explain answer

// Small helpers.

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

function fmt(x, digits = 2) {
  return Number(x).toFixed(digits);
}

// A FastAPI `detail` is a string, or a list of validation errors with a location each.
function detailText(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).filter((p) => p !== "body").join(".")}: ${d.msg}`).join("; ");
  }
  return "unexpected answer from the server";
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new Error("the server does not answer; is `lookback serve` still running?");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(detailText(data.detail) || `HTTP ${response.status}`);
  return data;
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function setStatus(message) {
  document.getElementById("status").textContent = message;
}

// The weight of a cell as a shade of blue; dark cells get light text.
// Sparse, local and hard attention give weights of exactly 0: those cells are hatched, not white.
function paint(node, weight) {
  node.style.backgroundColor = `rgba(29, 78, 216, ${Math.max(0, Math.min(1, weight))})`;
  node.classList.toggle("dark", weight > 0.55);
  node.classList.toggle("zero", weight === 0);
}

function weightText(w, digits = 3) {
  return w === 0 ? "0 (exactly)" : fmt(w, digits);
}

// Translating.

async function translate() {
  const text = document.getElementById("text").value;
  const beam = Number(document.getElementById("beam").value);
  const mine = ++asked;
  showError("");
  setStatus("translating…");
  document.getElementById("go").disabled = true;
  try {
    const data = await api("api/translate", { text, beam, nbest: beam });
    if (mine !== asked) return;
    shown = { text, beam };
    const results = document.getElementById("results");
    results.replaceChildren(...data.results.map(renderResult));
    results.classList.toggle("long", data.results.some((r) => r.src_tokens.length >= LONG));
    setStatus(`beam ${beam}: ${data.results.length} model${data.results.length === 1 ? "" : "s"}`);
  } catch (err) {
    if (mine === asked) {
      showError(err.message);
      setStatus("");
    }
  } finally {
    if (mine === asked) document.getElementById("go").disabled = false;
  }
}

function renderResult(r) {
  const section = el("section", { class: "model", "data-model": r.model });
  section.append(
    el("h2", {}, el("span", { class: "name", text: r.model }), el("span", { class: "badge", text: r.attention })),
    el("p", { class: "translation", text: r.translation || "(empty)" }),
    renderCandidates(r.candidates),
  );
  if (r.attention_matrix) {
    section.append(el("div", { class: "heat-wrap" }, renderHeatmap(section, r)));
  } else {
    section.append(el("p", { class: "note", text: NO_ATTENTION }), renderTokens(section, r));
  }
  const hint = r.attention_matrix ? "hover an output token to see its attention; click it to trace the step"
    : "click an output token to trace the step";
  section.append(el("p", { class: "info", text: hint }), el("div", { class: "trace" }));
  return section;
}

function renderCandidates(candidates) {
  const list = el("ol", { class: "candidates" });
  for (const c of candidates) {
    list.append(el("li", {}, el("span", { class: "cand-text", text: c.text || "(empty)" }),
      el("span", { class: "score", text: fmt(c.score, 3) })));
  }
  return el("details", { class: "beam", open: "" }, el("summary", { text: `beam candidates (${candidates.length})` }), list);
}

// The heatmap: <th class="src" data-col> per source token, <tr class="heat-row" data-row>
// per output token, <td class="cell" data-row data-col> per weight.
function renderHeatmap(section, r) {
  const table = el("table", { class: r.src_tokens.length >= LONG ? "heatmap long" : "heatmap" });
  const head = el("tr", {}, el("th", { class: "corner", text: "output ↓ · source →" }));
  r.src_tokens.forEach((tok, j) => {
    head.append(el("th", { class: "src", "data-col": j, title: tok }, el("span", { class: "tok", text: tok }),
      el("span", { class: "w" })));
  });
  const body = el("tbody");
  r.attention_matrix.forEach((row, i) => {
    const tr = el("tr", { class: "heat-row", "data-row": i },
      el("th", { class: "tgt", "data-row": i, tabindex: "0", title: r.tokens[i], text: r.tokens[i] }));
    row.forEach((w, j) => {
      const td = el("td", { class: "cell", "data-row": i, "data-col": j, title: `${r.src_tokens[j]} → ${r.tokens[i]} ${weightText(w, 2)}` });
      paint(td, w);
      tr.append(td);
    });
    body.append(tr);
  });
  table.append(el("thead", {}, head), body);

  const target = (event) => event.target.closest("td.cell, th.tgt");
  table.addEventListener("mouseover", (event) => {
    const node = target(event);
    if (node) highlight(section, r, Number(node.dataset.row), node.dataset.col === undefined ? null : Number(node.dataset.col));
  });
  table.addEventListener("focusin", (event) => {
    const node = target(event);
    if (node) highlight(section, r, Number(node.dataset.row), null);
  });
  table.addEventListener("mouseleave", () => clearHighlight(section));
  table.addEventListener("click", (event) => {
    const node = target(event);
    if (node) showTrace(section, r, Number(node.dataset.row));
  });
  table.addEventListener("keydown", (event) => {
    const node = target(event);
    if (node && event.key === "Enter") showTrace(section, r, Number(node.dataset.row));
  });
  return table;
}

// Shade every source header by the weight that output token `row` gave it.
function highlight(section, r, row, col) {
  const weights = r.attention_matrix[row];
  section.querySelectorAll("th.src[data-col]").forEach((th) => {  // the heatmap's, not a trace's strips
    const w = weights[Number(th.dataset.col)];
    th.classList.add("lit");
    paint(th, w);
    th.querySelector(".w").textContent = fmt(w);
  });
  section.querySelectorAll("tr.heat-row").forEach((tr) => tr.classList.toggle("active", Number(tr.dataset.row) === row));
  section.querySelectorAll("td.cell.hover").forEach((td) => td.classList.remove("hover"));
  const info = section.querySelector(".info");
  if (col !== null) {
    section.querySelector(`td.cell[data-row="${row}"][data-col="${col}"]`).classList.add("hover");
    info.textContent = `${r.src_tokens[col]} → ${r.tokens[row]} ${fmt(weights[col])}`;
  } else {
    const top = weights.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    info.textContent = `${r.tokens[row]} ← ` + top.map(([w, j]) => `${r.src_tokens[j]} ${fmt(w)}`).join(", ");
  }
}

function clearHighlight(section) {
  section.querySelectorAll("th.src[data-col]").forEach((th) => {  // the heatmap's, not a trace's strips
    th.classList.remove("lit", "dark");
    th.style.backgroundColor = "";
    th.querySelector(".w").textContent = "";
  });
  section.querySelectorAll("tr.heat-row.active").forEach((tr) => tr.classList.remove("active"));
  section.querySelectorAll("td.cell.hover").forEach((td) => td.classList.remove("hover"));
}

// Without attention there is no matrix: the output tokens alone, each clickable.
function renderTokens(section, r) {
  const list = el("div", { class: "tokens" });
  r.tokens.forEach((tok, i) => {
    const button = el("button", { type: "button", class: "tok", "data-row": i, text: tok });
    button.addEventListener("click", () => showTrace(section, r, i));
    list.append(button);
  });
  return list;
}

// Tracing one step.

function explain(model) {
  const key = `${model}|${shown.beam}|${shown.text}`;
  if (!traces.has(key)) {
    const request = api("api/explain", { model, text: shown.text, beam: shown.beam, hypothesis: 0 });
    request.catch(() => traces.delete(key)); // an error is not kept: the next click asks again
    traces.set(key, request);
  }
  return traces.get(key);
}

async function showTrace(section, r, row) {
  const box = section.querySelector(".trace");
  section.querySelectorAll(".selected").forEach((n) => n.classList.remove("selected"));
  section.querySelectorAll(`th.tgt[data-row="${row}"], button.tok[data-row="${row}"]`)
    .forEach((n) => n.classList.add("selected"));
  box.replaceChildren(el("p", { class: "muted", text: `tracing step ${row + 1}…` }));
  try {
    const trace = await explain(r.model);
    box.replaceChildren(renderStep(trace, trace.steps[row]));
  } catch (err) {
    box.replaceChildren(el("p", { class: "error", text: err.message }));
  }
}

function renderStep(trace, step) {
  const out = el("div", { class: "step", "data-step": step.index });
  out.append(el("h3", { text: `step ${step.index}: “${step.token}”, P = ${fmt(step.prob, 3)}` }));
  const moved = step.context_change === null ? "" : `, moved ${fmt(step.context_change, 3)} since the last step`;
  // Gradient bars are |a_i| over the step's largest |a|, beside the weights: where the output token
  // looked, and what it depended on.
  const grad = step.gradient;
  const gradMax = grad ? Math.max(...grad.map(Math.abs), 1e-12) : 1;
  const gradCells = (i) => grad ? [el("td", { class: "num grad", text: fmt(grad[i], 3) }),
    el("td", { class: "bar-col" }, gradBar(grad[i], gradMax))] : [];
  const gradHead = grad ? [el("th", { text: "gradient × input (IG)" }), el("th", { class: "bar-col" })] : [];
  if (step.weights) {
    const table = el("table", { class: "trace-table" },
      el("thead", {}, el("tr", {}, el("th", { text: "source" }), el("th", { text: "(1) score e" }),
        el("th", { text: "(2) weight α" }), el("th", { class: "bar-col" }), ...gradHead)));
    const body = el("tbody");
    trace.src_tokens.forEach((tok, i) => {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${100 * step.weights[i]}%`;
      body.append(el("tr", {}, el("td", { text: tok }), el("td", { class: "num", text: step.scores[i] === null ? "not scored" : fmt(step.scores[i], 3) }),
        el("td", { class: "num", text: weightText(step.weights[i]) }), el("td", { class: "bar-col" }, bar), ...gradCells(i)));
    });
    table.append(body);
    out.append(table,
      el("p", { class: "focus", text: `most attended: ${step.focus} (${fmt(Math.max(...step.weights), 3)})` }),
      el("p", { class: "context", text: `(3) context c_t: ${step.context_size} numbers, |c| = ${fmt(step.context_norm, 3)}${moved}` }));
  } else {
    out.append(el("p", { class: "context", text: `${NO_ATTENTION}. c: ${step.context_size} numbers, |c| = ${fmt(step.context_norm, 3)}${moved}` }));
    if (grad) {
      const table = el("table", { class: "trace-table" }, el("thead", {}, el("tr", {}, el("th", { text: "source" }), ...gradHead)));
      const body = el("tbody");
      trace.src_tokens.forEach((tok, i) => body.append(el("tr", {}, el("td", { text: tok }), ...gradCells(i))));
      table.append(body);
      out.append(table);
    }
  }
  if (step.heads) out.append(...layersAndHeads(trace, step));
  out.append(...sentenceNotes(trace));
  const top = el("ol", { class: "top" });
  for (const [tok, p] of step.top) top.append(el("li", {}, el("span", { text: tok }), el("span", { class: "num", text: fmt(p, 3) })));
  out.append(el("p", { class: "muted", text: "most probable next tokens:" }), top);
  return out;
}

// A transformer: the step's weights in every layer and head, over the source and over the output so
// far (its masked self-attention), one shaded strip per head; then the encoder's self-attention.
function layersAndHeads(trace, step) {
  const before = ["<s>", ...trace.tokens].slice(0, step.index);
  // rows: [label, weights over `tokens`] -> a table of shaded cells, one row each
  const grid = (title, rows, tokens) => {
    const table = el("table", { class: "heatmap heads" });
    const head = el("tr", {}, el("th", { text: title }));
    tokens.forEach((tok) => head.append(el("th", { class: "src", title: tok }, el("span", { class: "tok", text: tok }))));
    const body = el("tbody");
    rows.forEach(([label, weights]) => {
      const tr = el("tr", {}, el("th", { text: label }));
      weights.forEach((w, j) => {
        const td = el("td", { class: "cell", title: `${label}: ${tokens[j]} ${weightText(w, 2)}` });
        paint(td, w);
        tr.append(td);
      });
      body.append(tr);
    });
    table.append(el("thead", {}, head), body);
    return table;
  };
  const byHead = (layers) => layers.flatMap((heads, l) => heads.map((w, h) => [`layer ${l + 1}, head ${h + 1}`, w]));
  const parts = [
    el("p", { class: "muted", text: "α above is the top layer's heads' mean; each layer and head:" }),
    grid("over the source", byHead(step.heads), trace.src_tokens),
    grid("over the output so far", byHead(step.self_weights), before),
  ];
  if (trace.encoder_self) {
    const details = el("details", { class: "encoder-self" }, el("summary", { text: "the encoder's self-attention, by layer and head" }));
    trace.encoder_self.forEach((heads, l) => heads.forEach((rows, h) => {
      details.append(grid(`layer ${l + 1}, head ${h + 1}`, rows.map((w, i) => [trace.src_tokens[i], w]), trace.src_tokens));
    }));
    parts.push(details);
  }
  return parts;
}

function gradBar(a, max) {
  const bar = el("div", { class: a < 0 ? "bar grad-bar neg" : "bar grad-bar" });
  bar.style.width = `${100 * Math.abs(a) / max}%`;
  return bar;
}

// The whole sentence: attention against gradients, and its attention diagnostics.
function sentenceNotes(trace) {
  const notes = [];
  const pct = (x) => (x === null || x === undefined ? "–" : `${Math.round(100 * x)}%`);
  const a = trace.agreement;
  if (a && a.tokens) {
    const tau = a.kendall_tau === null ? "–" : fmt(a.kendall_tau, 2);
    notes.push(el("p", { class: "agreement", text: `attention vs gradients over the ${a.tokens} steps: Kendall τ ${tau}, same top source token at ${pct(a.same_top)} of steps` }));
  }
  const d = trace.diagnostics;
  if (d) {
    const entropy = d.entropy === null ? "–" : fmt(d.entropy, 2);
    notes.push(el("p", { class: "diagnostics", text: `diagnostics: entropy ${entropy} (1 = uniform), ${pct(d.near_uniform)} of steps near uniform, ${pct(d.unattended)} of source tokens never the focus, ${pct(d.parking)} of the weight on </s> and punctuation (${pct(d.parking_share)} if uniform), ${pct(d.backward)} of moves backward` }));
  }
  return notes;
}

// Start: fill the beam selector, list the models, translate on submit (Enter too).

async function start() {
  const select = document.getElementById("beam");
  for (let k = 1; k <= MAX_BEAM; k++) select.append(el("option", { value: k, text: k === 1 ? "1 (greedy)" : k }));
  select.value = DEFAULT_BEAM;
  document.getElementById("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    translate();
  });
  try {
    const models = await api("api/models");
    const kind = (m) => (m.encoder === "rnn" && m.decoder === "rnn" ? m.cell : `${m.encoder} encoder, ${m.decoder} decoder`);
    document.getElementById("models").textContent = "loaded: " + models.map((m) => `${m.name} (${m.attention}, ${kind(m)}, ${m.src_lang}→${m.tgt_lang})`).join(" · ");
  } catch (err) {
    showError(err.message);
  }
}

start();
