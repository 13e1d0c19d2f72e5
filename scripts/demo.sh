#!/usr/bin/env bash
# Sets up and runs the live demo on embedded defaults (SQLite, local stack on loopback).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
exec .venv/bin/python manage.py demo "$@"
