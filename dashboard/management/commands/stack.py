"""python manage.py stack up|down|status: the local servers (Tansu, HBase stand-in, ZooKeeper, Redis)."""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from devstack.components import Stack, StackError, StackPorts


def configured_stack() -> Stack:
    return Stack(
        settings.RUN_DIR,
        StackPorts(
            kafka=settings.STACK_KAFKA_PORT,
            hbase=settings.STACK_HBASE_PORT,
            zookeeper=settings.STACK_ZOOKEEPER_PORT,
            redis=settings.STACK_REDIS_PORT,
        ),
    )


class Command(BaseCommand):
    help = "Start, stop or show the local stack (loopback only; PIDs and logs under OFFSETWATCH_RUN_DIR)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["up", "down", "status"])

    def handle(self, *args, action: str, **options):
        stack = configured_stack()
        say = lambda line: self.stdout.write(line)
        try:
            if action == "up":
                say(f"Starting the local stack (run directory {stack.run_dir}):")
                stack.up(progress=say)
                say("Stack is up. Stop it with: python manage.py stack down")
            elif action == "down":
                stack.down(progress=say)
            else:
                for name, port, state in stack.status():
                    say(f"  {name:<10} 127.0.0.1:{port:<6} {state}")
        except StackError as exc:
            raise CommandError(str(exc)) from exc
