"""`InMemorySecrets`: the fake of the `Secrets` port. It passes the same contract as
`KubernetesSecrets` on the real kube-apiserver (tests/contract/secrets.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from modelhooks.core.errors import Forbidden, NotFound

__all__ = ["InMemorySecrets"]


class InMemorySecrets:
    """Secrets by (namespace, name); `granted`: the namespaces RBAC lets the reader into
    (None: every one). `reads` records every (namespace, name) asked for."""

    def __init__(
        self,
        secrets: Mapping[tuple[str, str], Mapping[str, bytes]] | None = None,
        *,
        granted: Iterable[str] | None = None,
    ) -> None:
        self.secrets = {k: dict(v) for k, v in (secrets or {}).items()}
        self.granted = None if granted is None else set(granted)
        self.reads: list[tuple[str, str]] = []

    def get(self, namespace: str, name: str) -> dict[str, bytes]:
        self.reads.append((namespace, name))
        details = {"namespace": namespace, "secret": name}
        if self.granted is not None and namespace not in self.granted:
            raise Forbidden(
                f"cleanup may not read Secret {name!r} in namespace {namespace!r}", **details
            )
        if (namespace, name) not in self.secrets:
            raise NotFound(f"Secret {name!r} in namespace {namespace!r} does not exist", **details)
        return dict(self.secrets[(namespace, name)])
