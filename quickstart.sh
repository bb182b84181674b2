#!/usr/bin/env bash
# The main job: train a small English->French attention model on Multi30k
# (about 15 minutes on 2 CPU cores), translate a few sentences, print BLEU.
# Multi30k is read from $LOOKBACK_MULTI30K, or downloaded to ~/.cache/lookback.
set -euo pipefail
cd "$(dirname "$0")"
run=runs/quickstart
resume=()
[ -f "$run/last.pt" ] && resume=(--resume)  # a second run continues (or just reports) the first
lookback train configs/quickstart.yaml "${resume[@]}"
echo
echo "== translating a few sentences (beam 5)"
sentences=("A little girl is playing with a red ball."
  "Two men are sitting on a bench in the park."
  "A dog runs through the snow.")
printf '  %s\n' "${sentences[@]}"  # not `tee /dev/stderr`: reopening a log file truncates it
printf '%s\n' "${sentences[@]}" | lookback translate "$run" --beam 5
echo
echo "== test_2016_flickr, beam 5"
lookback evaluate "$run" --test multi30k:test_2016_flickr --beam 5
