"""The HTTP side of the peers, each a threaded server on 127.0.0.1:

- `ProxyServer`: the stand-in internet for the HTTPS services. A client told HTTPS_PROXY=
  http://127.0.0.1:<port> asks it `CONNECT hooks.slack.com:443`; the proxy answers 200, ends the
  TLS itself with a certificate for that host signed by the throwaway CA (trusted by the client
  through REQUESTS_CA_BUNDLE), reads the HTTP request inside and answers as that service would
  (tests/peers/services.py). It never connects anywhere: a host with no peer gets 404.
- `WebhookServer`: a plain-HTTP JSON webhook (json://127.0.0.1:<port>/<path>).

Both record every request and obey the fault switches of the shared Record.
"""
from __future__ import annotations

import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

from tests.peers.record import HANG, Received, Record
from tests.peers.services import SERVICES, Reply, fault_reply, service_for_host

# A client that connects and never speaks must not keep a server thread forever.
IDLE_S = 30.0


def _parse_json(body: bytes) -> object:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


class _ServiceHandler(BaseHTTPRequestHandler):
    """Answers requests as a service. `self.server` carries `record`, `host` (the host the client
    connected to: from CONNECT, or None for the plain webhook) and `service` (fixed, or None to
    pick by host)."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_S

    def log_message(self, format, *args):  # quiet: the record is the log
        pass

    def do_POST(self):
        self._serve()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def _serve(self) -> None:
        record: Record = self.server.record
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        host = self.server.host or (self.headers.get("Host") or "").rsplit(":", 1)[0]
        service = self.server.service or service_for_host(host)
        req = Received(service=service or "", host=host, method=self.command, path=parts.path,
                       query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                       headers={k.lower(): v for k, v in self.headers.items()}, body=body,
                       json=_parse_json(body), status=None)
        if service is None:
            reply = Reply(404, f"no peer stands in for {host}".encode(), "text/plain")
        else:
            fault = record.next_fault(service)
            if fault == HANG:
                record.add(req)
                record.hold()
                self.close_connection = True
                return
            reply = fault_reply(service, fault, req) if fault else SERVICES[service].respond(req)
        record.add(Received(**{**req.__dict__, "status": reply.status}))
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_S

    def log_message(self, format, *args):
        pass

    def do_CONNECT(self):
        host, _, port = self.path.rpartition(":")
        if not host or port != "443":
            self.send_error(400, "CONNECT host:443 only")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        try:
            tls = self.server.ca.context_for(host).wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client gave up or refused our certificate
        tunnel = SimpleNamespace(record=self.server.record, host=host, service=None)
        try:
            _ServiceHandler(tls, self.client_address, tunnel)
        except OSError:
            pass  # the client hung up mid-request (a timeout test)
        finally:
            tls.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client hanging up early is expected in the fault tests


def _start(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name=f"peer:{server.server_address[1]}", daemon=True)
    thread.start()
    return thread


class ProxyServer:
    def __init__(self, record: Record, ca):
        self._server = _Server(("127.0.0.1", 0), _ProxyHandler)
        self._server.record, self._server.ca = record, ca
        self.port = self._server.server_address[1]
        _start(self._server)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class WebhookServer:
    def __init__(self, record: Record):
        self._server = _Server(("127.0.0.1", 0), _ServiceHandler)
        self._server.record, self._server.host, self._server.service = record, None, "webhook"
        self.port = self._server.server_address[1]
        _start(self._server)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (for the 'connection refused' tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
