"""pytest fixtures for the notification peers (tests/peers/).

- `peer_network` (session): the servers, started once; `peer_network.env` is the environment a
  separate sending process (a Celery worker) needs, `peer_network.urls` a channel URL per kind.
- `peers` (per test): the same network, emptied of earlier tests' requests, faults and held
  connections, with this process's environment pointed at it (HTTPS_PROXY, REQUESTS_CA_BUNDLE)
  for the test's duration. `peers.received("slack")`, `peers.mails`, `peers.fail("slack", 503)`,
  `peers.hang("email")`.
"""
from __future__ import annotations

import pytest

from tests.peers.network import PeerNetwork


@pytest.fixture(scope="session")
def peer_network(tmp_path_factory):
    network = PeerNetwork(tmp_path_factory.mktemp("peers"))
    yield network
    network.stop()


@pytest.fixture
def peers(peer_network, monkeypatch):
    peer_network.reset()
    for name, value in peer_network.env.items():
        monkeypatch.setenv(name, value)
    yield peer_network
    peer_network.reset()  # lets go of connections a test left held
