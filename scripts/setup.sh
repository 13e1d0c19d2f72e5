#!/usr/bin/env bash
# Installs what Offset Watch needs on a fresh Debian 12 machine: system packages, a venv and
# the Python packages. Idempotent and quick when everything is present. Sourced by demo.sh
# and test.sh; `scripts/setup.sh --test` also makes sure PostgreSQL is installed and running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

apt_packages=()
command -v java >/dev/null || apt_packages+=(default-jre-headless)          # PySpark, ZooKeeper
[[ -f /usr/share/java/zookeeper.jar ]] || apt_packages+=(zookeeper)          # ZooKeeper store
command -v redis-server >/dev/null || apt_packages+=(redis-server)          # Celery broker
command -v chromium >/dev/null || apt_packages+=(chromium)                  # chart images (kaleido)
if [[ $want_test == 1 ]] && ! command -v pg_ctlcluster >/dev/null; then
  apt_packages+=(postgresql)
fi
# tests/unit/test_deploy.py validates docker-compose.yml offline (no Docker engine is needed).
[[ $want_test == 1 ]] && ! command -v docker-compose >/dev/null && apt_packages+=(docker-compose)
if (( ${#apt_packages[@]} )); then
  echo "setup: installing system packages: ${apt_packages[*]}"
  $SUDO apt-get update -qq
  # Debian's policy-rc.d keeps ZooKeeper/Redis from auto-starting as services; we start our own.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: Python 3.11 is required (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.offsetwatch-installed
digest=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$digest" ]]; then
  echo "setup: installing Python packages (first run downloads PySpark, ~450 MB)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[stack,test]'
  echo "$digest" > "$stamp"
fi
