"""The small subset of HBase's filter language the stand-in understands, and what it does.

`TScan.filterString` carries HBase's filter language (ParseFilter). Our code only sends
`FirstKeyOnlyFilter() AND KeyOnlyFilter()` (the keys-only scan of streamoffsets.hbase) and the
contract test also `PrefixFilter('...')`; so only `KeyOnlyFilter`, `FirstKeyOnlyFilter` and
`PrefixFilter`, alone or joined with `AND`, are parsed. Anything else raises UnsupportedFilter,
which the handler turns into an IOError naming the filter instead of silently ignoring it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from devstack.hbase.idl import Cell


class UnsupportedFilter(Exception):
    pass


@dataclass
class Filters:
    key_only: bool = False
    key_only_len_as_value: bool = False
    first_key_only: bool = False
    prefixes: list[bytes] = field(default_factory=list)

    def row_key_passes(self, key: bytes) -> bool:
        return all(key.startswith(p) for p in self.prefixes)

    def apply(self, cells: list[Cell]) -> list[Cell]:
        if self.first_key_only:
            cells = cells[:1]
        if self.key_only:
            # KeyOnlyFilter(true) replaces the value by its length as a 4-byte int.
            cells = [
                (f, q, ts, struct.pack(">i", len(v)) if self.key_only_len_as_value else b"")
                for f, q, ts, v in cells
            ]
        return cells


def _tokenize(text: bytes) -> list[tuple[str, bytes]]:
    tokens: list[tuple[str, bytes]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i:i + 1]
        if c.isspace():
            i += 1
        elif c in (b"(", b")", b","):
            tokens.append((c.decode(), c))
            i += 1
        elif c == b"'":
            # Quoted byte string; '' inside it is an escaped quote (HBase ParseFilter rules).
            j, out = i + 1, bytearray()
            while True:
                if j >= n:
                    raise ValueError("unterminated quoted string")
                if text[j:j + 1] == b"'":
                    if text[j + 1:j + 2] == b"'":
                        out += b"'"
                        j += 2
                        continue
                    break
                out += text[j:j + 1]
                j += 1
            tokens.append(("str", bytes(out)))
            i = j + 1
        else:
            j = i
            while j < n and not text[j:j + 1].isspace() and text[j:j + 1] not in (b"(", b")", b",", b"'"):
                j += 1
            tokens.append(("word", text[i:j]))
            i = j
    return tokens


def parse_filter_string(text: bytes) -> Filters:
    """Parse `F(args) [AND F(args)]...` for the supported filters; raise UnsupportedFilter otherwise."""
    try:
        tokens = _tokenize(text)
    except ValueError as exc:
        raise UnsupportedFilter(str(exc)) from exc
    filters = Filters()
    pos = 0

    def expect(kind: str) -> bytes:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos][0] != kind:
            raise UnsupportedFilter(f"expected {kind!r} at token {pos}")
        pos += 1
        return tokens[pos - 1][1]

    while True:
        name = expect("word")
        expect("(")
        args: list[tuple[str, bytes]] = []
        while pos < len(tokens) and tokens[pos][0] != ")":
            if tokens[pos][0] == ",":
                pos += 1
                continue
            args.append(tokens[pos])
            pos += 1
        expect(")")
        if name == b"KeyOnlyFilter" and not args:
            filters.key_only = True
        elif name == b"KeyOnlyFilter" and len(args) == 1 and args[0] in (("word", b"true"), ("word", b"false")):
            filters.key_only = True
            filters.key_only_len_as_value = args[0][1] == b"true"
        elif name == b"FirstKeyOnlyFilter" and not args:
            filters.first_key_only = True
        elif name == b"PrefixFilter" and len(args) == 1 and args[0][0] == "str":
            filters.prefixes.append(args[0][1])
        else:
            raise UnsupportedFilter(name.decode("utf-8", "replace"))
        if pos == len(tokens):
            return filters
        # Only conjunctions (FilterList MUST_PASS_ALL); OR / SKIP / WHILE / grouping are not here.
        if tokens[pos] != ("word", b"AND"):
            raise UnsupportedFilter(tokens[pos][1].decode("utf-8", "replace"))
        pos += 1
