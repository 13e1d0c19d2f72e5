"""A fresh PostgreSQL database for a benchmark, with Django set up on it and migrated; a lone
Tansu broker; both around a benchmark's body."""
from __future__ import annotations

import os
import subprocess


def fresh_django_database(name: str) -> None:
    """Drop and create database `name` on 127.0.0.1:5432, point Django at it, migrate."""
    for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
        subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True, capture_output=True)
    os.environ["DATABASE_URL"] = f"postgres://postgres:postgres@127.0.0.1:5432/{name}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "offsetwatch.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_components(prefix: str, names: tuple[str, ...]):
    """The local stack's components `names` (kafka, hbase, zookeeper) on free loopback ports under a
    new temporary directory, as the local stack starts them. Returns the stack; stop each with
    `stack.stop_component(name)` (stop_components)."""
    import tempfile
    from pathlib import Path

    from devstack.components import Stack, StackPorts, free_port

    ports = {name: free_port() if name in names else 0 for name in ("kafka", "hbase", "zookeeper")}
    stack = Stack(Path(tempfile.mkdtemp(prefix=prefix)), StackPorts(**ports, redis=0), with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    try:
        for comp in stack.components():
            if comp.name in names:
                stack.start_component(comp, progress=lambda line: None)
    except BaseException:
        stop_components(stack, names)
        raise
    return stack


def stop_components(stack, names: tuple[str, ...]) -> None:
    for name in reversed(names):
        stack.stop_component(name)


def start_lone_kafka(prefix: str):
    """A Tansu broker on a free loopback port under a new temporary directory, as the local stack
    starts it. Returns (stack, bootstrap); stop it with `stack.stop_component("kafka")`."""
    from devstack.components import LOOPBACK

    stack = start_components(prefix, ("kafka",))
    return stack, f"{LOOPBACK}:{stack.ports.kafka}"


def drop_database(name: str) -> None:
    """Close this process's connections and drop database `name` (whoever else is connected)."""
    from django.db import connections

    connections.close_all()
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c",
                    f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)


def with_lone_kafka_and_database(prefix: str, database: str, body) -> None:
    """body(bootstrap) with a lone Tansu broker and a fresh migrated database `database`; both
    gone afterwards, whatever body raised."""
    stack, bootstrap = start_lone_kafka(prefix)
    try:
        fresh_django_database(database)
        body(bootstrap)
    finally:
        stack.stop_component("kafka")
        drop_database(database)


def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    """Create the topics, 50 per request (Tansu answers a large CreateTopics slowly)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 50):
        futures = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                                       for t in topics[i:i + 50]])
        for f in futures.values():
            f.result(60)


def celery_workers_start(count: int, log_dir, name: str, env: dict | None = None) -> list[subprocess.Popen]:
    """`count` real `celery worker` processes of one pool process each (the unit of scale), logs
    in `log_dir`; each in a session of its own, so a signal reaches its pool process too."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    procs = []
    for i in range(count):
        log = open(Path(log_dir) / f"worker-{count}-{i}.log", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "offsetwatch.celery", "worker", "--concurrency", "1",
             "--pool", "prefork", "--loglevel", "WARNING", "-n", f"{name}{i}@%h", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            cwd=root, env=env if env is not None else os.environ.copy(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        ))
    return procs


def celery_workers_stop(procs: list[subprocess.Popen], timeout_s: float) -> None:
    """Warm shutdown (the task in flight finishes), killed after `timeout_s`."""
    import signal

    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
