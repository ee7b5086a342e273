"""`SqliteModelRegistry`: the embedded default registry, one SQLite file.

Same vocabulary and uniqueness rules as the Kubeflow Model Registry: model names are
unique, version names are unique per model, artifact names per version. One connection
per process behind a lock: statements take microseconds, and a lock never sleeps the way
SQLite's busy handler does when several connections of one process contend. WAL, so other
processes (`modelhooks registry list`) read without blocking the functions. Custom
properties are a JSON object per row: a `Typed` value keeps its JSON type there.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelhooks.adapters.sqlite_wal import Database
from modelhooks.core.errors import Conflict, NotFound, Unavailable
from modelhooks.core.records import (
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
    Typed,
    json_values,
)

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteModelRegistry"]

_SCHEMA = """
PRAGMA foreign_keys=ON;
CREATE TABLE IF NOT EXISTS registered_models (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '', properties TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS model_versions (
  id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL REFERENCES registered_models(id),
  name TEXT NOT NULL, state TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
  properties TEXT NOT NULL DEFAULT '{}', UNIQUE (model_id, name));
CREATE TABLE IF NOT EXISTS model_artifacts (
  id INTEGER PRIMARY KEY, version_id INTEGER NOT NULL REFERENCES model_versions(id),
  name TEXT NOT NULL, uri TEXT NOT NULL, digest TEXT NOT NULL, state TEXT NOT NULL,
  properties TEXT NOT NULL DEFAULT '{}', UNIQUE (version_id, name));
"""


class SqliteModelRegistry:
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        # opened on first use (checkpoints off the request path): a process that only checks
        # its wiring (functions-framework's master) opens nothing
        self._database = Database(path, _SCHEMA)
        self.path = self._database.path
        # the file is there from the start, empty until first used (SQLite takes an empty
        # file for an empty database): `modelhooks registry list` on a served home lists
        # nothing rather than finding no registry
        self.path.touch()
        self._lock = threading.RLock()
        self._depth = 0

    @property
    def _db(self) -> sqlite3.Connection:
        return self._database.connection()

    def close(self) -> None:
        self._database.close()

    def _cursor(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except Exception as exc:
            import sqlite3  # imported by then: it made the connection

            if isinstance(exc, sqlite3.IntegrityError):
                if "FOREIGN KEY" in str(exc):
                    raise NotFound(
                        f"registry: the parent of this row does not exist ({exc})"
                    ) from None
                raise Conflict(f"registry: {exc}") from None
            if isinstance(exc, sqlite3.OperationalError):  # locked, disk I/O: redeliver
                raise Unavailable(f"registry: {exc}") from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One SQLite transaction (nested calls join the outer one)."""
        with self._lock:
            if self._depth == 0:
                self._cursor("BEGIN IMMEDIATE", ())
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._db.rollback()
                raise
            self._depth -= 1
            if self._depth == 0:
                self._cursor("COMMIT", ())

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._cursor(sql, params).fetchall()

    def _insert(self, sql: str, params: tuple[Any, ...]) -> str:
        with self._lock:
            return str(self._cursor(sql, params).lastrowid)

    # registered models
    def get_model(self, name: str) -> RegisteredModel | None:
        rows = self._rows(f"SELECT {_MODEL} FROM registered_models WHERE name=?", (name,))
        return _model(rows[0]) if rows else None

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel:
        id = self._insert(
            "INSERT INTO registered_models(name, state, properties) VALUES (?,?,?)",
            (name, ModelState.LIVE, _json(properties)),
        )
        return RegisteredModel(id=id, name=name, custom_properties=properties)

    def update_model(self, model: RegisteredModel) -> RegisteredModel:
        self._update(
            "registered_models",
            model.id,
            state=model.state,
            description=model.description,
            properties=_json(model.custom_properties),
        )
        return model

    def list_models(self) -> list[RegisteredModel]:
        return [
            _model(r) for r in self._rows(f"SELECT {_MODEL} FROM registered_models ORDER BY name")
        ]

    # versions
    def get_version(self, model_id: str, name: str) -> ModelVersion | None:
        rows = self._rows(
            f"SELECT {_VERSION} FROM model_versions WHERE model_id=? AND name=?",
            (_key(model_id), name),
        )
        return _version(rows[0]) if rows else None

    def get_version_by_id(self, version_id: str) -> ModelVersion | None:
        rows = self._rows(f"SELECT {_VERSION} FROM model_versions WHERE id=?", (_key(version_id),))
        return _version(rows[0]) if rows else None

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion:
        id = self._insert(
            "INSERT INTO model_versions(model_id, name, state, properties) VALUES (?,?,?,?)",
            (_key(model_id), name, ModelState.LIVE, _json(properties)),
        )
        return ModelVersion(id=id, model_id=model_id, name=name, custom_properties=properties)

    def update_version(self, version: ModelVersion) -> ModelVersion:
        self._update(
            "model_versions",
            version.id,
            state=version.state,
            description=version.description,
            properties=_json(version.custom_properties),
        )
        return version

    def list_versions(self, model_id: str) -> list[ModelVersion]:
        rows = self._rows(
            f"SELECT {_VERSION} FROM model_versions WHERE model_id=? ORDER BY id", (_key(model_id),)
        )
        return [_version(r) for r in rows]

    # artifacts
    def list_artifacts(self, version_id: str) -> list[ModelArtifact]:
        rows = self._rows(
            f"SELECT {_ARTIFACT} FROM model_artifacts WHERE version_id=? ORDER BY id",
            (_key(version_id),),
        )
        return [_artifact(r) for r in rows]

    def get_artifact(self, artifact_id: str) -> ModelArtifact | None:
        rows = self._rows(
            f"SELECT {_ARTIFACT} FROM model_artifacts WHERE id=?", (_key(artifact_id),)
        )
        return _artifact(rows[0]) if rows else None

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        props = _json(artifact.custom_properties)
        if artifact.id:
            self._update(
                "model_artifacts",
                artifact.id,
                uri=artifact.uri,
                digest=artifact.digest,
                state=artifact.state,
                properties=props,
            )
            return artifact
        id = self._insert(
            "INSERT INTO model_artifacts(version_id, name, uri, digest, state, properties)"
            " VALUES (?,?,?,?,?,?)",
            (
                _key(artifact.version_id),
                artifact.name,
                artifact.uri,
                artifact.digest,
                artifact.state,
                props,
            ),
        )
        return ModelArtifact(  # dataclasses.replace, without its generic walk over fields
            id=id,
            version_id=artifact.version_id,
            name=artifact.name,
            uri=artifact.uri,
            digest=artifact.digest,
            state=artifact.state,
            custom_properties=artifact.custom_properties,
        )

    def _update(self, table: str, id: str, **cols: Any) -> None:
        sets = ", ".join(f"{c}=?" for c in cols)
        with self._lock:
            cur = self._cursor(f"UPDATE {table} SET {sets} WHERE id=?", (*cols.values(), _key(id)))
        if cur.rowcount == 0:
            raise NotFound(f"registry: no row {id} in {table}")


def _key(id: str) -> int:
    """A row id as SQLite keeps it; -1, which no row has, for text that is not one ("²" and
    "٣" are digits to str.isdigit and int): a lookup finds nothing, a write naming it is
    NotFound (its parent) or changes nothing."""
    return int(id) if id.isascii() and id.isdigit() else -1


def _json(properties: Mapping[str, str]) -> str:
    return json.dumps(json_values(properties))


# Columns by position (a tuple row: sqlite3.Row's lookups by name cost more than the rest)
_MODEL = "id, name, state, description, properties"
_VERSION = "id, model_id, name, state, description, properties"
_ARTIFACT = "id, version_id, name, uri, digest, state, properties"
_MODEL_STATES = {state.value: state for state in ModelState}
_ARTIFACT_STATES = {state.value: state for state in ArtifactState}


def _props(text: str) -> dict[str, str]:
    stored = json.loads(text)
    return {k: v if isinstance(v, str) else Typed(v) for k, v in stored.items()}


def _model(row: tuple[Any, ...]) -> RegisteredModel:
    id, name, state, description, properties = row
    return RegisteredModel(
        id=str(id),
        name=name,
        state=_MODEL_STATES.get(state) or ModelState(state),
        description=description,
        custom_properties=_props(properties),
    )


def _version(row: tuple[Any, ...]) -> ModelVersion:
    id, model_id, name, state, description, properties = row
    return ModelVersion(
        id=str(id),
        model_id=str(model_id),
        name=name,
        state=_MODEL_STATES.get(state) or ModelState(state),
        description=description,
        custom_properties=_props(properties),
    )


def _artifact(row: tuple[Any, ...]) -> ModelArtifact:
    id, version_id, name, uri, digest, state, properties = row
    return ModelArtifact(
        id=str(id),
        version_id=str(version_id),
        name=name,
        uri=uri,
        digest=digest,
        state=_ARTIFACT_STATES.get(state) or ArtifactState(state),
        custom_properties=_props(properties),
    )
