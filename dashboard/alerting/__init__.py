"""On-call alerting: channels (through apprise), routes, incident notifications, acknowledgements,
silences and the delivery outbox (issue #15)."""
