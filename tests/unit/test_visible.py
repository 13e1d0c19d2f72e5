"""Bidirectional controls and invisible characters in names are shown, not obeyed (issue #12,
observation 9): a group "rtl\u202egnp.exe" must not read "rtlexe.png" anywhere people read it.
On the pages, the SVG and the rewind page: tests/integration/test_visible_pages.py."""
from __future__ import annotations

import pytest

from streamoffsets.visible import visible

RLO = "\u202e"
HOSTILE_GROUP = f"rtl{RLO}gnp.exe"
SHOWN_GROUP = "rtl⟨U+202E⟩gnp.exe"

# (case, name, shown): numbered so a failure names its rule.
CASES = [
    (1, HOSTILE_GROUP, SHOWN_GROUP),
    # 2-5: every bidi control (embeddings, overrides, isolates, marks, the Arabic letter mark).
    (2, "a\u202ab\u202bc\u202cd\u202de", "a⟨U+202A⟩b⟨U+202B⟩c⟨U+202C⟩d⟨U+202D⟩e"),
    (3, "\u2066x\u2067y\u2068z\u2069", "⟨U+2066⟩x⟨U+2067⟩y⟨U+2068⟩z⟨U+2069⟩"),
    (4, "l\u200er\u200f", "l⟨U+200E⟩r⟨U+200F⟩"),
    (5, "ar\u061cb", "ar⟨U+061C⟩b"),
    # 6: zero-width characters make two names look the same.
    (6, "or\u200bders\u200c\u200d\u2060\ufeff", "or⟨U+200B⟩ders⟨U+200C⟩⟨U+200D⟩⟨U+2060⟩⟨U+FEFF⟩"),
    # 7: other control and format characters (a tab, a newline, a soft hyphen, a line separator).
    (7, "a\tb\nc\u00add\u2028e", "a⟨U+0009⟩b⟨U+000A⟩c⟨U+00AD⟩d⟨U+2028⟩e"),
    # 8: ordinary names, spaces and any script are left alone.
    (8, "orders / billing-v2.etl", "orders / billing-v2.etl"),
    (9, "заказы 注文 طلبات", "заказы 注文 طلبات"),
    (10, "", ""),
]


@pytest.mark.parametrize("case,name,shown", CASES, ids=[str(c[0]) for c in CASES])
def test_visible(case, name, shown):
    assert visible(name) == shown


def test_free_text_may_keep_its_line_breaks():
    assert visible("a\nb\u202ec", keep="\n") == "a\nb⟨U+202E⟩c"
    assert visible(None) == ""


def test_notification_texts_show_names_the_payload_keeps_them_raw():
    from dashboard.alerting.rewind_notify import rewind_message

    message = rewind_message(event="requested", rewind_summary={
        "id": 7, "topic": "orders", "group": HOSTILE_GROUP, "store": f"zk{RLO}", "reason": f"why{RLO}\nbecause"})
    assert SHOWN_GROUP in message["title"] and RLO not in message["title"]
    assert SHOWN_GROUP in message["text"] and RLO not in message["text"]
    assert "why⟨U+202E⟩\nbecause" in message["text"]
    assert message["rewind"]["group"] == HOSTILE_GROUP  # machines get the name as it is
