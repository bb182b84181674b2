"""Attention's FLOPs by source length for every model of configs/study/attention_variants.yaml.

FLOPs do not depend on the weights, so the models are built untrained, at the
study's sizes and an 8,000-piece vocabulary (the Multi30k configs'). Writes
attention_flops.{csv,json,png,svg} and report.md beside this file:

    python results/study/attention_flops/make.py
"""

import json
from pathlib import Path

from lookback.explain.cost import step_flops
from lookback.model.seq2seq import build_model
from lookback.study.run import _write_flops, load_study

HERE = Path(__file__).parent
VOCAB = 8000
LENGTHS = [10, 20, 40, 80, 160]

study = load_study(HERE.parents[2] / "configs" / "study" / "attention_variants.yaml")
rows = []
for name, cfg in study.configs().items():
    model = build_model(cfg.model, VOCAB, VOCAB)
    rows += [{"model": name, **step_flops(model, S)} for S in LENGTHS]
report = _write_flops(HERE, rows)
(HERE / "attention_flops.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
(HERE / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
