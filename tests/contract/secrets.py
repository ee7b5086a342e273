"""The `Secrets` contract, which `KubernetesSecrets` (on the real kube-apiserver) and the
fake `InMemorySecrets` must both pass: a Secret is read in the namespace asked for and no
other; a missing one is NotFound, one RBAC refuses is Forbidden, each naming the namespace
and the Secret.

Use: subclass `SecretsContract` and provide the fixture `place`: a `Place` whose `secrets`
is the port under test, `namespace(granted)` makes a fresh namespace (the reader may read
its Secrets, or not) and `put` writes a Secret there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest

from modelhooks.core.errors import Forbidden, NotFound
from modelhooks.core.ports import Secrets


@dataclass(frozen=True)
class Place:
    secrets: Secrets
    namespace: Callable[[bool], str]
    put: Callable[[str, str, Mapping[str, bytes]], None]


class SecretsContract:
    def test_reads_the_secret_of_the_namespace_asked_for(self, place: Place) -> None:
        ns = place.namespace(True)
        data = {"AWS_ACCESS_KEY_ID": b"a-key", "bin": bytes(range(256))}
        place.put(ns, "creds", data)
        assert place.secrets.get(ns, "creds") == data

    def test_the_same_name_elsewhere_is_that_namespaces_never_this_ones(self, place: Place) -> None:
        a, b = place.namespace(True), place.namespace(True)
        place.put(a, "creds", {"who": b"a"})
        with pytest.raises(NotFound) as missing:
            place.secrets.get(b, "creds")
        assert b in missing.value.message and "creds" in missing.value.message
        place.put(b, "creds", {"who": b"b"})
        assert place.secrets.get(b, "creds") == {"who": b"b"}
        assert place.secrets.get(a, "creds") == {"who": b"a"}

    def test_a_namespace_that_did_not_grant_it_is_forbidden(self, place: Place) -> None:
        closed = place.namespace(False)
        place.put(closed, "creds", {"who": b"closed"})
        with pytest.raises(Forbidden) as refused:
            place.secrets.get(closed, "creds")
        assert closed in refused.value.message and "creds" in refused.value.message
        assert refused.value.details == {"namespace": closed, "secret": "creds"}
