#!/usr/bin/env bash
# Install Debian's chromium for the headless UI check (tests/deployments/test_ui_check.py).
# Idempotent: does nothing when a chromium is already on PATH. About 22 s on a fresh
# Debian 12 container (apt-get update + ~100 MB of packages). Needs root, or sudo.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-chromium: need root or sudo to apt-get install chromium" >&2; exit 1; }
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "installed $(chromium --version 2>/dev/null || echo chromium)"
