#!/usr/bin/env bash
# The main job, run from the repository: `lookback quickstart` (train the shipped quickstart config
# for 12 minutes, translate three sentences, print test BLEU), writing runs/quickstart here.
# Multi30k is read from $LOOKBACK_MULTI30K, or downloaded to ~/.cache/lookback.
set -euo pipefail
cd "$(dirname "$0")"
exec lookback quickstart "$@"
