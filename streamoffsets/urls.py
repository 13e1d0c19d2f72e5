"""Store and cluster URLs: masking their secrets for display, and checking them by kind.

Pure (no Django): the job library and the dashboard both use it.

Masking. A store URL may carry credentials (`zk://user:password@host/chroot`, a token as the
user part, `?sasl_password=...`). Only the admin shows a URL whole; everything else (labels,
pages, API answers, metrics, logs, stored error texts) shows `mask_url(url)`, and free text that
may quote a URL (an exception message) goes through `mask_secrets(text, urls)`.

Validation. `validate_store_url(url, file_roots)` says what is wrong with a URL an operator
typed: unknown scheme, no host, a port outside 1..65535, a local path outside the configured
roots (`file://` and `checkpoint://` read and write the dashboard host's own disk), an HBase
table name HBase would refuse.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"

# Query parameter names whose values are secrets, matched after lower-casing with "." and "-"
# read as "_" (sasl.password, ssl-key-password, apiKey). Any sasl_* is masked whole: mechanism
# and user name are harmless but the family is where the password lives.
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|key|sasl|credential|auth|signature|session|cookie")

# The user part of an authority: after "scheme://" (or at the start of a bare "user:pw@host"
# bootstrap list, or after a comma in one), up to the last "@" before the path. Greedy, as
# urlsplit does (a password holding an unescaped "@" is still masked whole).
_USERINFO = re.compile(r"(?P<lead>[A-Za-z][A-Za-z0-9+.-]*://|^|,)(?P<userinfo>[^/?#,]*)@")
# A URL inside free text: scheme:// and everything up to a space, quote or parenthesis ("store
# s (zk://...)" keeps its closing parenthesis), without a trailing full stop, comma or colon.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`()]+(?<![.,;:])")
# Credentials in text without a scheme, as a client library may quote a bootstrap list
# ("[user:password@host:9092]"): a name, a colon, a password without spaces, an "@" before a host.
_BARE_USERINFO = re.compile(r"(?<![\w%:/.@-])(?P<user>[\w.%-]+):(?P<password>[^\s@/'\"()\[\]<>]+)@(?=[\w\[])")
# Secrets shorter than this are not searched for alone in free text (masking every "ab" in a
# message would garble it); inside a URL they are masked whatever their length.
MIN_SECRET_CHARS = 4


def _secret_param(name: str) -> bool:
    return bool(_SECRET_PARAM.search(unquote(name).lower().replace(".", "_").replace("-", "_")))


def _masked_userinfo(match: re.Match) -> str:
    userinfo = match.group("userinfo")
    user, sep, _password = userinfo.partition(":")
    shown = f"{user}:{MASK}" if sep and user else MASK
    return f"{match.group('lead')}{shown}@"


def _masked_query(query: str) -> str:
    items = []
    for item in re.split(r"([&;])", query):
        name, sep, _value = item.partition("=")
        items.append(f"{name}={MASK}" if sep and _secret_param(name) else item)
    return "".join(items)


def mask_url(url: str) -> str:
    """`url` with its secrets replaced by ***: the password of the user part (user:***@), a user
    part without a colon (a token: ***@), and the values of query parameters named like secrets
    (password, token, key, sasl_*, ...). Everything else is kept as typed."""
    if not isinstance(url, str) or not url:
        return url
    head, qmark, rest = url.partition("?")
    masked = _USERINFO.sub(_masked_userinfo, head)
    if qmark:
        query, hash_, fragment = rest.partition("#")
        masked += qmark + _masked_query(query) + hash_ + fragment
    return masked


def url_secrets(url: str) -> list[str]:
    """The secret pieces of a URL, raw and percent-decoded: what must not appear alone in text."""
    if not isinstance(url, str) or not url:
        return []
    found: list[str] = []
    for match in _USERINFO.finditer(url.partition("?")[0]):
        user, sep, password = match.group("userinfo").partition(":")
        found.append(password if sep else user)
    query = url.partition("?")[2].partition("#")[0]
    for item in re.split(r"[&;]", query):
        name, sep, value = item.partition("=")
        if sep and _secret_param(name):
            found.append(value)
    secrets = []
    for secret in found:
        for form in (secret, unquote(secret)):
            if len(form) >= MIN_SECRET_CHARS and form not in secrets:
                secrets.append(form)
    return secrets


def mask_secrets(text: str, urls: Iterable[str] = ()) -> str:
    """Free text (an exception message, a stored error) with the secrets of `urls` masked: each
    URL wherever it appears, each of its secrets alone (a client library may quote only the
    password), any other URL-looking piece of the text through mask_url, and a bare
    "user:password@host" (as librdkafka quotes a bootstrap entry)."""
    if not isinstance(text, str) or not text:
        return text
    urls = sorted({u for u in urls if isinstance(u, str) and u}, key=len, reverse=True)
    for url in urls:
        text = text.replace(url, mask_url(url))
    for url in urls:
        for secret in sorted(url_secrets(url), key=len, reverse=True):
            text = text.replace(secret, MASK)
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
    return _BARE_USERINFO.sub(lambda m: f"{m.group('user')}:{MASK}@", text)


def hosts_without_userinfo(servers: str) -> str:
    """A host list ("user:pw@h1:9092,h2:9092") without any user part: what is handed to a client
    library that takes no credentials there (librdkafka would print them in its own log lines;
    Kafka credentials belong in OFFSETWATCH_KAFKA_CLIENT_CONFIGS)."""
    return ",".join(entry.rpartition("@")[2] for entry in servers.split(","))


# --- validation ---------------------------------------------------------------------------------

SCHEMES = ("hbase", "zk", "kafka", "file", "checkpoint")
# Network stores: the port the server usually listens on, used when the URL names none.
DEFAULT_PORTS = {"hbase": 9090, "zk": 2181, "kafka": 9092}
# HBase: [namespace:]qualifier, each of word characters, "-" and "." (not starting with "."), as
# TableName.isLegalTableQualifierName accepts.
_HBASE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# The Thrift server's transport and protocol (streamoffsets.stores.hbase.HBaseOffsetStore.from_url).
_HBASE_OPTIONS = {"transport": ("buffered", "framed"), "protocol": ("binary", "compact")}
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")
# Only ZooKeeper logs in with the URL's user part (digest ACLs); elsewhere it would be ignored.
_NO_CREDENTIALS = {
    "kafka": "set them per cluster in OFFSETWATCH_KAFKA_CLIENT_CONFIGS (security.protocol, sasl.username, "
             "sasl.password)",
    "hbase": "the HBase Thrift client sends none",
}


def file_roots_from_setting(value: str) -> list[str]:
    """OFFSETWATCH_FILE_STORE_ROOTS: absolute paths separated by ":" or ","; ValueError otherwise."""
    roots = [p.strip() for p in re.split(r"[:,]", value or "") if p.strip()]
    for root in roots:
        if not os.path.isabs(root):
            raise ValueError(f"OFFSETWATCH_FILE_STORE_ROOTS: {root!r} is not an absolute path")
    return [os.path.normpath(r) for r in roots]


def _check_hosts(scheme: str, netloc: str) -> None:
    hosts = netloc.rpartition("@")[2]
    if not hosts:
        raise ValueError(f"{scheme}:// names no server: {scheme}://host:port/...")
    for entry in hosts.split(","):
        host, port = entry, None
        if entry.startswith("["):  # [IPv6]:port
            host, _, after = entry.partition("]")
            host += "]"
            port = after[1:] if after.startswith(":") else (None if not after else after)
        elif ":" in entry:
            host, _, port = entry.rpartition(":")
        if not host:
            raise ValueError(f"{scheme}:// server {entry!r} has no host name")
        if not _HOST.fullmatch(host):
            raise ValueError(f"{scheme}:// server {entry!r}: {host!r} is not a host name or address")
        if port is not None:
            if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
                raise ValueError(f"{scheme}:// server {entry!r}: the port must be a number from 1 to 65535")
    if scheme == "hbase" and "," in hosts:
        raise ValueError("hbase:// names one Thrift server (host:port), not a list")


def _check_local_path(scheme: str, parsed, file_roots: Sequence[str]) -> None:
    if parsed.netloc or not parsed.path.startswith("/"):
        raise ValueError(f"{scheme}:// must name an absolute local path: {scheme}:///path/to/dir")
    if not file_roots:
        raise ValueError(f"{scheme}:// stores read and write the dashboard host's disk: they are refused until an "
                         "operator names the directories allowed in OFFSETWATCH_FILE_STORE_ROOTS")
    path = unquote(parsed.path)
    if "\x00" in path:
        raise ValueError(f"{scheme}:// path holds a NUL character")
    # realpath folds ".." and follows the symbolic links that exist now (/srv/offsets/../../etc
    # and a link to /etc are both /etc, checked as such); the roots are resolved the same way.
    path = os.path.realpath(path)
    roots = [os.path.realpath(r) for r in file_roots]
    for root in roots:
        if root != "/" and (path == root or path.startswith(root + "/")):
            return
    raise ValueError(f"{scheme}:// path {path!r} is not under a directory allowed by OFFSETWATCH_FILE_STORE_ROOTS "
                     f"({', '.join(roots)})")


def _check_hbase_table(path: str, query: str) -> None:
    table = unquote(path.strip("/"))
    if table:  # none: the library's default table
        _check_hbase_table_name(table)
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in _HBASE_OPTIONS:
            raise ValueError(f"hbase:// option {name[:40]!r} is unknown: {', '.join(_HBASE_OPTIONS)}")
        if value not in _HBASE_OPTIONS[name]:
            raise ValueError(f"hbase:// {name}={value[:40]!r} is not one of {', '.join(_HBASE_OPTIONS[name])}")


def _check_hbase_table_name(table: str) -> None:
    parts = table.split(":")
    if len(parts) > 2 or not all(_HBASE_PART.fullmatch(p) for p in parts):
        raise ValueError(f"hbase:// table {table[:100]!r} is not a valid HBase table name "
                         "([namespace:]name of letters, digits, '_', '-' and '.')")


def validate_store_url(url: str, file_roots: Sequence[str]) -> None:
    """Raise ValueError naming what is wrong with a store URL, checked by its kind without
    connecting. `file_roots`: the absolute directories file:// and checkpoint:// stores may be
    under (none: such stores are refused). "/" is never a root a store may use."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the URL is empty")
    url = url.strip()
    if any(ord(c) < 0x20 or c == "\x7f" for c in url):
        raise ValueError("the URL holds control characters")
    try:
        parsed = urlsplit(url)
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    scheme = parsed.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"unknown store URL scheme {parsed.scheme + ':' if parsed.scheme else '(none)'}: "
                         f"use one of {', '.join(s + '://' for s in SCHEMES)}")
    if scheme in ("file", "checkpoint"):
        _check_local_path(scheme, parsed, file_roots)
        return
    if "@" in parsed.netloc and scheme in _NO_CREDENTIALS:
        raise ValueError(f"{scheme}:// takes no credentials in the URL: {_NO_CREDENTIALS[scheme]}")
    _check_hosts(scheme, parsed.netloc)
    if scheme == "hbase":
        _check_hbase_table(parsed.path, parsed.query)


def validate_bootstrap_servers(servers: str) -> None:
    """A cluster's bootstrap list: host:port[,host:port...], no scheme, no credentials (librdkafka
    takes them from OFFSETWATCH_KAFKA_CLIENT_CONFIGS, and would print a user part in its logs)."""
    if not isinstance(servers, str) or not servers.strip():
        raise ValueError("the bootstrap list is empty")
    servers = servers.strip()
    if "://" in servers:
        raise ValueError("a bootstrap list is host:port[,host:port], without a scheme")
    if "@" in servers:
        raise ValueError("a bootstrap list takes no credentials: " + _NO_CREDENTIALS["kafka"])
    if any(c.isspace() or ord(c) < 0x20 for c in servers):
        raise ValueError("a bootstrap list holds no spaces or control characters")
    _check_hosts("kafka", servers)
