"""`kube_client.request` against the real kube-apiserver: the credentials of a kubeconfig's
client are read through its refresh hook once per AUTH_TTL, not on every request, and a 401
makes the next request read them again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kube_client import connect, request
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration


def test_a_kubeconfigs_credentials_are_not_reloaded_on_every_request(
    kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    api = connect(str(kubeconfig), variable="KUBECONFIG", needs="a test")
    try:
        assert api.configuration.refresh_api_key_hook is not None  # reloads the user entry
        auth_settings, calls = api.configuration.auth_settings, []

        def counted() -> Any:  # each call runs the hook
            calls.append(1)
            return auth_settings()

        api.configuration.auth_settings = counted
        for _ in range(5):
            assert request(api, "GET", "/api/v1/namespaces/default")["kind"] == "Namespace"
        assert len(calls) == 1
    finally:
        api.close()


def test_a_401_makes_the_next_request_read_the_credentials_again(
    kube_apiserver: KubeApiServer,
) -> None:
    from kubernetes.client.exceptions import ApiException

    with kube_apiserver.api_client(token="not-a-token") as api:
        with pytest.raises(ApiException) as refused:
            request(api, "GET", "/api/v1/namespaces/default")
        assert refused.value.status == 401
        api.configuration.api_key = {"authorization": kube_apiserver.admin_token}  # rotated
        assert request(api, "GET", "/api/v1/namespaces/default")["kind"] == "Namespace"
