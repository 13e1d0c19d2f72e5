"""Offset Watch as docker-compose deploys it, on this machine: a private PostgreSQL cluster, a
private Redis, the local stack's Tansu, ZooKeeper and HBase stand-in, then gunicorn (web), one
Celery worker and one beat, each a separate process in its own process group, so a fault run
can SIGKILL, SIGSTOP/SIGCONT and restart any of them (tests/test_fault_matrix.py, bench/faults.py).

Everything listens on loopback ports of its own; logs are under the run directory.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from localstack.components import LOOPBACK, Stack, StackPorts, free_port, port_is_open, stop_process_group

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} not found under /usr/lib/postgresql (apt-get install postgresql)")
    return str(found[-1])


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first found by walking /proc's parent links)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class Process:
    """One server or app process of the deployment, restartable, in its own process group."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    ready: "callable | None" = None
    proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while self.ready is not None and not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log {self.log}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready in {timeout_s} s; log {self.log}:\n{self.tail()}")
            time.sleep(0.1)

    def logged_since_start(self, text: str) -> bool:
        """Whether this start's part of the log holds `text` (how a Celery process says it is up)."""
        try:
            with self.log.open("rb") as f:
                f.seek(getattr(self, "_log_offset", 0))
                return text.encode() in f.read()
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} not started"
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Signal the process group and every descendant: PostgreSQL's backends call setsid(),
        so a group signal alone would leave them running (a "frozen" server still answering)."""
        for pid in [self.pid, *descendants(self.pid)]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.thaw()
            stop_process_group(self.proc.pid, timeout_s=10)


@dataclass
class Deployment:
    run_dir: Path
    poll_interval_s: float = 2.0
    io_timeout_s: float = 2.0
    web_port: int = field(default_factory=free_port)
    pg_port: int = field(default_factory=free_port)
    redis_port: int = field(default_factory=free_port)
    processes: dict[str, Process] = field(default_factory=dict)
    stack: Stack | None = None
    api_token: str = ""
    pg_dir: Path | None = None

    # --- the servers -------------------------------------------------------------------------------------------
    def _postgres(self) -> Process:
        if self.pg_dir is None:
            # Its own directory under /tmp: the postgres user must reach it (pytest's are root-only).
            self.pg_dir = Path(tempfile.mkdtemp(prefix="offsetwatch-pg-"))
            os.chmod(self.pg_dir, 0o755)
        data, sockets = self.pg_dir / "data", self.pg_dir / "sockets"
        if not data.exists():
            data.mkdir(parents=True)
            sockets.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(data, "postgres", "postgres")
                shutil.chown(sockets, "postgres", "postgres")
            subprocess.run(_as_postgres([_pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                         "--no-sync"]), check=True, capture_output=True)
        argv = _as_postgres([_pg_bin("postgres"), "-D", str(data), "-p", str(self.pg_port), "-h", LOOPBACK,
                             "-k", str(sockets), "-c", "fsync=off", "-c", "max_connections=100"])
        return Process("postgres", argv, self.run_dir / "logs" / "postgres.log",
                       ready=lambda: port_is_open(self.pg_port) and self._pg_accepts())

    def _pg_accepts(self) -> bool:
        result = subprocess.run([_pg_bin("pg_isready"), "-q", "-h", LOOPBACK, "-p", str(self.pg_port)])
        return result.returncode == 0

    def _redis(self) -> Process:
        argv = ["redis-server", "--port", str(self.redis_port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                "--dir", str(self.run_dir)]
        return Process("redis", argv, self.run_dir / "logs" / "redis.log", ready=lambda: port_is_open(self.redis_port))

    @property
    def database_url(self) -> str:
        return f"postgres://postgres@{LOOPBACK}:{self.pg_port}/offsetwatch"

    @property
    def redis_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.redis_port}/0"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETWATCH_")}
        env.update({
            "DJANGO_SETTINGS_MODULE": "dashboard.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "OFFSETWATCH_POLL_INTERVAL": str(self.poll_interval_s),
            "OFFSETWATCH_IO_TIMEOUT": str(self.io_timeout_s),
            "OFFSETWATCH_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "OFFSETWATCH_CELERY_CONCURRENCY": "2",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def manage(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, input=stdin,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    # --- the app processes -------------------------------------------------------------------------------------
    def _web(self) -> Process:
        argv = [str(Path(PYTHON).parent / "gunicorn"), "dashboard.wsgi", f"--bind={LOOPBACK}:{self.web_port}",
                "--workers=2", "--timeout=60", "--graceful-timeout=2"]
        return Process("web", argv, self.run_dir / "logs" / "web.log", env=self.env,
                       ready=lambda: port_is_open(self.web_port))

    def _worker(self) -> Process:
        argv = [PYTHON, "-m", "celery", "-A", "collectors.celery_app", "worker", "--loglevel=INFO", "-c", "2",
                "-n", f"worker-{self.web_port}@%h", "--without-gossip", "--without-mingle"]
        proc = Process("worker", argv, self.run_dir / "logs" / "worker.log", env=self.env)
        proc.ready = lambda: proc.logged_since_start(" ready.")
        return proc

    def _beat(self) -> Process:
        argv = [PYTHON, "-m", "celery", "-A", "collectors.celery_app", "beat", "--loglevel=INFO",
                f"--schedule={self.run_dir / 'celerybeat-schedule'}"]
        proc = Process("beat", argv, self.run_dir / "logs" / "beat.log", env=self.env)
        proc.ready = lambda: proc.logged_since_start("beat: Starting")
        return proc

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> "Deployment":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.stack = Stack(self.run_dir / "stack", StackPorts(kafka=free_port(), hbase=free_port(),
                                                              zookeeper=free_port(), redis=0), with_redis=False)
        self.stack.log_dir.mkdir(parents=True, exist_ok=True)
        self.stack.pid_dir.mkdir(parents=True, exist_ok=True)
        for comp in self.stack.components():
            if comp.name != "redis":
                self.stack.start_component(comp, progress=lambda line: None)
        for make in (self._postgres, self._redis):
            proc = make()
            self.processes[proc.name] = proc
            proc.start()
        subprocess.run([_pg_bin("createdb"), "-h", LOOPBACK, "-p", str(self.pg_port), "-U", "postgres", "offsetwatch"],
                       check=True, capture_output=True)
        self.manage("migrate", "--noinput")
        self.manage("create_user", "watcher", "--role", "viewer")
        self.api_token = self.manage("issue_api_token", "--user", "watcher", "--name", "fault-run").strip().split()[-1]
        for make in (self._web, self._worker, self._beat):
            proc = make()
            self.processes[proc.name] = proc
            proc.start()
        return self

    def stop(self) -> None:
        for name in ("beat", "worker", "web", "redis", "postgres"):
            if name in self.processes:
                self.processes[name].stop()
        if self.stack is not None:
            for comp in reversed(self.stack.components()):
                if comp.name != "redis":
                    self.stack.stop_component(comp.name)
        if self.pg_dir is not None:
            shutil.rmtree(self.pg_dir, ignore_errors=True)

    # --- the local stack's servers as processes -----------------------------------------------------------------
    def server_pid(self, name: str) -> int:
        pid = self.stack.running_pid(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        return pid

    def restart_server(self, name: str) -> None:
        comp = next(c for c in self.stack.components() if c.name == name)
        self.stack.start_component(comp, progress=lambda line: None)

    # --- HTTP ------------------------------------------------------------------------------------------------------
    def get(self, path: str, timeout_s: float = 3.0) -> tuple[int, dict | str]:
        """(status, JSON or text) of a GET with the API token; status 0 when nothing answered."""
        request = urllib.request.Request(f"http://{LOOPBACK}:{self.web_port}{path}",
                                         headers={"Authorization": f"Bearer {self.api_token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, OSError, TimeoutError):
            return 0, ""
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode("utf-8", "replace")
