"""The store admin form: the URL validated and masked, the server probed for the kind it claims."""
from __future__ import annotations

from django import forms
from django.conf import settings

from dashboard.models import Store
from dashboard.monitoring.selectors import kafka_client_config
from streamoffsets.probe import server_kind_problem
from streamoffsets.urls import validate_store_url


class StoreAdminForm(forms.ModelForm):
    """The admin's store form: the URL is checked by kind (Store.clean), then the server it names
    is asked once whether it is that kind of server (streamoffsets.probe), so `hbase://` at a
    ZooKeeper port is refused here, not polled forever. A server that cannot be reached now is
    not judged: it is saved, and the collectors say it is down."""

    class Meta:
        model = Store
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        url, cluster = cleaned.get("url"), cleaned.get("cluster")
        if not url or self.errors:
            return cleaned
        try:
            validate_store_url(url, settings.FILE_STORE_ROOTS)
        except ValueError:
            return cleaned  # Store.clean says what is wrong with it
        problem = server_kind_problem(url, timeout_s=settings.POLL_PROBE_TIMEOUT_S,
                                      kafka_config=kafka_client_config(cluster_name=cluster.name) if cluster else None)
        if problem:
            self.add_error("url", problem)
        return cleaned
