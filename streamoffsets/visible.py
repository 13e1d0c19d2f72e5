"""Names made safe to read: bidirectional controls and invisible characters shown as escapes.

A group named "rtl\u202egnp.exe" reads "rtlexe.png" when shown raw: the right-to-left override
reorders what follows. Pages, chart titles, file names and notification texts show names through
`visible`, which replaces every such character by a visible escape ("rtl⟨U+202E⟩gnp.exe").
Machine outputs (JSON API, CSV cells, Prometheus labels) keep the raw name: a program matching
names must get them exactly, and no text direction is applied to them. Pure, no Django.
"""
from __future__ import annotations

import unicodedata

# Named for the reader; every other format (Cf) or control (Cc) character is escaped as well.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff")
# Line and paragraph separators (Zl, Zp) break a line where none is expected.
_ESCAPED_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp", "Co", "Cn", "Cs"})


def needs_escape(char: str) -> bool:
    return char in BIDI_CONTROLS or char in ZERO_WIDTH or unicodedata.category(char) in _ESCAPED_CATEGORIES


def escape(char: str) -> str:
    return f"⟨U+{ord(char):04X}⟩"


def visible(name, keep: str = "") -> str:
    """`name` with every bidirectional control, zero-width, control and other invisible format
    character replaced by ⟨U+XXXX⟩; anything else unchanged. Not a str: its str(). `keep`: the
    characters left as they are (free text keeps its line breaks: keep="\\n\\t")."""
    text = "" if name is None else str(name)
    if text.isprintable() and not any(c in BIDI_CONTROLS or c in ZERO_WIDTH for c in text):
        return text  # the common case: nothing to escape (isprintable is False for Cc/Cf/Z* but " ")
    return "".join(escape(c) if needs_escape(c) and c not in keep else c for c in text)
