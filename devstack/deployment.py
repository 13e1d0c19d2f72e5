"""The deployed topology on one machine: every process docker-compose runs, each its own process.
Over 400 lines because the processes are started, watched, frozen and killed together: each
control reads the same process table.

A private PostgreSQL cluster and a private Redis (both on free loopback ports, so a test may
SIGKILL or SIGSTOP them without touching the shared servers), then, as compose's services do:
`manage.py migrate` (the one-shot `migrate` service), gunicorn serving offsetwatch.wsgi (`web`),
one Celery worker on the queues collect and default (`worker`) and one `celery beat` (`beat`).
The app processes get the environment compose gives them (OFFSETWATCH_ENV=production, the
database and Redis URLs, a shared export directory) plus a short poll interval.

Used by tests/integration/test_deployed.py and the fault matrix (devstack/fault_matrix.py, bench/faults.py):

    deployment = Deployment(tmp_dir, stack=running_stack, poll_interval_s=2)
    deployment.start()                     # postgres, redis, migrate, web, worker, beat
    deployment.shell("print(1)")           # `manage.py shell -c` with the app's environment
    deployment.manage("create_user", ...)  # any management command (a CompletedProcess)
    http = deployment.session("alice", "password")  # a logged-in HTTP session (cookies, CSRF)
    deployment.freeze("postgres"); deployment.thaw("postgres")    # SIGSTOP / SIGCONT the group
    deployment.kill("worker"); deployment.restart("worker")       # SIGKILL; start again
    deployment.stop_process("postgres"); deployment.start_process("postgres")  # graceful
    deployment.logs()                      # the tail of every log, for failure messages
    deployment.stop()                      # everything, in reverse order

Process names: postgres, redis, web, worker, beat. Each runs in its own session (process group),
so a signal reaches its children too (PostgreSQL's backends, gunicorn's and Celery's workers).
Logs are under `run_dir/logs/<name>.log`.
"""
from __future__ import annotations

import glob
import http.cookiejar
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from devstack.components import LOOPBACK, free_port, port_is_open

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PROCESSES = ("postgres", "redis", "web", "worker", "beat")


class DeploymentError(RuntimeError):
    """A process did not start or a command failed; the message carries the relevant log tail."""


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if not path:
        raise DeploymentError(f"{name}: PostgreSQL server binaries not found (apt-get install postgresql)")
    return path


def wait_for(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.1):
    """The first truthy value of predicate() within timeout_s, else None."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    is_ready: Callable[[], bool]
    user: str | None = None
    popen: subprocess.Popen | None = None
    ready_timeout_s: float = 30.0
    start_offset: int = 0  # where its log's latest start begins

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None and self.popen.poll() is None else None


@dataclass
class HttpSession:
    """A browser-like client of the web process: cookies, the CSRF token on unsafe requests."""

    base_url: str
    jar: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)
    timeout_s: float = 15.0

    def __post_init__(self):
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect())

    def csrf_token(self) -> str:
        return next((c.value for c in self.jar if c.name == "csrftoken"), "")

    def request(self, method: str, path: str, data: dict | None = None, headers: dict | None = None):
        """(status, headers, body bytes); never raises for an HTTP status."""
        body = urllib.parse.urlencode(data or {}, doseq=True).encode() if method != "GET" else None
        url = self.base_url + path
        if method == "GET" and data:
            url += "?" + urllib.parse.urlencode(data, doseq=True)
        request = urllib.request.Request(url, data=body, method=method, headers={
            **({"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": self.csrf_token(),
                "Referer": self.base_url + "/"} if method != "GET" else {}),
            **(headers or {})})
        try:
            with self.opener.open(request, timeout=self.timeout_s) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def get(self, path: str, params: dict | None = None, headers: dict | None = None):
        return self.request("GET", path, params, headers)

    def post(self, path: str, data: dict | None = None, headers: dict | None = None):
        return self.request("POST", path, data, headers)

    def login(self, username: str, password: str) -> None:
        self.get("/login/")  # the CSRF cookie
        status, headers, _ = self.post("/login/", {"username": username, "password": password,
                                                  "csrfmiddlewaretoken": self.csrf_token()})
        if status != 302:
            raise DeploymentError(f"login of {username!r} answered {status}, not a redirect")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is an answer to look at, not to follow


class Deployment:
    """Starts, signals and stops the deployed processes under `run_dir` (see the module doc)."""

    def __init__(self, run_dir: Path, *, stack=None, poll_interval_s: float = 2.0, env: dict[str, str] | None = None,
                 web_workers: int = 2, worker_concurrency: int = 2):
        self.run_dir = Path(run_dir)
        self.log_dir = self.run_dir / "logs"
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        # Outside run_dir: a root-owned temporary directory is closed to the postgres account.
        self.pg_dir = Path(tempfile.mkdtemp(prefix="offsetwatch-pg-")) / "data"
        self.base_url = f"http://{LOOPBACK}:{self.web_port}"
        self.database_url = f"postgres://postgres@{LOOPBACK}:{self.pg_port}/offsetwatch"
        self.redis_url = f"redis://{LOOPBACK}:{self.redis_port}/0"
        self.export_dir = self.run_dir / "exports"
        # As compose's x-app environment, with this machine's addresses and a short poll interval.
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OFFSETWATCH_", "DJANGO_", "CELERY_"))},
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "offsetwatch.settings",
            "OFFSETWATCH_ENV": "production",
            "OFFSETWATCH_SECRET_KEY": secrets.token_urlsafe(50),
            "OFFSETWATCH_ALLOWED_HOSTS": f"{LOOPBACK},localhost",
            # Plain HTTP on loopback: cookies without the Secure flag (what a trial over HTTP sets).
            "OFFSETWATCH_SECURE_COOKIES": "false",
            # No collectstatic (5 s): the pages use plain static names, served by nobody here.
            "OFFSETWATCH_SERVE_STATIC": "false",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "OFFSETWATCH_RUN_DIR": str(self.run_dir / "run"),
            "OFFSETWATCH_EXPORT_DIR": str(self.export_dir),
            "OFFSETWATCH_POLL_INTERVAL": str(poll_interval_s),
            "OFFSETWATCH_IO_TIMEOUT": "2",
            "OFFSETWATCH_LOG_FORMAT": "plain",
        }
        if stack is not None:
            self.env.update({"OFFSETWATCH_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
                             "OFFSETWATCH_ZOOKEEPER_HOSTS": stack.zookeeper_hosts,
                             "OFFSETWATCH_HBASE_URL": f"hbase://{stack.hbase_host}:{stack.hbase_port}/stream_kafka_offsets"})
        self.env.update(env or {})
        self.web_workers, self.worker_concurrency = web_workers, worker_concurrency
        self.procs: dict[str, Proc] = {}
        self.started: list[str] = []

    # --- the processes --------------------------------------------------------------------------
    def _pg_user(self) -> str | None:
        """initdb and postgres refuse to run as root: as root, they run as the postgres account."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise DeploymentError("running as root needs a 'postgres' account for the private cluster") from None
        return "postgres"

    def _describe(self) -> dict[str, Proc]:
        celery = str(BIN / "celery")
        return {
            "postgres": Proc("postgres", [
                _postgres_bin("postgres"), "-D", str(self.pg_dir), "-p", str(self.pg_port), "-k", str(self.pg_dir),
                "-c", f"listen_addresses={LOOPBACK}", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=100"],
                self.env, self.log_dir / "postgres.log", self._pg_ready, user=self._pg_user()),
            "redis": Proc("redis", [
                shutil.which("redis-server") or "redis-server", "--port", str(self.redis_port), "--bind", LOOPBACK,
                "--save", "", "--appendonly", "no", "--dir", str(self.run_dir)],
                self.env, self.log_dir / "redis.log", lambda: port_is_open(self.redis_port)),
            "web": Proc("web", [
                str(BIN / "gunicorn"), "offsetwatch.wsgi", f"--bind={LOOPBACK}:{self.web_port}",
                f"--workers={self.web_workers}", "--timeout=120", "--access-logfile=-",
                f"--forwarded-allow-ips={LOOPBACK}"],
                self.env, self.log_dir / "web.log", self._web_answers),
            "worker": Proc("worker", [
                celery, "-A", "offsetwatch.celery", "worker", "--loglevel=INFO", "-Q", "collect,default",
                "-c", str(self.worker_concurrency), "-n", f"worker@{self.web_port}"],
                self.env, self.log_dir / "worker.log", lambda: "ready." in self._log_text("worker", since_start=True),
                ready_timeout_s=45),
            "beat": Proc("beat", [
                celery, "-A", "offsetwatch.celery", "beat", "--loglevel=INFO",
                f"--schedule={self.run_dir / 'celerybeat-schedule'}"],
                self.env, self.log_dir / "beat.log", lambda: "beat: Starting" in self._log_text("beat", since_start=True)),
        }

    def _web_answers(self) -> bool:
        """Ready when a request is answered, not when the port opens: gunicorn's master listens
        before its workers have imported Django (seconds), and requests wait for them meanwhile."""
        if not port_is_open(self.web_port):
            return False
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.web_port}/healthz", timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True  # answered (503 while PostgreSQL is away): the web itself is up
        except (urllib.error.URLError, OSError):
            return False

    def _pg_ready(self) -> bool:
        result = subprocess.run([_postgres_bin("pg_isready"), "-h", LOOPBACK, "-p", str(self.pg_port), "-U", "postgres",
                                 "-d", "postgres", "-q"],
                                check=False, capture_output=True)
        return result.returncode == 0

    def _log_text(self, name: str, since_start: bool = False) -> str:
        try:
            with open(self.log_dir / f"{name}.log", "rb") as log:
                if since_start:
                    log.seek(self.procs[name].start_offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, processes: tuple[str, ...] = PROCESSES, progress: Callable[[str], None] = lambda line: None) -> None:
        """PostgreSQL (initdb), Redis, then migrate while web and the worker boot (neither touches
        the database to start), then beat once the schema is there, as compose orders them.
        Stops whatever it started if one fails."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.export_dir.mkdir(parents=True, exist_ok=True)
        self.procs = self._describe()
        t0 = time.monotonic()
        try:
            if "postgres" in processes:
                self._initdb()
                progress(f"postgres (initdb) ready at {time.monotonic() - t0:.1f} s")
            if "redis" in processes:
                self.start_process("redis")
                progress(f"redis ready at {time.monotonic() - t0:.1f} s")
            booting = [name for name in ("web", "worker") if name in processes]
            for name in booting:
                self.launch(name)
            if "postgres" in processes:
                self.manage("migrate", "--noinput")
                progress(f"migrated at {time.monotonic() - t0:.1f} s")
            for name in booting:
                self.wait_ready(name)
                progress(f"{name} ready at {time.monotonic() - t0:.1f} s")
            if "beat" in processes:
                self.start_process("beat")
                progress(f"beat ready at {time.monotonic() - t0:.1f} s")
        except BaseException:
            self.stop()
            raise

    def _initdb(self) -> None:
        self.pg_dir.mkdir(parents=True, exist_ok=True)
        user = self._pg_user()
        if user:
            shutil.chown(self.pg_dir.parent, user)
            shutil.chown(self.pg_dir, user)
            self.pg_dir.chmod(0o700)
        result = subprocess.run([_postgres_bin("initdb"), "-D", str(self.pg_dir), "-A", "trust", "-U", "postgres",
                                 "-E", "UTF8", "--no-sync", "--no-instructions"],
                                user=user, capture_output=True, text=True, check=False, cwd="/")
        if result.returncode:
            raise DeploymentError(f"initdb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        self.start_process("postgres")
        subprocess.run([_postgres_bin("createdb"), "-h", LOOPBACK, "-p", str(self.pg_port), "-U", "postgres",
                        "offsetwatch"], check=True, capture_output=True)

    def start_process(self, name: str) -> None:
        """Start one process (again) and wait until it is ready."""
        self.launch(name)
        self.wait_ready(name)

    def launch(self, name: str) -> None:
        """Start one process without waiting for it (see wait_ready)."""
        proc = self.procs[name]
        if proc.pid is not None:
            raise DeploymentError(f"{name} is already running (pid {proc.pid})")
        with open(proc.log, "ab") as log:
            log.write(f"\n--- start {time.strftime('%H:%M:%S')} ---\n".encode())
            log.flush()
            proc.start_offset = log.tell()
            proc.popen = subprocess.Popen(proc.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=proc.env, cwd=str(ROOT) if proc.user is None else "/",
                                          start_new_session=True, user=proc.user)
        if name not in self.started:
            self.started.append(name)

    def wait_ready(self, name: str) -> None:
        proc = self.procs[name]
        if not wait_for(lambda: proc.popen.poll() is not None or proc.is_ready(), proc.ready_timeout_s):
            raise DeploymentError(f"{name} not ready after {proc.ready_timeout_s:.0f} s\n{self.logs([name])}")
        if proc.popen.poll() is not None:
            raise DeploymentError(f"{name} exited with {proc.popen.returncode} while starting\n{self.logs([name])}")

    def pid(self, name: str) -> int:
        pid = self.procs[name].pid
        if pid is None:
            raise DeploymentError(f"{name} is not running")
        return pid

    def signal(self, name: str, sig: int) -> None:
        """Send `sig` to the process, its group and every descendant (gunicorn's and Celery's
        workers share its group; PostgreSQL's backends each start a session of their own)."""
        pid = self.pid(name)
        for target in [pid, *_descendants(pid)]:
            try:
                os.kill(target, sig)
            except ProcessLookupError:
                pass
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass

    def freeze(self, name: str) -> None:
        self.signal(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self.signal(name, signal.SIGCONT)

    def kill(self, name: str) -> None:
        """SIGKILL the whole group (a crash: no shutdown work, nothing flushed), then reap it."""
        proc = self.procs[name]
        pid = self.pid(name)
        children = _descendants(pid)
        self.signal(name, signal.SIGKILL)
        for target in [pid, *children]:  # a frozen process dies only once it runs again
            try:
                os.kill(target, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.popen.wait(10)
        wait_for(lambda: not _group_alive(pid) and not any(_exists(c) for c in children), 10)

    def stop_process(self, name: str, timeout_s: float = 20.0) -> None:
        """The graceful stop its supervisor would do (SIGINT: PostgreSQL's fast shutdown; SIGTERM
        for the others: gunicorn's and Celery's warm shutdown); SIGKILL after timeout_s."""
        proc = self.procs[name]
        if proc.pid is None:
            return
        pid = proc.pid
        try:
            self.signal(name, signal.SIGCONT)  # a frozen process cannot stop
            os.kill(pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
            proc.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.popen.wait(10)
        wait_for(lambda: not _group_alive(pid), 10)

    def restart(self, name: str) -> None:
        if self.procs[name].pid is not None:
            self.stop_process(name)
        self.start_process(name)

    def stop(self) -> None:
        for name in reversed(self.started):
            try:
                self.stop_process(name, timeout_s=10)
            except Exception:  # stopping the others matters more
                pass
        self.started.clear()
        shutil.rmtree(self.pg_dir.parent, ignore_errors=True)

    # --- commands and requests ------------------------------------------------------------------
    def manage(self, *args: str, input: str | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
        """`python manage.py ARGS` with the app's environment; DeploymentError when it fails."""
        result = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=self.env, cwd=str(ROOT),
                                input=input, capture_output=True, text=True, timeout=timeout_s, check=False)
        if result.returncode:
            raise DeploymentError(f"manage.py {' '.join(args)} failed ({result.returncode}):\n"
                                  f"{result.stdout}\n{result.stderr}")
        return result

    def shell(self, code: str) -> str:
        """Run Python in `manage.py shell -c` (Django set up, the app's environment); its stdout."""
        return self.manage("shell", "-c", code).stdout

    def shell_json(self, code: str):
        """Run code that leaves its answer in `result`; the answer, through JSON."""
        out = self.shell(code + "\nimport json as _j\nprint('@@' + _j.dumps(result, default=str))")
        return json.loads(out.rsplit("@@", 1)[1])

    def create_user(self, username: str, *roles: str, password: str) -> None:
        self.manage("create_user", username, *[a for r in roles for a in ("--role", r)], "--password-stdin",
                    input=password + "\n")

    def session(self, username: str | None = None, password: str | None = None) -> HttpSession:
        """An HTTP session with the web process, logged in when a username is given."""
        http = HttpSession(self.base_url)
        if username:
            http.login(username, password or "")
        return http

    def logs(self, names: list[str] | None = None, lines: int = 40) -> str:
        """The last `lines` of each process's log, for a failure message."""
        parts = []
        for name in names or list(self.procs):
            text = self._log_text(name).splitlines()[-lines:]
            parts.append(f"--- {name} ({self.log_dir / (name + '.log')}) ---\n" + "\n".join(text))
        return "\n".join(parts)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc), children first."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(0), [])
        found.extend(children)
        todo.extend(children)
    return found


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
