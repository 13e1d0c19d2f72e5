"""Serving the stand-in: the thriftpy2 server, starting and stopping it, the process entry point.

`make_server` builds the server for a Handler; `start_in_thread` / `stop_server` run it inside
a test process, `serve_forever` / `main` in its own process (`python -m devstack.hbase`, as
devstack.components starts it). The accept loop is ours rather than thriftpy2's `serve()` so
that a taken port fails instead of being shared, client threads are daemons, and the server
can be stopped cleanly while clients are still connected.
"""
from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading

import thriftpy2.rpc
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

from devstack.hbase.handler import Handler
from devstack.hbase.idl import Hbase_thrift

logger = logging.getLogger(__name__)


def make_server(host: str, port: int, framed: bool = False, compact: bool = False,
                handler: Handler | None = None):
    """The thriftpy2 threaded server for a (new or given) Handler; not listening yet.

    Use `start_in_thread` (in-process) or `serve_forever` (foreground) rather than the server's
    own `serve()`: they bind without SO_REUSEPORT (so a second stand-in on a taken port fails
    instead of silently sharing it), run client threads as daemons and can be stopped.
    """
    handler = handler or Handler(server_name=host.encode(), server_port=port)
    server = thriftpy2.rpc.make_server(
        Hbase_thrift.Hbase,
        handler,
        host=host,
        port=port,
        proto_factory=TCompactProtocolFactory() if compact else TBinaryProtocolFactory(),
        trans_factory=TFramedTransportFactory() if framed else TBufferedTransportFactory(),
        client_timeout=None,  # the default drops connections idle for 3 s; HBase does not
    )
    server.handler = handler
    return server


def _listen(server) -> None:
    trans = server.trans
    family, _, _, _, addr = socket.getaddrinfo(trans.host, trans.port, type=socket.SOCK_STREAM,
                                               flags=socket.AI_PASSIVE)[0]
    trans.sock = socket.create_server(addr, family=family, backlog=trans.backlog, reuse_port=False)


def _accept_loop(server) -> None:
    clients: set = server.__dict__.setdefault("_standin_clients", set())

    def handle(client) -> None:
        try:
            server.handle(client)  # thriftpy2: process calls until the client disconnects
        finally:
            clients.discard(client)

    while not server.closed:
        try:
            client = server.trans.accept()
        except OSError:
            if server.closed:
                return
            logger.exception("accept failed")
            continue
        if server.closed:
            client.close()
            return
        clients.add(client)
        threading.Thread(target=handle, args=(client,), daemon=True, name="hbase-standin-client").start()


def start_in_thread(server) -> threading.Thread:
    """Listen now (so clients can connect as soon as this returns) and serve in a daemon thread."""
    _listen(server)
    thread = threading.Thread(target=_accept_loop, args=(server,), daemon=True, name="hbase-standin")
    thread.start()
    return thread


def stop_server(server, thread: threading.Thread | None = None, timeout: float = 5.0) -> None:
    """Stop accepting, close open client connections and the listening socket."""
    server.close()  # sets `closed`
    host, port = server.trans.sock.getsockname()[:2] if server.trans.sock else (None, None)
    if host is not None:
        try:  # wake the blocking accept()
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            pass
    if thread is not None:
        thread.join(timeout)
    for client in list(server.__dict__.get("_standin_clients", ())):
        try:
            client.close()
        except OSError:
            pass
    server.trans.close()


class _Shutdown(BaseException):
    """Raised from the signal handler; a BaseException so no `except Exception` swallows it."""


def serve_forever(server) -> None:
    """Serve in the foreground until SIGTERM / SIGINT."""

    def on_signal(signum, _frame):
        raise _Shutdown(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _listen(server)
    trans = server.trans
    print(f"HBase Thrift stand-in listening on {trans.host}:{trans.port}", flush=True)
    try:
        _accept_loop(server)
    except _Shutdown:
        logger.info("shutting down")
    finally:
        server.close()
        trans.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.hbase",
        description="In-memory HBase Thrift 1 server stand-in (for dev and tests).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9090)
    parser.add_argument("--framed", action="store_true", help="framed transport (default: buffered)")
    parser.add_argument("--compact", action="store_true", help="compact protocol (default: binary)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = make_server(args.host, args.port, framed=args.framed, compact=args.compact)
    try:
        serve_forever(server)
    except OSError as exc:
        print(f"HBase Thrift stand-in: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
