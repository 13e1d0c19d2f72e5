"""python manage.py issue_pipeline_token --store NAME --topic T --group G [--name N]

Prints a new token for a pipeline's job, once (only its hash is stored). Declares the pipeline
if the collectors have not discovered it yet, so a job can report from its very first start.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from dashboard.accounts.tokens import pipeline_get_or_declare, pipeline_token_issue
from dashboard.audit.actor import Actor
from dashboard.models import Store


class Command(BaseCommand):
    help = "Issue a token a streaming job uses to talk to the dashboard's API (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("--store", required=True, help="the Store's name (see the admin)")
        parser.add_argument("--topic", required=True)
        parser.add_argument("--group", required=True)
        parser.add_argument("--name", default="job", help="what the token is for, shown in the admin")

    def handle(self, *args, store: str, topic: str, group: str, name: str, **options):
        try:
            store_obj = Store.objects.get(name=store)
        except Store.DoesNotExist:
            raise CommandError(f"no store named {store!r}; stores: {', '.join(Store.objects.values_list('name', flat=True))}") from None
        who = Actor.of_command("issue_pipeline_token")
        with transaction.atomic():  # a declared pipeline and its token, with their audit events, or nothing
            pipeline, created = pipeline_get_or_declare(store=store_obj, topic=topic, group=group, actor=who)
            token, plain = pipeline_token_issue(pipeline=pipeline, name=name, actor=who)
        if created:
            self.stderr.write(f"declared pipeline {topic}/{group} in store {store}")
        self.stderr.write(f"token {token.prefix}… for pipeline {pipeline.pk} ({topic}/{group}); it is shown only once:")
        self.stdout.write(plain)
