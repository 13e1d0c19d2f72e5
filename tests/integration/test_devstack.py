"""The local stack's lifecycle and its errors (a taken port, a missing binary, a crash on start)."""
from __future__ import annotations

import socket
import sys

import pytest
from django.core.management import call_command

from devstack.components import Component, Stack, StackError, StackPorts, free_port


@pytest.fixture
def bare_stack(tmp_path):
    stack = Stack(tmp_path, StackPorts(kafka=free_port(), hbase=free_port(), zookeeper=free_port()), with_redis=False)
    stack.log_dir.mkdir(parents=True)
    stack.pid_dir.mkdir(parents=True)
    return stack


def test_a_taken_port_is_named_in_the_error(bare_stack):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", bare_stack.ports.kafka))
        squatter.listen()
        kafka = next(c for c in bare_stack.components() if c.name == "kafka")
        with pytest.raises(StackError, match=rf"kafka: port 127.0.0.1:{bare_stack.ports.kafka} is taken"):
            bare_stack.start_component(kafka, progress=lambda line: None)


def test_a_missing_binary_is_named_in_the_error(bare_stack):
    comp = Component("ghost", free_port(), ["/nonexistent/bin/ghostd"], lambda: False)
    with pytest.raises(StackError, match="ghost: cannot run /nonexistent/bin/ghostd"):
        bare_stack.start_component(comp, progress=lambda line: None)


def test_a_crash_while_starting_points_at_the_log(bare_stack):
    comp = Component("crasher", free_port(), [sys.executable, "-c", "print('bad config'); raise SystemExit(3)"], lambda: False)
    with pytest.raises(StackError) as err:
        bare_stack.start_component(comp, progress=lambda line: None)
    assert "exited with code 3" in str(err.value) and str(bare_stack.log_file("crasher")) in str(err.value)
    assert "bad config" in bare_stack.log_file("crasher").read_text()


@pytest.mark.server
def test_stack_command_up_status_down(tmp_path, settings, capsys):
    settings.RUN_DIR = tmp_path
    settings.STACK_KAFKA_PORT, settings.STACK_HBASE_PORT, settings.STACK_ZOOKEEPER_PORT = free_port(), free_port(), free_port()
    settings.STACK_REDIS_PORT = int(settings.REDIS_URL.rsplit(":", 1)[1].split("/")[0])  # reuse the running one
    try:
        call_command("stack", "up")
        out = capsys.readouterr().out
        assert "kafka      ready in" in out and "zookeeper  ready in" in out and "redis      reusing" in out
        call_command("stack", "status")
        status = capsys.readouterr().out
        assert status.count("running (pid") == 3
    finally:
        call_command("stack", "down")
    assert "kafka      stopped" in capsys.readouterr().out
    call_command("stack", "status")
    assert capsys.readouterr().out.count(" down") == 3
