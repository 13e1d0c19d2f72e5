"""Channel URLs without a server: the kind of every form an admin may paste, what is wrong with a
bad or unsupported one (its secrets masked in the message), and `masked` hiding every secret.
Cases are numbered; each says why it is there."""
from __future__ import annotations

import pytest

from dashboard.alerting.channels import channel_kind, masked

# (case, URL, kind, the secrets in it)
FORMS = [
    (1, "slack://T0SLACKA1/B0SLACKB2/SlackSecretToken0c3", "slack", ["T0SLACKA1", "B0SLACKB2", "SlackSecretToken0c3"]),
    (2, "https://hooks.slack.com/services/T0SLACKA1/B0SLACKB2/SlackSecretToken0c3", "slack",  # Slack's own URL
     ["T0SLACKA1", "B0SLACKB2", "SlackSecretToken0c3"]),
    (3, "slack://T0SLACKA1/B0SLACKB2/SlackSecretToken0c3/#oncall", "slack", ["SlackSecretToken0c3"]),  # a channel
    (4, "workflows://prod-00.westus.logic.azure.com:443/WfSecretId0c3/WfSigSecret0c3", "msteams",
     ["WfSecretId0c3", "WfSigSecret0c3"]),
    (5, "https://prod-00.westus.logic.azure.com:443/workflows/WfSecretId0c3/triggers/manual/paths/invoke"  # as pasted
        "?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=WfSigSecret0c3", "msteams",
     ["WfSecretId0c3", "WfSigSecret0c3"]),
    (6, "https://default0c3.environment.api.powerplatform.com:443/powerautomate/automations/direct/workflows/"  # new host
        "WfSecretId0c3/triggers/manual/paths/invoke?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=WfSigSecret0c3",
     "msteams", ["WfSecretId0c3", "WfSigSecret0c3"]),
    (7, "pagerduty://PdIntegrationKeySecret00000000c3@PdApiKeySecret0c3", "pagerduty",
     ["PdIntegrationKeySecret00000000c3", "PdApiKeySecret0c3"]),
    (8, "pagerduty://PdIntegrationKeySecret00000000c3@PdApiKeySecret0c3/offsetwatch?region=eu", "pagerduty",
     ["PdIntegrationKeySecret00000000c3", "PdApiKeySecret0c3"]),
    (9, "opsgenie://GenieKeySecret-0000-c3", "opsgenie", ["GenieKeySecret-0000-c3"]),
    (10, "opsgenie://GenieKeySecret-0000-c3/@oncall-team?region=eu", "opsgenie", ["GenieKeySecret-0000-c3"]),
    (11, "dingtalk://DingTalkAccessTokenSecret0c3", "dingtalk", ["DingTalkAccessTokenSecret0c3"]),
    (12, "dingtalk://DingSignSecret0c3@DingTalkAccessTokenSecret0c3", "dingtalk",  # signed robot
     ["DingSignSecret0c3", "DingTalkAccessTokenSecret0c3"]),
    (13, "wecombot://WeComBotKeySecret-0c3", "wecom", ["WeComBotKeySecret-0c3"]),
    (14, "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=WeComBotKeySecret-0c3", "wecom", ["WeComBotKeySecret-0c3"]),
    (15, "feishu://FeishuHookTokenSecret0c3", "feishu", ["FeishuHookTokenSecret0c3"]),
    (16, "lark://LarkHookTokenSecret0c3", "feishu", ["LarkHookTokenSecret0c3"]),
    (17, "https://open.larksuite.com/open-apis/bot/v2/hook/LarkHookTokenSecret0c3", "feishu", ["LarkHookTokenSecret0c3"]),
    (18, "mailto://oncall:SmtpPassSecret0c3@smtp.example.com?to=oncall@example.com", "email", ["SmtpPassSecret0c3"]),
    (19, "mailtos://oncall:SmtpPassSecret0c3@smtp.example.com:465?to=oncall@example.com", "email", ["SmtpPassSecret0c3"]),
    (20, "mailto://127.0.0.1:2525?mode=insecure&from=ow@example.com&to=oncall@example.com", "email", []),  # no login
    (21, "json://hooks.example.com/offsetwatch", "webhook", []),
    (22, "jsons://hook:WebhookPassSecret0c3@hooks.example.com:8443/offsetwatch", "webhook", ["WebhookPassSecret0c3"]),
    (23, "jsons://hooks.example.com/offsetwatch?+Authorization=Bearer%20HeaderSecret0c3", "webhook", ["HeaderSecret0c3"]),
]


@pytest.mark.parametrize("case, url, kind, secrets", FORMS, ids=[f"{c[0]}-{c[2]}" for c in FORMS])
def test_channel_kind_of_every_form(case, url, kind, secrets):
    assert channel_kind(url) == kind
    assert channel_kind(f"  {url}\n") == kind  # pasted with blanks around


@pytest.mark.parametrize("case, url, kind, secrets", FORMS, ids=[f"{c[0]}-{c[2]}" for c in FORMS])
def test_masked_hides_every_secret(case, url, kind, secrets):
    shown = masked(url)
    assert "***" in shown or not secrets
    for secret in secrets:
        assert secret not in shown, shown
    assert shown.split("://")[0] == url.split("://")[0]  # still recognisable as what was pasted


def test_masked_keeps_what_is_not_secret():
    # 1. the SMTP host, port and the addresses help an admin tell channels apart
    assert masked("mailto://oncall:SmtpPassSecret0c3@smtp.example.com:587?to=oncall@example.com") == \
        "mailto://oncall:***@smtp.example.com:587?to=oncall@example.com"
    # 2. a webhook's host and path are not secret
    assert masked("json://hooks.example.com/offsetwatch") == "json://hooks.example.com/offsetwatch"


# (case, URL, what the message must say, secrets it must not quote)
BAD = [
    (1, "", "empty", []),
    (2, "   ", "empty", []),
    (3, "hooks.slack.com/services/T0SLACKA1/B0SLACKB2/SlackSecretToken0c3", "no scheme",  # scheme forgotten
     ["T0SLACKA1", "SlackSecretToken0c3"]),
    (4, "slack://T0SLACKA1/B0SLACKB2", "Slack", ["T0SLACKA1", "B0SLACKB2"]),  # the third token missing
    (5, "slack://T0SLACKA1/B0SLACKB2/Bad!Token0c3", "Token", ["T0SLACKA1", "Bad!Token0c3"]),  # apprise quotes it
    (6, "pagerduty://PdApiKeySecret0c3", "Routing Key", ["PdApiKeySecret0c3"]),  # the routing key missing
    (7, "opsgenie://", "API Key", []),
    (8, "mailto://", "mail", []),
    (9, "foo://SecretThing0c3@host/x", "foo://", ["SecretThing0c3"]),  # a scheme nobody knows
    (10, "msteams://TeamSecret0c3/TokenBSecret0c3/TokenCSecret0c3", "Workflows",  # apprise 2 dropped msteams://
     ["TeamSecret0c3", "TokenBSecret0c3", "TokenCSecret0c3"]),
    (11, "https://contoso.webhook.office.com/webhookb2/GroupSecret0c3@TenantSecret0c3/IncomingWebhook/IdSecret0c3/"
         "OwnerSecret0c3", "retired", ["GroupSecret0c3", "TenantSecret0c3", "IdSecret0c3"]),  # Office 365 connector
    (12, "https://oapi.dingtalk.com/robot/send?access_token=DingTalkAccessTokenSecret0c3", "dingtalk://",
     ["DingTalkAccessTokenSecret0c3"]),  # DingTalk's own URL: apprise does not read it
    (13, "https://open.feishu.cn/open-apis/bot/v2/hook/FeishuHookTokenSecret0c3", "feishu://",
     ["FeishuHookTokenSecret0c3"]),  # Feishu's own URL: neither
    (14, "https://hooks.example.com/SecretPath0c3", "https", ["SecretPath0c3"]),  # https:// alone is no channel
]


@pytest.mark.parametrize("case, url, says, secrets", BAD, ids=[str(c[0]) for c in BAD])
def test_bad_urls_say_what_is_wrong_with_the_secret_masked(case, url, says, secrets):
    with pytest.raises(ValueError) as caught:
        channel_kind(url)
    message = str(caught.value)
    assert says.lower() in message.lower(), message
    assert "****" not in message, message  # one mask per secret, not masks of masks
    for secret in secrets:
        assert secret not in message, message


# (case, URL, service named, secrets)
UNSUPPORTED = [
    (1, "discord://DiscordWebhookId0c3/DiscordTokenSecret0c3", "Discord", ["DiscordTokenSecret0c3"]),
    (2, "tgram://123456789:TelegramTokenSecret0c3/-100123", "Telegram", ["TelegramTokenSecret0c3"]),
    (3, "ntfys://ntfy.example.com/offsetwatch-topic", "ntfy", []),
]


@pytest.mark.parametrize("case, url, service, secrets", UNSUPPORTED, ids=[c[2] for c in UNSUPPORTED])
def test_services_we_do_not_offer_are_refused_by_name(case, url, service, secrets):
    with pytest.raises(ValueError) as caught:
        channel_kind(url)
    message = str(caught.value)
    assert service.lower() in message.lower() and "not supported" in message, message
    for secret in secrets:
        assert secret not in message, message


def test_masked_never_fails_and_hides_what_it_cannot_read():
    # 1. unreadable: only the scheme (and an https host) is shown
    assert masked("slack://T0SLACKA1/B0SLACKB2") == "slack://***"
    assert masked("https://oapi.dingtalk.com/robot/send?access_token=Tok0c3") == "https://oapi.dingtalk.com/***"
    # 2. not even a URL
    assert masked("T0SLACKA1/B0SLACKB2") == "***"
    assert masked("") == ""
