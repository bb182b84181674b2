#!/usr/bin/env bash
# Install the peer, Joey NMT 2.3.0, into its own virtual environment.
#
#   bench/peers/setup_joey.sh [--venv DIR]                  online: from PyPI
#   bench/peers/setup_joey.sh --download DIR                online: fill DIR with wheels for later
#   bench/peers/setup_joey.sh --wheel FILE [--wheels DIR]   offline (e.g. a GPU machine)
#
# Online (the default): `pip install joeynmt==2.3.0 torch==2.13.0 ...` into
# DIR (default bench/.venv-joey). torch is pinned in the same pip command,
# always: any looser spec lets pip pick a CUDA build and download gigabytes.
#
# Offline: FILE is Joey's wheel (joeynmt-2.3.0-py3-none-any.whl). The venv
# sees the machine's own packages (its CUDA torch first): with
# --system-site-packages, and, where the python that makes it is itself a
# venv's (as on the GPU machines, whose torch lives in one), through a .pth
# file naming that venv's site-packages. pip installs Joey's wheel and every
# wheel in the folder given with --wheels, each with --no-deps and nothing
# from the network: the folder holds what this machine lacks, which the
# final check (Joey's modules import) proves sufficient. Make a full folder
# on a machine with internet and the same Python version with --download DIR
# (Joey's wheel and its dependencies, torch left out); on a machine that has
# most of them, the few it lacks do (for Joey 2.3.0 here: subword-nmt, mock,
# importlib_metadata 8.x, sentencepiece 0.2.0). Without --wheels, the wheel alone.
#
# Idempotent: an existing venv in which Joey already imports is kept.
# Joey 2.3.0 needs two things its own requirements do not say: the
# importlib_metadata package, and sentencepiece <= 0.2.0 (it calls
# SentencePieceProcessor.SetVocabulary, which 0.2.1 removed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(dirname "$here")/.venv-joey"
wheel=""
wheels=""
download=""
python="${PYTHON:-python3}"
extras=(importlib_metadata "sentencepiece==0.2.0")
while [[ $# -gt 0 ]]; do
    case "$1" in
        --venv) venv="$2"; shift 2 ;;
        --wheel) wheel="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        --download) download="$2"; shift 2 ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "setup_joey.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [[ -n "$download" ]]; then
    # torch==2.13.0 is named so that pip resolves against the local CPU wheel, then dropped
    "$python" -m pip download -d "$download" "joeynmt==2.3.0" "torch==2.13.0" "${extras[@]}"
    rm -f "$download"/torch-*.whl
    echo "wheels for an offline install in $download; copy it, then: $0 --wheel $download/joeynmt-2.3.0-py3-none-any.whl --wheels $download"
    exit 0
fi

check() {  # prints the versions; fails if Joey cannot be imported or cannot run
    "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import joeynmt.training, joeynmt.prediction  # the modules the peer script uses
import sentencepiece, torch
assert md.version("joeynmt") == "2.3.0", md.version("joeynmt")
assert hasattr(sentencepiece.SentencePieceProcessor, "SetVocabulary"), "sentencepiece too new for Joey 2.3.0"
print(f"joeynmt {md.version('joeynmt')}, torch {torch.__version__}, "
      f"sentencepiece {sentencepiece.__version__}, cuda {torch.cuda.is_available()}")
PY
}

if [[ -x "$venv/bin/python" ]] && check >/dev/null 2>&1; then
    echo "Joey NMT already installed in $venv: $(check)"
    exit 0
fi

if [[ -n "$wheel" ]]; then
    [[ -f "$wheel" ]] || { echo "setup_joey.sh: no such wheel: $wheel" >&2; exit 1; }
    # without pip in it: the wheels go in with the making python's pip (a bare image's python may lack ensurepip)
    "$python" -m venv --system-site-packages --without-pip "$venv"
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    # a venv made by a venv's python sees the base Python's packages, not that venv's: add them after its own
    parent="$("$python" -c 'import sys, sysconfig; print(sysconfig.get_path("purelib") if sys.prefix != sys.base_prefix else "")')"
    if [[ -n "$parent" ]]; then
        echo "import site; site.addsitedir('$parent')" > "$own/_parent_venv.pth"
    fi
    shopt -s nullglob
    [[ -n "$wheels" ]] && set -- "$wheels"/*.whl || set --
    "$python" -m pip install --quiet --no-index --no-deps --target "$own" "$wheel" "$@"
else
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --upgrade --quiet pip
    "$venv/bin/python" -m pip install "joeynmt==2.3.0" "torch==2.13.0" "${extras[@]}"
fi
versions="$(check)"  # a failed check stops the script here (set -e)
echo "Joey NMT installed in $venv: $versions"
