"""Keyless identities at admission, on the harness's private Sigstore (its issuer is the
kube-apiserver): a model signed with a ServiceAccount's token is admitted by a policy naming
that identity exactly or by a regular expression, and refused by one naming another."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.signing.keyless import SigstoreSigner, SigstoreTrust
from tests.e2e.admission_helpers import (
    GROUP,
    VERSION,
    Webhook,
    create_pod,
    create_policy,
    labelled_namespace,
    signed_model,
    start_webhook,
)
from tests.servers.kube import KubeApiServer
from tests.servers.sigstore import Sigstore

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS, SA = "ml-admission", "trainer"


@pytest.fixture(scope="module")
def webhook(
    kube_apiserver: KubeApiServer, sigstore: Sigstore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    work = tmp_path_factory.mktemp("admission-keyless")
    # the instance's TUF repository for the verifier's trust; it never signs
    env = {**sigstore.env(), "MODELHOOKS_SIGNING_ENABLED": "false"}
    with start_webhook(kube_apiserver, work, env=env) as started:
        yield started


@pytest.fixture
def namespace(kube_apiserver: KubeApiServer, webhook: Webhook) -> str:
    return labelled_namespace(kube_apiserver, webhook)


def test_keyless_identities_exact_and_by_regexp_accept_and_refuse(
    kube_apiserver: KubeApiServer,
    sigstore: Sigstore,
    webhook: Webhook,
    namespace: str,
    ociregistry: Any,
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text(sigstore.token(NS, SA))
    signer = SigstoreSigner(SigstoreTrust.from_env(sigstore.env()), token)
    repo = f"admission-{uuid.uuid4().hex[:8]}/bert"
    _, reference, _ = signed_model(ociregistry, repo, tmp_path, signer)
    identity = Sigstore.identity(NS, SA)

    create_policy(
        kube_apiserver,
        namespace,
        "other",
        {"identities": [{"issuer": sigstore.issuer, "subject": Sigstore.identity(NS, "someone")}]},
    )
    refused = create_pod(kube_apiserver, namespace, reference)
    assert refused.status == 403, refused.body
    assert f"signed by: sigstore {identity}" in refused.message, refused.message

    pattern = f"https://kubernetes\\.io/namespaces/{NS}/serviceaccounts/.*"
    create_policy(
        kube_apiserver,
        namespace,
        "ml-team",
        {
            "identities": [
                {"issuerRegExp": "https://127\\.0\\.0\\.1:[0-9]+", "subjectRegExp": pattern}
            ]
        },
    )
    from kubernetes import client

    both = create_pod(kube_apiserver, namespace, reference)  # every covering policy counts
    assert both.status == 403 and f"{namespace}/other [enforce]" in both.message, both.body
    assert f"{namespace}/ml-team" not in both.message, both.message
    with kube_apiserver.api_client() as api:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "verificationpolicies", "other"
        )
    admitted = create_pod(kube_apiserver, namespace, reference)
    assert admitted.status == 201, admitted.body

    exact = labelled_namespace(kube_apiserver, webhook)
    create_policy(
        kube_apiserver,
        exact,
        "exact",
        {"identities": [{"issuer": sigstore.issuer, "subject": identity}]},
    )
    assert create_pod(kube_apiserver, exact, reference).status == 201
