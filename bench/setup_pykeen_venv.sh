#!/usr/bin/env bash
# Build PyKEEN 1.11's own virtualenv for bench.predict's side-by-side (its predict_target per query).
# Where: $PYKEEN_VENV (default bench/.pykeen-venv, gitignored); bench.predict finds it the same way.
# torch first, pinned to the CPU build (a looser pin pulls a multi-GB CUDA build), then pykeen.
# Idempotent: a stamp file records the pinned set.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PYKEEN_VENV:-$HERE/.pykeen-venv}"
PYTHON="${PYTHON:-python3.11}"
PINS="torch==2.13.0 pykeen==1.11.1"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PINS" ]]; then
    echo "pykeen-venv: up to date ($VENV)"
    exit 0
fi
command -v "$PYTHON" >/dev/null || { echo "pykeen-venv: need $PYTHON on PATH" >&2; exit 1; }
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet "pykeen==1.11.1"
"$VENV/bin/python" -c "import pykeen, torch; print('pykeen-venv: pykeen', pykeen.get_version(), 'torch', torch.__version__)"
echo "$PINS" > "$STAMP"
