"""dashboard.alerting.channels.send against the local peers (tests/peers/): each kind delivers
the payload its service documents, carrying our title and body; faults are told apart as
transient (retry later) or permanent; a held connection costs about timeout_s; no reason quotes
a secret of the URL. The peers are reached only through the environment (HTTPS_PROXY,
REQUESTS_CA_BUNDLE), as a deployed worker would be.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests  # what apprise sends with, honouring the same environment

from dashboard.alerting.channels import DeliveryError, send
from tests.peers.http import closed_port
from tests.peers.network import SECRETS

pytestmark = pytest.mark.server  # the peers are servers this module starts

TITLE = "orders-pipeline: CRITICAL"
BODY = "Lag 1200 s on orders/0 (was 30 s)\nOpened 2026-05-01 10:00 UTC"
HTTP_KINDS = ("slack", "msteams", "pagerduty", "opsgenie", "dingtalk", "wecom", "feishu", "webhook")
ALL_KINDS = HTTP_KINDS + ("email",)


def _one(peers, kind):
    received = peers.received(kind)
    assert len(received) == 1, received
    return received[0]


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").split("\n")


# --- each service gets its documented payload ---------------------------------------------------

def test_slack_incoming_webhook(peers):
    send(peers.urls["slack"], title=TITLE, body=BODY)
    req = _one(peers, "slack")
    assert (req.host, req.method, req.status) == ("hooks.slack.com", "POST", 200)
    assert req.path == "/services/{}/{}/{}".format(*SECRETS["slack"])
    [attachment] = req.json["attachments"]
    assert (attachment["title"], attachment["text"]) == (TITLE, BODY)


def test_slack_pasted_as_its_https_webhook_url(peers):
    send("https://hooks.slack.com/services/{}/{}/{}".format(*SECRETS["slack"]), title=TITLE, body=BODY)
    req = _one(peers, "slack")
    assert req.status == 200 and req.json["attachments"][0]["text"] == BODY


def test_teams_workflow_gets_an_adaptive_card(peers):
    send(peers.urls["msteams"], title=TITLE, body=BODY)
    req = _one(peers, "msteams")
    assert (req.host, req.status) == ("prod-00.westus.logic.azure.com", 202)
    workflow, signature = SECRETS["msteams"]
    assert req.path == f"/workflows/{workflow}/triggers/manual/paths/invoke"
    assert req.query["sig"] == signature and req.query["sp"] == "/triggers/manual/run"
    assert req.json["type"] == "message"
    [card] = req.json["attachments"]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    texts = [block.get("text") for block in card["content"]["body"]]
    assert TITLE in texts and BODY in texts


def test_teams_power_automate_url_as_pasted(peers):
    url = ("https://default0c3.environment.api.powerplatform.com:443/powerautomate/automations/direct/workflows/"
           "Wf0c3/triggers/manual/paths/invoke?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=Sig0c3Secret")
    send(url, title=TITLE, body=BODY)
    req = _one(peers, "msteams")
    assert req.status == 202
    assert req.path == "/powerautomate/automations/direct/workflows/Wf0c3/triggers/manual/paths/invoke"
    assert req.query["sig"] == "Sig0c3Secret"


def test_pagerduty_events_v2_trigger(peers):
    send(peers.urls["pagerduty"], title=TITLE, body=BODY)
    req = _one(peers, "pagerduty")
    assert (req.host, req.path, req.status) == ("events.pagerduty.com", "/v2/enqueue", 202)
    doc = req.json
    assert doc["routing_key"] == SECRETS["pagerduty"][0]
    assert doc["event_action"] == "trigger"
    assert _lines(doc["payload"]["summary"]) == [TITLE, *_lines(BODY)]
    assert doc["payload"]["severity"] in ("critical", "error", "warning", "info")
    assert doc["payload"]["source"] == "offsetwatch"


def test_opsgenie_opens_an_alert(peers):
    send(peers.urls["opsgenie"], title=TITLE, body=BODY)
    req = _one(peers, "opsgenie")
    assert (req.host, req.path, req.status) == ("api.opsgenie.com", "/v2/alerts", 202)
    assert req.headers["authorization"] == f"GenieKey {SECRETS['opsgenie'][0]}"
    assert (req.json["message"], req.json["description"]) == (TITLE, BODY)


def test_opsgenie_message_is_cut_to_130_characters(peers):
    send(peers.urls["opsgenie"], title="x" * 300, body=BODY)
    req = _one(peers, "opsgenie")
    assert req.status == 202 and len(req.json["message"]) <= 130


def test_dingtalk_robot_text(peers):
    send(peers.urls["dingtalk"], title=TITLE, body=BODY)
    req = _one(peers, "dingtalk")
    assert (req.host, req.path, req.status) == ("oapi.dingtalk.com", "/robot/send", 200)
    assert req.query["access_token"] == SECRETS["dingtalk"][0]
    assert req.json["msgtype"] == "text"
    assert _lines(req.json["text"]["content"]) == [TITLE, *_lines(BODY)]


def test_wecom_group_bot_text(peers):
    send(peers.urls["wecom"], title=TITLE, body=BODY)
    req = _one(peers, "wecom")
    assert (req.host, req.path, req.status) == ("qyapi.weixin.qq.com", "/cgi-bin/webhook/send", 200)
    assert req.query["key"] == SECRETS["wecom"][0]
    assert req.json["msgtype"] == "text"
    assert _lines(req.json["text"]["content"]) == [TITLE, *_lines(BODY)]


@pytest.mark.parametrize("url, host", [
    ("feishu://{}".format(*SECRETS["feishu"]), "open.feishu.cn"),
    ("https://open.larksuite.com/open-apis/bot/v2/hook/{}".format(*SECRETS["feishu"]), "open.larksuite.com"),
])
def test_feishu_and_lark_bot_text(peers, url, host):
    send(url, title=TITLE, body=BODY)
    req = _one(peers, "feishu")
    assert (req.host, req.status) == (host, 200)
    assert req.path.rstrip("/") == "/open-apis/bot/v2/hook/{}".format(*SECRETS["feishu"])
    assert req.json["msg_type"] == "text"
    assert _lines(req.json["content"]["text"]) == [TITLE, *_lines(BODY)]


def test_json_webhook(peers):
    send(peers.urls["webhook"], title=TITLE, body=BODY)
    req = _one(peers, "webhook")
    assert (req.path, req.status) == ("/offsetwatch", 200)
    assert (req.json["title"], req.json["message"]) == (TITLE, BODY)
    assert req.headers["authorization"].startswith("Basic ")


def test_email_through_plain_smtp(peers):
    send(peers.urls["email"], title=TITLE, body=BODY)
    [mail] = peers.mails
    assert mail.rcpt_tos == ("oncall@example.com",)
    assert mail.subject == TITLE
    assert mail.message.get_content_type() == "text/plain"
    assert _lines(mail.text.strip()) == _lines(BODY)


# --- the peers are reached only through the environment ------------------------------------------

def test_without_the_test_ca_the_tls_peer_is_not_trusted(peers, monkeypatch):
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls["slack"], title=TITLE, body=BODY)
    assert caught.value.transient  # a connection error: unknown to us, so retried
    assert peers.received("slack") == []


def test_a_separate_process_reaches_the_peers_by_environment(peers, peer_network):
    code = ("import sys, apprise; ok = apprise.Apprise.instantiate(sys.argv[1]).notify(title='from a worker', "
            "body='hello'); sys.exit(0 if ok else 1)")
    env = {"PATH": "/usr/bin:/bin", **peer_network.env}
    done = subprocess.run([sys.executable, "-c", code, peers.urls["pagerduty"]], env=env, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _one(peers, "pagerduty").json["payload"]["summary"].startswith("from a worker")


# --- faults: transient or permanent, bounded in time, secrets masked -----------------------------

@pytest.mark.parametrize("kind", ALL_KINDS)
def test_503_is_transient_and_the_next_send_delivers(peers, kind):
    peers.fail(kind, 503)
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls[kind], title=TITLE, body=BODY)
    assert caught.value.transient, caught.value.reason
    send(peers.urls[kind], title=TITLE, body=BODY)
    if kind == "email":
        assert [m.subject for m in peers.mails] == [TITLE]
    else:
        assert [r.status for r in peers.received(kind)] == [503, 202 if kind in ("msteams", "pagerduty", "opsgenie")
                                                                   else 200]


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_429_is_transient(peers, kind):
    peers.fail(kind, 429)
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls[kind], title=TITLE, body=BODY)
    assert caught.value.transient and "429" in caught.value.reason


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_400_is_permanent(peers, kind):
    peers.fail(kind, 400)
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls[kind], title=TITLE, body=BODY)
    assert not caught.value.transient, caught.value.reason


@pytest.mark.parametrize("kind", ["slack", "email"])
def test_a_held_connection_fails_transient_within_about_timeout(peers, kind):
    peers.hang(kind)
    started = time.monotonic()
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls[kind], title=TITLE, body=BODY, timeout_s=1.0)
    elapsed = time.monotonic() - started
    assert caught.value.transient
    assert 0.9 <= elapsed < 3.0, elapsed
    assert "timed out" in caught.value.reason


@pytest.mark.parametrize("url", ["json://127.0.0.1:{port}/hook", "mailto://127.0.0.1:{port}?mode=insecure"
                                 "&from=a@example.com&to=b@example.com"])
def test_a_refused_connection_is_transient(peers, url):
    with pytest.raises(DeliveryError) as caught:
        send(url.format(port=closed_port()), title=TITLE, body=BODY, timeout_s=2.0)
    assert caught.value.transient, caught.value.reason


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("fault", [503, 400, "hang"])
def test_no_reason_quotes_a_secret(peers, kind, fault):
    # The 5xx answers quote the request's path, query and Authorization header (tests/peers/services.py).
    peers.hang(kind) if fault == "hang" else peers.fail(kind, fault)
    with pytest.raises(DeliveryError) as caught:
        send(peers.urls[kind], title=TITLE, body=BODY, timeout_s=0.5)
    reason = caught.value.reason
    assert reason.strip()
    for secret in SECRETS[kind]:
        assert secret not in reason, reason
    if kind == "webhook":
        assert "aG9vazpXZWJob29rUGFzc1NlY3JldDBjMw" not in reason  # the Basic header of hook:<password>


def test_an_unreadable_url_is_a_permanent_delivery_error(peers):
    with pytest.raises(DeliveryError) as caught:
        send("slack://T0SLACKA1/B0SLACKB2", title=TITLE, body=BODY)
    assert not caught.value.transient
    assert "T0SLACKA1" not in caught.value.reason and "B0SLACKB2" not in caught.value.reason


def test_a_long_body_is_one_message(peers):
    send(peers.urls["dingtalk"], title=TITLE, body="x" * 50_000)
    assert len(peers.received("dingtalk")) == 1



# --- the peers check what they are sent: a malformed payload gets the service's own error ---------

@pytest.mark.parametrize("url, status, says", [
    ("https://hooks.slack.com/services/T0/B0/X0", 400, b"no_text"),
    ("https://prod-00.westus.logic.azure.com/workflows/w0/triggers/manual/paths/invoke?sig=s0", 400,
     b"InvalidRequestContent"),
    ("https://events.pagerduty.com/v2/enqueue", 400, b"invalid event"),
    ("https://api.opsgenie.com/v2/alerts", 401, b"Could not authenticate"),
    ("https://oapi.dingtalk.com/robot/send?access_token=t0", 200, b'"errcode": 40035'),
    ("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k0", 200, b'"errcode": 40008'),
    ("https://open.feishu.cn/open-apis/bot/v2/hook/t0", 400, b'"code": 9499'),
])
def test_each_peer_refuses_a_malformed_payload(peers, url, status, says):
    answer = requests.post(url, json={"unexpected": True}, timeout=10)
    assert (answer.status_code, says in answer.content) == (status, True), answer.content
    assert peers.received()[-1].status == status
