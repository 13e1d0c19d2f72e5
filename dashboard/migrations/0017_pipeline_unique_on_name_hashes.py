"""Pipelines unique on (store, md5(topic), md5(group)): a btree entry of the names themselves
holds at most ~2700 bytes, which a 1000-character group id outside ASCII exceeds (issue #12)."""

import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0016_mask_source_secrets'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='pipeline',
            name='pipeline_unique',
        ),
        migrations.AddConstraint(
            model_name='pipeline',
            constraint=models.UniqueConstraint(
                models.F('store'), django.db.models.functions.text.MD5('topic'),
                django.db.models.functions.text.MD5('group'), name='pipeline_unique_on_name_hashes',
            ),
        ),
    ]
