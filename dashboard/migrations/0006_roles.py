"""The three roles as groups (dashboard.roles): viewer, operator, approver."""
from django.db import migrations

ROLES = ("viewer", "operator", "approver")  # frozen here: migrations must not import app code


def create_groups(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.get_or_create(name=name)


def delete_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("dashboard", "0005_source_warning"),
    ]

    operations = [migrations.RunPython(create_groups, delete_groups)]
