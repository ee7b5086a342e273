"""Moving a model registry between backends (`modelhooks registry export | import`), over the
`ModelRegistry` port, so any backend can be the source and any the destination.

The export is one JSON document: every model with its versions and their artifacts, each
record with the id it has in the source. Import is idempotent: records are matched by their
natural identity (model name; version name within the model; artifact name within the
version), created when absent and updated only when they differ, so a second import
changes nothing and an interrupted one is finished by running it again. The source's ids
are kept as the custom property `modelhooks.id.<source backend>` on each record, so after a
move (sqlite → kubeflow → kubernetes) every id the record ever had is still findable.
Typed custom properties (`Typed`: 0.95, true, an object) are exported as JSON values and
imported typed; a backend that keeps text only keeps their text. modelhooks' own records (prune's plans, the
archived `modelhooks:prune`) are not models: not exported, and an export holding them
imports without them.

>>> doc = export_registry(sqlite)  # doctest: +SKIP
>>> import_registry(kubernetes, doc).summary()  # doctest: +SKIP
'3 created, 0 updated, 5 unchanged, 0 refused'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import msgspec

from modelhooks.core.errors import BadRequest, Conflict, Permanent
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import (
    INTERNAL_PREFIX,
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
    json_values,
    typed,
)

__all__ = [
    "FORMAT",
    "ImportReport",
    "Row",
    "export_registry",
    "import_registry",
    "source_id_key",
    "walk",
]

FORMAT = "modelhooks.dev/registry-export/v1"
R = TypeVar("R", RegisteredModel, ModelVersion, ModelArtifact)
Json = dict[str, Any]
Row = tuple[RegisteredModel, ModelVersion | None, list[ModelArtifact]]


def walk(registry: ModelRegistry) -> Iterator[Row]:
    """Every model, each version with its artifacts ((model, None, []) for a model without
    versions), as a stream, modelhooks' own records (`INTERNAL_PREFIX`: prune's plans) left
    out: a backend that can list them in bulk says so with a `walk()` of
    its own (Kubeflow: page by page, not one listing per model), else model by model."""
    for row in _walk(registry):
        if not row[0].name.startswith(INTERNAL_PREFIX):  # modelhooks' own records
            yield row


def _walk(registry: ModelRegistry) -> Iterator[Row]:
    own: Callable[[], Iterator[Row]] | None = getattr(registry, "walk", None)
    if own is not None:
        yield from own()
        return
    for model in registry.list_models():
        versions = registry.list_versions(model.id)
        if not versions:
            yield model, None, []
        for version in versions:
            yield model, version, registry.list_artifacts(version.id)


def source_id_key(backend: str) -> str:
    """The custom property that keeps a record's id in the `backend` it came from."""
    return f"modelhooks.id.{backend}"


def export_registry(registry: ModelRegistry) -> Json:
    """Every record of `registry`, as one JSON-ready document."""
    models: dict[str, Json] = {}
    for model, version, artifacts in walk(registry):
        doc = models.setdefault(model.id, {**_plain(model), "versions": []})
        if version is not None:
            plain = [_plain(a) for a in artifacts]
            doc["versions"].append({**_plain(version), "artifacts": plain})
    return {"format": FORMAT, "backend": _backend(registry), "models": list(models.values())}


@dataclass
class ImportReport:
    """What an import did, record by record kind; `refused` names what could not be
    written (the same identity with other content, a backend's own refusal)."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged, "
            f"{len(self.refused)} refused"
        )


def import_registry(registry: ModelRegistry, doc: Mapping[str, Any]) -> ImportReport:
    """Write the export `doc` into `registry` (see the module's docstring). BadRequest for
    a document that is not an export; per-record refusals are reported, not raised."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise BadRequest(f"not a registry export: its format is not {FORMAT!r}")
    key = source_id_key(str(doc.get("backend") or "unknown"))
    report = ImportReport()
    for m in _records(report, "the document's models", doc.get("models")):
        if str(m.get("name")).startswith(INTERNAL_PREFIX):  # an older export's: not a model
            continue
        model = _attempt(
            report, f"model {m.get('name')!r}", partial(_import_model, registry, report, m, key)
        )
        if model is None:
            continue
        for v in _records(report, f"model {m['name']!r} versions", m.get("versions")):
            _attempt(
                report,
                f"model {m['name']!r} version {v.get('name')!r}",
                partial(_import_version, registry, report, model, v, key),
            )
    return report


def _records(report: ImportReport, where: str, value: Any) -> list[Json]:
    """The records of a list in the document; a list that is not one, or an item that is
    not a record, is refused as malformed (the rest is imported)."""
    if value is None:
        return []
    if not isinstance(value, list):
        report.refused.append(f"{where}: malformed (a list of records expected)")
        return []
    records = [r for r in value if isinstance(r, dict)]
    if len(records) < len(value):
        report.refused.append(f"{where}: {len(value) - len(records)} malformed (not records)")
    return records


def _attempt(report: ImportReport, where: str, action: Callable[[], R]) -> R | None:
    """`action`'s result, or None with the refusal reported (Transient errors abort)."""
    try:
        return action()
    except (KeyError, TypeError, ValueError) as exc:
        report.refused.append(f"{where}: malformed record ({exc!r})")
    except Permanent as exc:  # the same identity with other content, a backend's refusal
        report.refused.append(f"{where}: {exc}")
    return None


def _import_model(
    registry: ModelRegistry, report: ImportReport, m: Json, key: str
) -> RegisteredModel:
    return _ensure(
        report,
        registry.get_model(m["name"]),
        lambda: registry.create_model(m["name"], properties=_props(m, key)),
        _model_like(m, key),
        registry.update_model,
    )


def _import_version(
    registry: ModelRegistry, report: ImportReport, model: RegisteredModel, v: Json, key: str
) -> ModelVersion:
    version = _ensure(
        report,
        registry.get_version(model.id, v["name"]),
        lambda: registry.create_version(model.id, v["name"], properties=_props(v, key)),
        _version_like(v, key),
        registry.update_version,
    )
    existing = {a.name: a for a in registry.list_artifacts(version.id)}
    for a in v.get("artifacts") or ():
        _import_artifact(registry, report, version, existing.get(a["name"]), a, key)
    return version


def _import_artifact(
    registry: ModelRegistry,
    report: ImportReport,
    version: ModelVersion,
    found: ModelArtifact | None,
    a: Json,
    key: str,
) -> None:
    wanted = ModelArtifact(
        id=found.id if found else "",
        version_id=version.id,
        name=a["name"],
        uri=a.get("uri", ""),
        digest=a.get("digest", ""),
        state=ArtifactState(a.get("state", ArtifactState.UNKNOWN)),
        custom_properties=_props(a, key),
    )
    if found is not None and found.digest and found.digest != wanted.digest:
        raise Conflict(f"registered with digest {found.digest!r}, the export has {wanted.digest!r}")
    if found is None:
        registry.upsert_artifact(wanted)
        report.created += 1
    elif _same(found, wanted):
        report.unchanged += 1
    else:
        registry.upsert_artifact(wanted)
        report.updated += 1


def _ensure(
    report: ImportReport,
    found: R | None,
    create: Callable[[], R],
    wanted: Callable[[R], R],
    update: Callable[[R], R],
) -> R:
    """Find-or-create, then bring the record to the exported content (only if it differs)."""
    record = found if found is not None else create()
    target = wanted(record)
    if _same(record, target):
        report.unchanged += found is not None
        report.created += found is None
        return record
    report.updated += found is not None
    report.created += found is None
    return update(target)


def _same(a: Any, b: Any) -> bool:
    return bool(msgspec.structs.replace(a, id="") == msgspec.structs.replace(b, id=""))


def _model_like(m: Json, key: str) -> Callable[[RegisteredModel], RegisteredModel]:
    return lambda r: msgspec.structs.replace(
        r,
        state=ModelState(m.get("state", ModelState.LIVE)),
        description=m.get("description", ""),
        custom_properties=_props(m, key),
    )


def _version_like(v: Json, key: str) -> Callable[[ModelVersion], ModelVersion]:
    return lambda r: msgspec.structs.replace(
        r,
        state=ModelState(v.get("state", ModelState.LIVE)),
        description=v.get("description", ""),
        custom_properties=_props(v, key),
    )


def _props(record: Json, key: str) -> dict[str, str]:
    """The exported properties, plus the record's id in its source (kept from earlier moves
    too: those live in the properties already)."""
    props = {str(k): _typed(v) for k, v in (record.get("custom_properties") or {}).items()}
    if record.get("id"):
        props[key] = str(record["id"])
    return props


def _typed(value: Any) -> str:
    """An exported property value: text, or a JSON value kept typed (older exports: text)."""
    try:
        return typed(value)
    except ValueError:
        return str(value)


def _plain(record: Any) -> Json:
    """A record as JSON: its enums as their values, its typed properties as JSON values."""
    doc = msgspec.structs.asdict(record)
    doc["custom_properties"] = json_values(record.custom_properties)
    return {k: (v.value if hasattr(v, "value") else v) for k, v in doc.items()}


def _backend(registry: ModelRegistry) -> str:
    return str(getattr(registry, "name", type(registry).__name__))
