"""Local peers standing in for the notification services (issue #15): a small local internet
for the HTTPS services (a throwaway CA and a proxy that answers as hooks.slack.com,
events.pagerduty.com ... would), a plain-HTTP JSON webhook and an SMTP server, each recording
what it received and each with fault switches (503 / 429 / 400 for the next N requests, or a
held connection). Fixtures in tests/peers/fixtures.py; registered by tests/conftest.py.
"""
