from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Login throttling: the audit of lockouts (signal receivers) and an audited admin of
        # django-axes' attempts; the admin has registered axes' own by now (it comes first).
        from dashboard.accounts import lockout  # noqa: F401  (its signal receivers audit lockouts)
        from dashboard.admin import register_lockout_admin

        register_lockout_admin()
        # `field__any=[...]`: one array parameter for the collection cycle's long id lists.
        from offsetwatch.lib import pgarray

        pgarray.register()
        # Repeated timestamps (the cycle's samples share a few sampled_at values) parsed once.
        from offsetwatch.lib import pgtime

        pgtime.register()
