"""Store URLs checked by kind before a store is saved (issue #12, observation 8). In the admin:
tests/integration/test_store_urls_admin.py."""
from __future__ import annotations

import pytest

from streamoffsets.urls import file_roots_from_setting, validate_store_url

ROOTS = ["/srv/offsets", "/data/checkpoints"]

# (case, url, what the error says; None: accepted). Numbered so a failure names its rule.
CASES = [
    # Good URLs of every kind.
    (1, "hbase://hbase-thrift:9090/offsets", None),
    (2, "hbase://h:9090/ns:offsets.v2?transport=framed", None),
    (3, "zk://user:S3cretPw@zk1:2181,zk2:2181/kafka", None),
    (4, "kafka://b1:9092,b2:9092", None),
    (5, "file:///srv/offsets", None),
    (6, "file:///srv/offsets/team-a", None),
    (7, "checkpoint:///data/checkpoints/job1", None),
    (8, "hbase://[::1]:9090/t", None),
    (9, "kafka://b1", None),
    # Local paths: only under a configured root, after resolving "..".
    (10, "file:///etc", "not under a directory allowed by OFFSETWATCH_FILE_STORE_ROOTS"),
    (11, "checkpoint:///", "not under a directory allowed"),
    (12, "file:///x/../../etc", "'/etc' is not under"),
    (13, "file:///srv/offsets/../../etc", "'/etc' is not under"),
    (14, "file:///srv/offsets-other", "not under"),  # a sibling sharing the prefix
    (15, "file:///srv/offsets/%2e%2e/%2e%2e/etc", "'/etc' is not under"),  # escaped dots
    (16, "file://relative/dir", "absolute local path"),
    # Unknown schemes, no host, bad ports.
    (17, "mysql://db:3306/x", "unknown store URL scheme mysql:"),
    (18, "hbase.example.com:9090/t", "unknown store URL scheme"),
    (19, "kafka:///", "names no server"),
    (20, "zk://user:pw@/chroot", "names no server"),
    (21, "hbase://h:0/t", "port must be a number from 1 to 65535"),
    (22, "hbase://h:65536/t", "port must be a number from 1 to 65535"),
    (23, "kafka://b1:9092,b2:x", "port must be a number"),
    (24, "kafka://b1:9092,:9093", "has no host name"),
    (25, "zk://h\u202e:2181/c", "not a host name"),
    # HBase table names.
    (26, "hbase://h:9090/", None),  # the library's default table
    (34, "hbase://h:9090/t?transport=fast", "transport='fast' is not one of buffered, framed"),
    (35, "hbase://h:9090/t?password=x", "option 'password' is unknown"),
    # Credentials only where the client logs in with them (ZooKeeper's digest).
    (36, "kafka://svc:pw@b1:9092", "takes no credentials in the URL: set them per cluster in OFFSETWATCH_KAFKA_CLIENT"),
    (37, "hbase://tok@h:9090/t", "takes no credentials"),
    (27, "hbase://h:9090/bad table", "not a valid HBase table name"),
    (28, "hbase://h:9090/a:b:c", "not a valid HBase table name"),
    (29, "hbase://h:9090/.hidden", "not a valid HBase table name"),
    (30, "hbase://h1:9090,h2:9090/t", "one Thrift server"),
    (31, "", "empty"),
    (32, "zk://h:2181/c\n", None),  # stripped, as store_kind_of_url does
    (33, "zk://h:2181/c\x00x", "control characters"),
]


@pytest.mark.parametrize("case,url,message", CASES, ids=[str(c[0]) for c in CASES])
def test_store_url_by_kind(case, url, message):
    if message is None:
        validate_store_url(url, ROOTS)
    else:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("?", r"\?")):
            validate_store_url(url, ROOTS)


def test_local_stores_are_refused_until_roots_are_configured():
    with pytest.raises(ValueError, match="refused until an operator names the directories allowed in OFFSETWATCH_FILE_STORE_ROOTS"):
        validate_store_url("file:///srv/offsets", [])
    with pytest.raises(ValueError, match="OFFSETWATCH_FILE_STORE_ROOTS"):
        validate_store_url("checkpoint:///data/checkpoints/job1", [])


def test_the_root_directory_is_never_a_root():
    with pytest.raises(ValueError, match="not under"):
        validate_store_url("file:///etc", ["/"])


def test_roots_setting():
    assert file_roots_from_setting("/srv/a:/srv/b/, /data//c") == ["/srv/a", "/srv/b", "/data/c"]
    assert file_roots_from_setting("") == []
    with pytest.raises(ValueError, match="'relative' is not an absolute path"):
        file_roots_from_setting("/srv/a:relative")


@pytest.mark.parametrize("servers,message", [
    ("b1:9092,b2:9092", None),
    ("[::1]:9092", None),
    ("", "empty"),
    ("kafka://b1:9092", "without a scheme"),
    ("u:pw@b1:9092", "takes no credentials"),
    ("b1:9092, b2:9092", "no spaces"),
    ("b1:99999", "port must be a number from 1 to 65535"),
])
def test_cluster_bootstrap_lists(servers, message):
    from streamoffsets.urls import validate_bootstrap_servers

    if message is None:
        validate_bootstrap_servers(servers)
    else:
        with pytest.raises(ValueError, match=message):
            validate_bootstrap_servers(servers)


def test_a_symbolic_link_out_of_a_root_is_refused(tmp_path):
    root = tmp_path / "offsets"
    root.mkdir()
    (root / "team-a").mkdir()
    (root / "escape").symlink_to("/etc")
    validate_store_url(f"file://{root}/team-a", [str(root)])
    with pytest.raises(ValueError, match="'/etc' is not under"):
        validate_store_url(f"file://{root}/escape", [str(root)])
