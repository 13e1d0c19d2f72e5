"""One responder per notification service: it checks the request as the service documents it
and answers the service's documented success, or the service's own error for a malformed one.

Which service a request is for: the host the client asked the proxy for (and, for Teams, the
Microsoft host families a Workflows URL may name). The hosts and paths are those apprise posts
to (apprise/plugins/<service>.py); the payload rules and answers are the services' own docs:
  Slack     https://api.slack.com/messaging/webhooks (200 "ok"; 400 "invalid_payload"/"no_text")
  Teams     Power Automate "When a Teams webhook request is received": a message whose attachments
            are Adaptive Cards; Logic Apps answers 202, and 400 {"error": {"code", "message"}}
  PagerDuty https://developer.pagerduty.com/docs/events-api-v2/trigger-events/ (202; 400 "invalid event")
  Opsgenie  https://docs.opsgenie.com/docs/alert-api (202; 422 with "errors"; 401 without a GenieKey)
  DingTalk  custom robot: HTTP 200 always, {"errcode": 0, "errmsg": "ok"} or a non-zero errcode
  WeCom     group robot: HTTP 200 always, {"errcode": 0, "errmsg": "ok"} or a non-zero errcode
  Feishu/Lark custom bot: 200 {"code": 0, "msg": "success"}; 400 {"code": 9499, "msg": "Bad Request"}
"""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tests.peers.record import Received


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def _json(status: int, doc: object) -> Reply:
    return Reply(status, json.dumps(doc).encode())


def _text(status: int, text: str) -> Reply:
    return Reply(status, text.encode(), "text/plain; charset=utf-8")


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


# --- Slack incoming webhook: POST https://hooks.slack.com/services/T.../B.../X... ---------------

def slack(req: Received) -> Reply:
    if not re.fullmatch(r"/services/[^/]+/[^/]+/[^/]+", req.path):
        return _text(404, "no_service")
    if not isinstance(req.json, dict):
        return slack_reject()
    if not (_nonempty_str(req.json.get("text")) or req.json.get("blocks") or req.json.get("attachments")):
        return _text(400, "no_text")
    return Reply(200, b"ok", "text/html")


def slack_reject() -> Reply:
    return _text(400, "invalid_payload")


# --- Microsoft Teams through a Power Automate / Logic Apps workflow -----------------------------

def teams(req: Received) -> Reply:
    if not re.fullmatch(r"(/powerautomate/automations/direct(/cu/\d+)?)?/workflows/[\w-]+/triggers/manual/paths/invoke/?",
                        req.path):
        return _json(404, {"error": {"code": "WorkflowNotFound", "message": "The workflow was not found."}})
    if not req.query.get("sig"):
        return _json(401, {"error": {"code": "DirectApiAuthorizationRequired",
                                     "message": "The request must be authenticated only by Shared Access scheme."}})
    doc = req.json
    cards = doc.get("attachments") if isinstance(doc, dict) else None
    if doc is None or not isinstance(cards, list) or not cards or not all(
            isinstance(c, dict) and c.get("contentType") == "application/vnd.microsoft.card.adaptive"
            and isinstance(c.get("content"), dict) and c["content"].get("type") == "AdaptiveCard"
            and c["content"].get("body") for c in cards):
        return teams_reject()
    return Reply(202, b"", "text/plain")


def teams_reject() -> Reply:
    return _json(400, {"error": {"code": "InvalidRequestContent",
                                 "message": "The request content is not valid: expected a message with Adaptive "
                                            "Card attachments."}})


# --- PagerDuty Events API v2: POST https://events.pagerduty.com/v2/enqueue ----------------------

_PD_SEVERITIES = ("critical", "error", "warning", "info")


def pagerduty(req: Received) -> Reply:
    if req.path != "/v2/enqueue":
        return _json(404, {"status": "not found"})
    doc = req.json if isinstance(req.json, dict) else {}
    errors = []
    if not _nonempty_str(doc.get("routing_key")):
        errors.append("'routing_key' is missing or blank")
    action = doc.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errors.append("'event_action' is invalid (must be one of: trigger, acknowledge, resolve)")
    if action == "trigger":
        payload = doc.get("payload") if isinstance(doc.get("payload"), dict) else {}
        if not _nonempty_str(payload.get("summary")) or len(payload["summary"]) > 1024:
            errors.append("'payload.summary' is missing, blank or longer than 1024 characters")
        if payload.get("severity") not in _PD_SEVERITIES:
            errors.append("'payload.severity' is invalid (must be one of: critical, error, warning, info)")
        if not _nonempty_str(payload.get("source")):
            errors.append("'payload.source' is missing or blank")
    elif action in ("acknowledge", "resolve") and not _nonempty_str(doc.get("dedup_key")):
        errors.append("'dedup_key' is required to acknowledge or resolve")
    if errors:
        return pagerduty_reject(errors)
    return _json(202, {"status": "success", "message": "Event processed",
                       "dedup_key": doc.get("dedup_key") or uuid.uuid4().hex})


def pagerduty_reject(errors: list[str] | None = None) -> Reply:
    return _json(400, {"status": "invalid event", "message": "Event object is invalid",
                       "errors": errors or ["Event object is invalid"]})


# --- Opsgenie Alert API: POST https://api.opsgenie.com/v2/alerts --------------------------------

def opsgenie(req: Received) -> Reply:
    if req.path != "/v2/alerts":
        return _json(404, {"message": "Not found", "took": 0.0, "requestId": str(uuid.uuid4())})
    if not re.fullmatch(r"GenieKey \S+", req.headers.get("authorization", "")):
        return _json(401, {"message": "Could not authenticate", "took": 0.0, "requestId": str(uuid.uuid4())})
    doc = req.json if isinstance(req.json, dict) else {}
    message = doc.get("message")
    if not _nonempty_str(message):
        return opsgenie_reject("Message can not be empty.")
    if len(message) > 130:
        return opsgenie_reject("Message can not be longer than 130 characters.")
    return _json(202, {"result": "Request will be processed", "took": 0.011, "requestId": str(uuid.uuid4())})


def opsgenie_reject(why: str = "Request body is not processable.") -> Reply:
    return _json(422, {"message": "Request body is not processable. Please check the errors.",
                       "errors": {"message": why}, "took": 0.0, "requestId": str(uuid.uuid4())})


# --- DingTalk custom robot: POST https://oapi.dingtalk.com/robot/send?access_token=... ----------

def dingtalk(req: Received) -> Reply:
    if req.path != "/robot/send" or not req.query.get("access_token"):
        return _json(200, {"errcode": 300001, "errmsg": "token is not exist"})
    doc = req.json if isinstance(req.json, dict) else {}
    kind = doc.get("msgtype")
    ok = (kind == "text" and _nonempty_str((doc.get("text") or {}).get("content"))) or (
        kind == "markdown" and _nonempty_str((doc.get("markdown") or {}).get("title"))
        and _nonempty_str((doc.get("markdown") or {}).get("text")))
    return _json(200, {"errcode": 0, "errmsg": "ok"}) if ok else dingtalk_reject()


def dingtalk_reject() -> Reply:
    # DingTalk answers HTTP 200 and says what is wrong in errcode: 40035 "missing parameter".
    return _json(200, {"errcode": 40035, "errmsg": "缺少参数 json"})


# --- WeCom group robot: POST https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=... ------------

def wecom(req: Received) -> Reply:
    if req.path != "/cgi-bin/webhook/send" or not req.query.get("key"):
        return _json(200, {"errcode": 93000, "errmsg": "invalid webhook url"})
    doc = req.json if isinstance(req.json, dict) else {}
    kind = doc.get("msgtype")
    if kind not in ("text", "markdown") or not _nonempty_str((doc.get(kind) or {}).get("content")):
        return wecom_reject()
    return _json(200, {"errcode": 0, "errmsg": "ok"})


def wecom_reject() -> Reply:
    return _json(200, {"errcode": 40008, "errmsg": "invalid message type"})


# --- Feishu (open.feishu.cn) and Lark (open.larksuite.com) custom bot ---------------------------

def feishu(req: Received) -> Reply:
    if not re.fullmatch(r"/open-apis/bot/v2/hook/[^/]+/?", req.path):
        return _json(404, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"})
    doc = req.json if isinstance(req.json, dict) else {}
    kind, content = doc.get("msg_type"), doc.get("content")
    if kind == "interactive":
        ok = isinstance(doc.get("card"), dict)
    else:
        ok = kind in ("text", "post") and isinstance(content, dict) and (
            _nonempty_str(content.get("text")) if kind == "text" else isinstance(content.get("post"), dict))
    return _json(200, {"code": 0, "msg": "success", "data": {}}) if ok else feishu_reject()


def feishu_reject() -> Reply:
    return _json(400, {"code": 9499, "msg": "Bad Request", "data": {}})


# --- a generic JSON webhook (apprise's json://): any JSON object with a message ------------------

def webhook(req: Received) -> Reply:
    if not isinstance(req.json, dict) or "message" not in req.json:
        return webhook_reject()
    return _json(200, {"ok": True})


def webhook_reject() -> Reply:
    return _json(400, {"error": "expected a JSON object with a message"})


@dataclass(frozen=True)
class Service:
    name: str
    respond: Callable[[Received], Reply]
    reject: Callable[[], Reply]  # its answer to a malformed request (the 400 fault)


SERVICES = {s.name: s for s in (
    Service("slack", slack, slack_reject), Service("msteams", teams, teams_reject),
    Service("pagerduty", pagerduty, pagerduty_reject), Service("opsgenie", opsgenie, opsgenie_reject),
    Service("dingtalk", dingtalk, dingtalk_reject), Service("wecom", wecom, wecom_reject),
    Service("feishu", feishu, feishu_reject), Service("webhook", webhook, webhook_reject),
)}

_HOSTS = {
    "hooks.slack.com": "slack", "events.pagerduty.com": "pagerduty", "events.eu.pagerduty.com": "pagerduty",
    "api.opsgenie.com": "opsgenie", "api.eu.opsgenie.com": "opsgenie", "oapi.dingtalk.com": "dingtalk",
    "qyapi.weixin.qq.com": "wecom", "open.feishu.cn": "feishu", "open.larksuite.com": "feishu",
}
# Workflows URLs name a Logic Apps or Power Platform host of some Microsoft cloud.
_TEAMS_HOST = re.compile(r".+\.(logic\.azure\.[a-z]{2,12}|(power|apps)platform(\.[a-z0-9-]+){1,3})", re.I)


def service_for_host(host: str) -> str | None:
    if host in _HOSTS:
        return _HOSTS[host]
    return "msteams" if _TEAMS_HOST.fullmatch(host) else None


def fault_reply(service: str, status: int, req: Received) -> Reply:
    """A planned fault's answer, with exactly that HTTP status: for 400 the body of the service's
    own malformed-request error (sent with status 400 even by DingTalk and WeCom, which answer
    their errors with 200); else a text that quotes the request's path, query and Authorization
    header, as some services' error pages do, so the tests see the sender mask what it repeats
    (429 with a Retry-After, as the services send)."""
    if status == 400:
        reject = SERVICES[service].reject()
        return Reply(400, reject.body, reject.content_type)
    query = "&".join(f"{k}={v}" for k, v in req.query.items())
    text = f"planned fault {status} on {req.path}?{query} ({req.headers.get('authorization', '')})"
    headers = (("Retry-After", "1"),) if status == 429 else ()
    return Reply(status, text.encode(), "text/plain", headers)
