#!/usr/bin/env bash
# Sets up and runs the whole test suite against real PostgreSQL, Redis, Tansu, ZooKeeper,
# the HBase Thrift stand-in and PySpark. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --test

# Lint first (seconds): ruff for the code, import-linter for the layering contracts (pyproject.toml),
# and no module over 400 lines without its reason at its top.
echo "test: ruff"
.venv/bin/ruff check --no-cache .
echo "test: import-linter"
.venv/bin/lint-imports --no-cache
echo "test: module sizes"
.venv/bin/python scripts/check_module_size.py
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

# PostgreSQL: the machine's server if it runs, else start (and if new, let us log in).
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "test: starting PostgreSQL"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | tail -1)" main start
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  # A fresh install refuses TCP logins without a password: give the postgres role one.
  $SUDO su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
fi
# Redis: reuse a running server, else start one that keeps nothing on disk.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "test: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no --dir /tmp \
    --logfile /tmp/offsetwatch-test-redis.log
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

export DATABASE_URL=${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/offsetwatch}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/15}
exec .venv/bin/python -m pytest "$@"
