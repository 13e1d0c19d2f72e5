"""python manage.py demo: the whole product live on this machine, until Ctrl-C.

Starts the local stack, the dashboard, the Celery collectors (worker + beat), a producer and
the reference PySpark job writing offsets to HBase, showing each component's progress.
Ctrl-C (or SIGTERM) stops everything this command started, the job gracefully.
"""
from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from dashboard.management.commands.stack import configured_stack
from dashboard.models import SourceHealth
from dashboard.monitoring.services import cluster_get_or_create, store_get_or_create
from devstack.components import Component, StackError
from streamoffsets.stores.hbase import HBaseOffsetStore

DEMO_TOPIC = "demo-events"
DEMO_GROUP = "demo-job"


class Command(BaseCommand):
    help = "Run the live demo: local stack, dashboard, collectors, producer and the PySpark job."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("OFFSETWATCH_WEB_PORT", 8000)))
        parser.add_argument("--rate", type=float, default=20.0, help="producer records per second")
        parser.add_argument("--partitions", type=int, default=3)

    def handle(self, *args, port: int, rate: float, partitions: int, **options):
        t_start = time.monotonic()
        stop = threading.Event()
        # Handled explicitly: a shell that starts us in the background leaves SIGINT ignored.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stack = configured_stack()
        started: list[str] = []
        say = lambda line: self.stdout.write(line)
        try:
            say(f"Offset Watch demo (run directory {stack.run_dir}; logs in {stack.log_dir})")
            stack.log_dir.mkdir(parents=True, exist_ok=True)
            stack.pid_dir.mkdir(parents=True, exist_ok=True)
            self._fresh_embedded_database(say)
            self._check_database()  # before starting anything: a wrong DATABASE_URL fails at once
            say("[1/4] local stack")
            for comp in stack.components():
                if stack.start_component(comp, progress=say):
                    started.append(comp.name)

            say("[2/4] database and demo data")
            call_command("migrate", interactive=False, verbosity=0)
            username, password = self._demo_user()
            cluster = cluster_get_or_create(name="local", bootstrap_servers=settings.KAFKA_BOOTSTRAP)
            store_get_or_create(name="local-hbase", kind="hbase", url=settings.HBASE_URL, cluster=cluster)
            with HBaseOffsetStore.from_url(settings.HBASE_URL) as store:
                store.ensure_table()
            say(f"  database   migrated ({settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]})")

            say("[3/4] dashboard, collectors, producer")
            for comp in self._app_components(port, rate, partitions):
                if stack.start_component(comp, progress=say):
                    started.append(comp.name)

            say("[4/4] PySpark job (first batch takes ~15-30 s: JVM start, then one trigger)")
            job = self._job_component()
            if stack.start_component(job, progress=say):
                started.append(job.name)

            say("")
            say(f"Ready in {time.monotonic() - t_start:.0f} s. Open http://127.0.0.1:{port}/")
            say(f"  log in as {username} / {password}")
            say("  Ctrl-C stops everything this command started.")
            while not stop.is_set():
                for name in started:
                    if stack.running_pid(name) is None:
                        raise CommandError(f"{name} exited unexpectedly; see {stack.log_file(name)}")
                stop.wait(2)
        except StackError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            say("\nStopping ...")
            for name in reversed(started):
                # The job finishes its batch in flight and saves its offsets: give it time.
                if stack.stop_component(name, timeout_s=90 if name == "spark-job" else 15):
                    say(f"  {name:<10} stopped")

    def _fresh_embedded_database(self, say) -> None:
        """The local stack keeps Kafka and HBase in memory only, so yesterday's batches no longer
        exist: start the embedded demo database afresh. A configured DATABASE_URL is never touched."""
        if "DATABASE_URL" in os.environ or "sqlite3" not in settings.DATABASES["default"]["ENGINE"]:
            return
        from django.db import connections

        connections.close_all()
        path = Path(settings.DATABASES["default"]["NAME"])
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        say(f"  database   fresh demo database at {path}")

    def _check_database(self) -> None:
        """Fail with the database's name and the reason, not a traceback, when it cannot be used."""
        from django.db import OperationalError, connection

        db = settings.DATABASES["default"]
        where = db["NAME"] if "sqlite3" in db["ENGINE"] else f"{db['HOST']}:{db['PORT']}/{db['NAME']}"
        try:
            connection.ensure_connection()
        except OperationalError as exc:
            raise CommandError(
                f"cannot use the database {where} (from DATABASE_URL): {exc}. "
                "Unset DATABASE_URL to use the embedded SQLite demo database."
            ) from exc

    def _demo_user(self) -> tuple[str, str]:
        username = "demo"
        password = os.environ.get("OFFSETWATCH_DEMO_PASSWORD") or secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": True})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        return username, password

    def _env(self) -> dict[str, str]:
        return {
            "PYTHONPATH": str(settings.BASE_DIR),
            "DJANGO_SETTINGS_MODULE": "offsetwatch.settings",
            "PYTHONUNBUFFERED": "1",
        }

    def _app_components(self, port: int, rate: float, partitions: int) -> list[Component]:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        boot_time = time.time()

        def web_ready() -> bool:
            # The login page, not /healthz: healthz also judges the collectors (beat ticking, workers
            # working), which start after the web and would hold it "not ready" for ever.
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=1) as resp:
                    return resp.status == 200
            except OSError:
                return False

        def collectors_ready() -> bool:
            # Ready once the worker has recorded a poll of the store since this demo started.
            health = SourceHealth.objects.filter(source__startswith="store:").order_by("-last_attempt_at").first()
            return bool(health and health.last_attempt_at and health.last_attempt_at.timestamp() >= boot_time)

        return [
            Component(
                "web", port,
                [sys.executable, manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
                web_ready, env=self._env(), ready_timeout_s=60,
            ),
            Component(
                "collectors", 0,
                [
                    sys.executable, "-m", "celery", "-A", "offsetwatch.celery", "worker", "--beat",
                    "--loglevel", "INFO", "--concurrency", "2",
                    "--schedule", str(settings.RUN_DIR / "celerybeat-schedule"),
                ],
                collectors_ready, env=self._env(), ready_timeout_s=90,
            ),
            Component(
                "producer", 0,
                [
                    sys.executable, "-m", "reference_job.producer", "--bootstrap", settings.KAFKA_BOOTSTRAP,
                    "--topic", DEMO_TOPIC, "--partitions", str(partitions), "--rate", str(rate),
                ],
                lambda: True, env=self._env(),
            ),
        ]

    def _job_component(self) -> Component:
        boot_ms = int(time.time() * 1000)

        def first_batch_saved() -> bool:
            try:
                with HBaseOffsetStore.from_url(settings.HBASE_URL, timeout_ms=2000) as store:
                    latest = store.load_latest(DEMO_TOPIC, DEMO_GROUP)
                return latest is not None and latest.batch_time_ms >= boot_ms
            except Exception:
                return False

        return Component(
            "spark-job", 0,
            [
                sys.executable, "-m", "reference_job.job", "--bootstrap", settings.KAFKA_BOOTSTRAP,
                "--topic", DEMO_TOPIC, "--group", DEMO_GROUP, "--store", settings.HBASE_URL,
                "--output", str(settings.RUN_DIR / "job-output.sqlite3"),
                "--work-dir", str(settings.RUN_DIR / "spark"), "--trigger-seconds", "5",
            ],
            first_batch_saved, env=self._env(), ready_timeout_s=240,
        )
