"""What the peers share: the requests and mails they received (recorded in order), and the fault
switches a test sets before sending (answer 503 / 429 / 400 for the next N requests of one
service, or hold the connection without answering until the test ends).

Services are named as Channel.Kind values (slack, msteams, pagerduty, opsgenie, dingtalk, wecom,
feishu, email, webhook), so a test reads `peers.received("pagerduty")`.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from email.message import EmailMessage

HANG = "hang"
# A held connection is let go when the test ends (reset), or after this long in any case, so a
# forgotten hang cannot keep a server thread forever.
HANG_MAX_S = 60.0


@dataclass(frozen=True)
class Received:
    """One HTTP request a peer received, and the status it answered (None: held, never answered)."""
    service: str
    host: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: bytes
    json: object  # the parsed body, None when it is not JSON
    status: int | None


@dataclass(frozen=True)
class Mail:
    """One message the SMTP peer accepted."""
    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"] or "")

    @property
    def text(self) -> str:
        part = self.message.get_body(("plain", "html"))
        return part.get_content() if part is not None else ""


@dataclass
class Record:
    """The received requests and mails, and the faults planned per service; thread-safe."""
    requests: list[Received] = field(default_factory=list)
    mails: list[Mail] = field(default_factory=list)
    _planned: dict[str, deque] = field(default_factory=dict)
    _release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, item: Received | Mail) -> None:
        with self._lock:
            (self.mails if isinstance(item, Mail) else self.requests).append(item)

    def received(self, service: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if service is None or r.service == service]

    def fail(self, service: str, status: int, times: int = 1) -> None:
        """The next `times` requests to `service` are answered `status` (503, 429, 400 ...)."""
        with self._lock:
            self._planned.setdefault(service, deque()).extend([status] * times)

    def hang(self, service: str, times: int = 1) -> None:
        """The next `times` requests to `service` are read and never answered (until reset)."""
        with self._lock:
            self._planned.setdefault(service, deque()).extend([HANG] * times)

    def next_fault(self, service: str) -> int | str | None:
        with self._lock:
            planned = self._planned.get(service)
            return planned.popleft() if planned else None

    def hold(self) -> None:
        """Block the calling server thread until the test ends."""
        self._release.wait(HANG_MAX_S)

    def reset(self) -> None:
        """Forget everything and let go of every held connection."""
        with self._lock:
            self.requests.clear()
            self.mails.clear()
            self._planned.clear()
            self._release.set()
            self._release = threading.Event()
