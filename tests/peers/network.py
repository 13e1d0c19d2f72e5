"""The peers together: the CA, the HTTPS proxy, the JSON-webhook server and the SMTP server, the
environment a sending process needs to reach them, and one channel URL per kind pointing at them.

The product has no seam for them: a sender is pointed at the peers only by environment
(HTTPS_PROXY and REQUESTS_CA_BUNDLE, which requests honours), and the URLs name the services'
real hosts (hooks.slack.com ...), except the webhook and email peers, which are local by nature.
"""
from __future__ import annotations

from pathlib import Path

from tests.peers.http import ProxyServer, WebhookServer
from tests.peers.record import Mail, Received, Record
from tests.peers.smtp import SmtpServer
from tests.peers.tls import ThrowawayCA

# The secret part of each channel URL below: no delivery error may quote one.
SECRETS = {
    "slack": ("T0SLACKA1", "B0SLACKB2", "SlackSecretToken0c3"),
    "msteams": ("WorkflowSecretId0c3", "WorkflowSigSecret0c3"),
    "pagerduty": ("PdIntegrationKeySecret00000000c3", "PdApiKeySecret0c3"),
    "opsgenie": ("GenieKeySecret-0000-0000-0000-0000000000c3",),
    "dingtalk": ("DingTalkAccessTokenSecret0c3",),
    "wecom": ("WeComBotKeySecret-0c3",),
    "feishu": ("FeishuHookTokenSecret0c3",),
    "webhook": ("WebhookPassSecret0c3",),
    "email": ("SmtpPassSecret0c3",),
}


class PeerNetwork:
    def __init__(self, directory: Path):
        self.record = Record()
        self.ca = ThrowawayCA(directory)
        self.proxy = ProxyServer(self.record, self.ca)
        self.webhook = WebhookServer(self.record)
        self.smtp = SmtpServer(self.record)

    @property
    def env(self) -> dict[str, str]:
        """What a separate sending process (a Celery worker) needs in its environment. Both
        spellings of the proxy variable: a lower-case one inherited from the shell would win."""
        proxy = f"http://127.0.0.1:{self.proxy.port}"
        return {"HTTPS_PROXY": proxy, "https_proxy": proxy, "REQUESTS_CA_BUNDLE": str(self.ca.ca_pem),
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    @property
    def urls(self) -> dict[str, str]:
        """One channel URL per Channel.Kind, each reaching its peer."""
        s = SECRETS
        return {
            "slack": "slack://{}/{}/{}".format(*s["slack"]),
            "msteams": "workflows://prod-00.westus.logic.azure.com:443/{}/{}".format(*s["msteams"]),
            "pagerduty": "pagerduty://{}@{}/offsetwatch".format(*s["pagerduty"]),
            "opsgenie": "opsgenie://{}".format(*s["opsgenie"]),
            "dingtalk": "dingtalk://{}".format(*s["dingtalk"]),
            "wecom": "wecombot://{}".format(*s["wecom"]),
            "feishu": "feishu://{}".format(*s["feishu"]),
            "webhook": "json://hook:{}@127.0.0.1:{}/offsetwatch".format(s["webhook"][0], self.webhook.port),
            "email": f"mailto://oncall:{s['email'][0]}@127.0.0.1:{self.smtp.port}"
                     "?mode=insecure&from=offsetwatch@example.com&to=oncall@example.com",
        }

    def received(self, service: str | None = None) -> list[Received]:
        return self.record.received(service)

    @property
    def mails(self) -> list[Mail]:
        return list(self.record.mails)

    def fail(self, service: str, status: int, times: int = 1) -> None:
        self.record.fail(service, status, times)

    def hang(self, service: str, times: int = 1) -> None:
        self.record.hang(service, times)

    def reset(self) -> None:
        self.record.reset()

    def stop(self) -> None:
        self.record.reset()
        self.proxy.stop()
        self.webhook.stop()
        self.smtp.stop()
