"""The SMTP peer: an aiosmtpd server on 127.0.0.1 (plain SMTP, no TLS, no login) that records
each message, with the same fault switches as the HTTP peers, in SMTP's terms: a planned 5xx or
429 is answered "451 4.3.0" (try again later), any other 4xx "554 5.6.0" (rejected for good),
and a hang holds the DATA reply until the test ends.

A message without a Subject or a text part is refused "550 5.6.0", as a strict relay would.
"""
from __future__ import annotations

import asyncio
import email
import email.policy

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from devstack.components import free_port
from tests.peers.record import HANG, HANG_MAX_S, Mail, Record


class _Handler:
    def __init__(self, record: Record):
        self.record = record

    async def handle_DATA(self, server, session, envelope):
        fault = self.record.next_fault("email")
        if fault == HANG:
            # Hold in a worker thread so the server's event loop keeps serving other clients.
            await asyncio.get_running_loop().run_in_executor(None, self.record.hold)
            return "421 4.4.2 held by the test, closing"
        if fault:
            return "451 4.3.0 planned fault, try again later" if fault >= 500 or fault == 429 else \
                "554 5.6.0 planned fault, message rejected"
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        mail = Mail(mail_from=envelope.mail_from, rcpt_tos=tuple(envelope.rcpt_tos), message=message)
        if not mail.subject or not mail.text.strip():
            return "550 5.6.0 a message needs a Subject and a text part"
        self.record.add(mail)
        return "250 2.0.0 OK: queued"


def _accept_any_login(server, session, envelope, mechanism, auth_data):
    return AuthResult(success=True)


class SmtpServer:
    def __init__(self, record: Record):
        self.port = free_port()
        # Login is offered without TLS (a local relay's setting) so an email URL may carry a
        # password, as a real one does; any user and password are accepted.
        self._controller = Controller(_Handler(record), hostname="127.0.0.1", port=self.port, ready_timeout=HANG_MAX_S,
                                      auth_require_tls=False, authenticator=_accept_any_login)
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()
