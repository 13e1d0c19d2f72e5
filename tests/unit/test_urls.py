"""mask_url and mask_secrets: a store URL's secrets never survive masking (no database)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamoffsets.urls import mask_secrets, mask_url, url_secrets

# (case, url, masked): numbered so a failure says which rule broke.
CASES = [
    (1, "zk://user:S3cretPw@host:2181/chroot", "zk://user:***@host:2181/chroot"),
    (2, "zk://user:S3cretPw@h1:2181,h2:2181/c", "zk://user:***@h1:2181,h2:2181/c"),
    # 3: a user part without a colon is a token: all of it goes.
    (3, "hbase://tok3nValue@host:9090/t", "hbase://***@host:9090/t"),
    # 4: an empty user with a password.
    (4, "kafka://:S3cretPw@b1:9092", "kafka://***@b1:9092"),
    # 5: secret query parameters, whatever their spelling; harmless ones kept.
    (5, "kafka://b1:9092?sasl_password=Q1w2e3r4&security_protocol=SASL_SSL",
     "kafka://b1:9092?sasl_password=***&security_protocol=SASL_SSL"),
    (6, "kafka://b1:9092?sasl.username=bob&ssl.key.password=pw9999&apiKey=abc123",
     "kafka://b1:9092?sasl.username=***&ssl.key.password=***&apiKey=***"),
    (7, "hbase://h:9090/t?transport=framed&protocol=compact", "hbase://h:9090/t?transport=framed&protocol=compact"),
    (8, "hbase://h:9090/t?token=abcd#frag", "hbase://h:9090/t?token=***#frag"),
    # 9: an unescaped "@" inside the password: masked up to the last "@" of the authority.
    (9, "zk://user:p@ss@host/c", "zk://user:***@host/c"),
    # 10: URLs without secrets, and bare bootstrap lists, come back unchanged.
    (10, "file:///srv/offsets", "file:///srv/offsets"),
    (11, "127.0.0.1:9092,127.0.0.2:9092", "127.0.0.1:9092,127.0.0.2:9092"),
    # 12: a bare bootstrap list with credentials on each entry.
    (12, "u:S3cretPw@b1:9092,u:S3cretPw@b2:9092", "u:***@b1:9092,u:***@b2:9092"),
    (13, "SASL_SSL://u:S3cretPw@b1:9092", "SASL_SSL://u:***@b1:9092"),
    (14, "", ""),
]


@pytest.mark.parametrize("case,url,masked", CASES, ids=[str(c[0]) for c in CASES])
def test_mask_url(case, url, masked):
    assert mask_url(url) == masked


def test_secrets_of_a_url_raw_and_decoded():
    assert url_secrets("zk://user:S3cret%40Pw@host/c?x_token=abcd1234") == ["S3cret%40Pw", "S3cret@Pw", "abcd1234"]
    assert url_secrets("zk://host/c") == []


def test_mask_secrets_in_free_text():
    url = "zk://user:S3cretPw@host:2181/chroot?sasl_password=Q1w2e3r4"
    text = (f"store s ({url}) failed: auth for 'user' with password S3cretPw refused; "
            "also see kafka://other:An0therPw@b:9092 and sasl Q1w2e3r4")
    masked = mask_secrets(text, [url])
    for secret in ("S3cretPw", "Q1w2e3r4", "An0therPw"):
        assert secret not in masked
    assert "zk://user:***@host:2181/chroot?sasl_password=***" in masked
    assert "kafka://other:***@b:9092" in masked


def test_mask_secrets_leaves_text_without_secrets_alone():
    text = "store s (zk://host:2181/c) failed: connection refused; mail alice@example.com"
    assert mask_secrets(text, ["zk://host:2181/c"]) == text
    assert mask_secrets("", ["zk://u:pw@h"]) == ""


_password = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="@/?#, \t\n"),
                    min_size=4, max_size=30).filter(lambda s: ":" not in s)


@given(_password)
def test_no_password_survives_masking(password):
    url = f"zk://user:{password}@host:2181/chroot"
    assert f":{password}@" not in mask_url(url)
    assert password not in mask_secrets(f"failed: {url} said no to {password}", [url])


def test_mask_secrets_keeps_the_text_around_a_url_and_finds_bare_credentials():
    # A label's closing parenthesis survives; a bootstrap entry quoted by librdkafka is masked.
    assert mask_secrets("store s (zk://u:pw@h:1/c?sasl_password=xx) failed.") == (
        "store s (zk://u:***@h:1/c?sasl_password=***) failed.")
    assert mask_secrets("[u:Clu5terPw9@127.0.0.1:9092]/bootstrap: Failed to resolve") == (
        "[u:***@127.0.0.1:9092]/bootstrap: Failed to resolve")
    assert mask_secrets("mail alice@example.com") == "mail alice@example.com"


def test_hosts_without_userinfo():
    from streamoffsets.urls import hosts_without_userinfo

    assert hosts_without_userinfo("u:pw@h1:9092,h2:9092") == "h1:9092,h2:9092"
    assert hosts_without_userinfo("h1:9092") == "h1:9092"
