"""Masks store credentials already written into text that every viewer sees (issue #12).

Before masking existed, a source's label was "store NAME (zk://user:password@host/chroot)" and a
failing poll's error could quote the URL; the labels and errors were copied into pipelines'
evaluation and incident reasons, and a failed store write into the rewind's outcome. Each such
text goes through mask_secrets with every store's and cluster's URL. The audit log is left
alone: it always masked URLs, and it is hash-chained (a rewrite would break the chain).
"""
from django.db import migrations

from streamoffsets.urls import mask_secrets


def _mask_list(values, urls):
    if not isinstance(values, list):
        return values
    return [mask_secrets(v, urls) if isinstance(v, str) else v for v in values]


def mask(apps, schema_editor):
    Store = apps.get_model("dashboard", "Store")
    Cluster = apps.get_model("dashboard", "Cluster")
    urls = [*Store.objects.values_list("url", flat=True), *Cluster.objects.values_list("bootstrap_servers", flat=True)]

    def rewrite(model, text_fields=(), list_fields=()):
        for row in model.objects.all().iterator(chunk_size=500):
            changed = []
            for name in text_fields:
                value = getattr(row, name)
                masked = mask_secrets(value, urls)
                if masked != value:
                    setattr(row, name, masked)
                    changed.append(name)
            for name in list_fields:
                value = getattr(row, name)
                masked = _mask_list(value, urls)
                if masked != value:
                    setattr(row, name, masked)
                    changed.append(name)
            if changed:
                row.save(update_fields=changed)

    rewrite(apps.get_model("dashboard", "SourceHealth"), text_fields=("label", "last_error", "warning"))
    rewrite(apps.get_model("dashboard", "PipelineEvaluation"), list_fields=("reasons",))
    rewrite(apps.get_model("dashboard", "Incident"), list_fields=("reasons",))
    rewrite(apps.get_model("dashboard", "RewindRequest"), text_fields=("outcome",))
    rewrite(apps.get_model("dashboard", "StoreProblem"), text_fields=("problem",))


class Migration(migrations.Migration):

    dependencies = [
        ("dashboard", "0015_source_health_error_by"),
    ]

    operations = [
        migrations.RunPython(mask, migrations.RunPython.noop),
    ]
