"""The Offset Watch app: models, and the code by area (monitoring, charts, rewinds, audit, exports,
accounts, notifications, web, api). The project package (settings, urls, the Celery app) is
`offsetwatch`; docs/architecture.md maps the layers."""
