"""`prune`: tag retention for the OCI repository a model was pushed to.

On `artifact.pushed` for an `oci://` model whose repository a retention policy covers
(`prune.policy_file`, modelhooks.core.retention): list the repository's tags, plan (keep
the newest per stream, what is protected, recent, in use by a live registered version, or
named by a kept tag), delete the planned tags (their manifests stay) and reply
`tags.pruned` with the plan. A tag that names another digest than planned, since, is left
alone; a second delivery finds nothing more to delete.
"""

from __future__ import annotations

from datetime import UTC, datetime

from modelhooks.adapters.oci.distribution import OciClients, parse_uri
from modelhooks.core.function import Function, Skip
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import ModelState
from modelhooks.core.retention import Policies, history, plan
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, TagsPruned

__all__ = ["FUNCTION", "in_use"]


def handle(
    event: CanonicalEvent, *, oci: OciClients, registry: ModelRegistry, retention: Policies
) -> list[CanonicalEvent]:
    data = event.data
    if not isinstance(data, ArtifactPushed) or data.store != "oci":
        return []
    host, repo, _ = parse_uri(data.uri)
    policy = retention.for_repository(f"{host}/{repo}")
    if policy is None:
        raise Skip(f"no retention policy covers {host}/{repo} (prune.policy_file)")
    client, repo, _ = oci.for_uri(data.uri)
    result = plan(history(client, repo), policy, in_use=in_use(registry), now=datetime.now(UTC))
    deleted = []
    for decision in result.delete:
        if client.resolve(repo, decision.tag) == decision.digest:  # not moved since planning
            client.delete_tag(repo, decision.tag)
            deleted.append(decision.tag)
    reply = TagsPruned(
        repository=f"{host}/{repo}", deleted=deleted, kept=[d.tag for d in result.keep]
    )
    return [
        CanonicalEvent.new(
            reply, source="modelhooks/prune", subject=event.subject, id=f"{event.id}/pruned"
        )
    ]


def in_use(registry: ModelRegistry) -> frozenset[str]:
    """The digests live registered versions name: never deleted."""
    return frozenset(
        version.custom_properties.get("digest", "")
        for model in registry.list_models()
        if model.state == ModelState.LIVE
        for version in registry.list_versions(model.id)
        if version.state == ModelState.LIVE
    ) - {""}


FUNCTION = Function(name="prune", accepts=frozenset({ArtifactPushed.TYPE}), handle=handle)
