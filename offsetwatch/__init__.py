"""The Offset Watch project package: settings, urls, wsgi, the Celery app (celery.py) and `lib`.

The project's Celery app is loaded with the package, as Celery's Django guide does, so that the
`shared_task`s (dashboard.tasks, collectors.tasks) bind to it, and to its Redis broker, in
every process: gunicorn and management commands as well as the worker and beat, which name
the app on their command line. Without it the web process sent exports and notifications to
Celery's default app (amqp://localhost) and no worker ever saw them.
"""
from offsetwatch.celery import app as celery_app

__all__ = ("celery_app",)
