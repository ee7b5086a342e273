"""`KubeflowModelRegistry`: the Kubeflow Model Registry REST API (v1alpha3) through
requests (imported when the adapter is built).

Mapping: RegisteredModel, ModelVersion and ModelArtifact (artifactType "model-artifact")
map one to one; ids are the server's string ids; custom properties are typed
`MetadataStringValue`s; an artifact's digest is its custom property "digest".

There is no transaction over REST: `transaction()` is a no-op and each write stands alone;
handlers stay correct by being idempotent (find-or-create on natural identity).

Server quirks handled here (seen on v0.3.0 over PostgreSQL: unquoted mixed-case table names
in hand-written SQL; v0.3.8 quotes them):
- parent-scoped queries (`registered_models/{id}/versions`, `model_version?parentResourceId`,
  `model_versions/{id}/artifacts`) and any `nextPageToken` answer 500 ("relation ... does
  not exist", "missing FROM-clause entry": SQLSTATE 42P01). Reads then fall back to the
  global listing without pageSize (which that server answers in one page), filtered here.
  Global artifact listings do not name the version, so artifacts written here also carry
  the version id in the custom property `modelhooks.model_version_id` (hidden from the
  domain object); on such a server, artifacts other clients wrote are not listed.
- creating a version or artifact under a parent that does not exist succeeds: the parent
  is fetched first so that a missing one is NotFound.
- a taken name is 409 (400/422 "already exists" on other versions): both are Conflict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)
from modelhooks.core.records import (
    ArtifactState,
    ModelArtifact,
    ModelState,
    ModelVersion,
    RegisteredModel,
)

if TYPE_CHECKING:
    import requests

__all__ = ["KubeflowModelRegistry"]

API_PATH = "/api/model_registry/v1alpha3"
ARTIFACT_TYPE = "model-artifact"
PAGE_SIZE = 1000
DIGEST = "digest"
VERSION_ID = "modelhooks.model_version_id"
Json = dict[str, Any]


class _BrokenQuery(Unavailable):
    """The server cannot run this query at all (SQLSTATE 42P01): use the global listing."""


def registry_error(status: int, message: str, where: str, **details: Any) -> ModelhooksError:
    """The modelhooks error for an HTTP error answer of the Model Registry."""
    text = f"model registry: {where} answered {status}: {message}"
    if status == 409 or (status in (400, 422) and "already exists" in message):
        return Conflict(text, **details)
    if status == 401:
        return CredentialsRefused(text, **details)
    if status == 403:
        return Forbidden(text, **details)
    if status == 404:
        return NotFound(text, **details)
    if status == 429:
        return Throttled(text, **details)
    if status >= 500 and "SQLSTATE 42P01" in message:
        return _BrokenQuery(text, **details)
    if 400 <= status < 500 and status != 408:
        return BadRequest(text, **details)
    return Unavailable(text, **details)  # 5xx, 408


class KubeflowModelRegistry:
    """A Kubeflow Model Registry, by its server URL (the REST base is appended).

    >>> registry = KubeflowModelRegistry("http://model-registry:8080", token="...")  # doctest: +SKIP
    >>> registry.get_model("bert")  # doctest: +SKIP
    RegisteredModel(id='1', name='bert', ...)
    """

    name = "kubeflow"

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30,
        session: requests.Session | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.api_url = base if base.endswith(API_PATH) else base + API_PATH
        self._timeout = timeout
        self._owns_session = session is None
        if session is None:
            import requests  # here, not at import: bootstrap imports this module on demand

            session = requests.Session()
        self._session = session
        self._serial = threading.RLock()
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def close(self) -> None:
        """Close the HTTP session (unless it was given to us)."""
        if self._owns_session:
            self._session.close()

    def transaction(self) -> AbstractContextManager[None]:
        """REST has no transactions: each write stands alone (handlers are idempotent, so a
        redelivery completes what a failure interrupted). Within this process, transactions
        run one at a time, so a handler's read-then-write is not interleaved with another's;
        across processes the Model Registry offers no conditional write to do the same."""
        return self._serialized()

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        with self._serial:
            yield

    # registered models
    def get_model(self, name: str) -> RegisteredModel | None:
        found = self._call("GET", "/registered_model", params={"name": name}, missing_ok=True)
        return _model(found) if found else None

    def create_model(self, name: str, *, properties: Mapping[str, str]) -> RegisteredModel:
        body = {"name": name, "customProperties": _values(properties)}
        return _model(self._call("POST", "/registered_models", json=body))

    def update_model(self, model: RegisteredModel) -> RegisteredModel:
        body = _update(model.state, model.description, model.custom_properties)
        return _model(self._call("PATCH", f"/registered_models/{model.id}", json=body))

    def list_models(self) -> list[RegisteredModel]:
        return [_model(item) for item in self._listing("/registered_models", "/registered_models")]

    # versions
    def get_version(self, model_id: str, name: str) -> ModelVersion | None:
        params = {"name": name, "parentResourceId": model_id}
        try:
            found = self._call("GET", "/model_version", params=params, missing_ok=True)
        except _BrokenQuery:
            return next((v for v in self.list_versions(model_id) if v.name == name), None)
        return _version(found) if found else None

    def create_version(
        self, model_id: str, name: str, *, properties: Mapping[str, str]
    ) -> ModelVersion:
        self._call("GET", f"/registered_models/{model_id}")  # NotFound: the server won't check
        body = {
            "name": name,
            "registeredModelId": model_id,
            "customProperties": _values(properties),
        }
        return _version(self._call("POST", "/model_versions", json=body))

    def update_version(self, version: ModelVersion) -> ModelVersion:
        body = _update(version.state, version.description, version.custom_properties)
        return _version(self._call("PATCH", f"/model_versions/{version.id}", json=body))

    def list_versions(self, model_id: str) -> list[ModelVersion]:
        scoped = f"/registered_models/{model_id}/versions"
        items = self._listing(
            scoped, "/model_versions", lambda v: v.get("registeredModelId") == model_id
        )
        return [_version(item) for item in items]

    # artifacts
    def list_artifacts(self, version_id: str) -> list[ModelArtifact]:
        scoped = f"/model_versions/{version_id}/artifacts"
        items = self._listing(
            scoped,
            "/model_artifacts",
            lambda a: _props(a).get(VERSION_ID) == version_id,
            artifactType=ARTIFACT_TYPE,
        )
        return [_artifact(a, version_id) for a in items if a.get("artifactType") == ARTIFACT_TYPE]

    def upsert_artifact(self, artifact: ModelArtifact) -> ModelArtifact:
        props = {**artifact.custom_properties, DIGEST: artifact.digest}
        props[VERSION_ID] = artifact.version_id
        body = {
            "artifactType": ARTIFACT_TYPE,
            "uri": artifact.uri,
            "state": str(artifact.state),
            "customProperties": _values(props),
        }
        if artifact.id:
            stored = self._call("PATCH", f"/model_artifacts/{artifact.id}", json=body)
        else:
            path = f"/model_versions/{artifact.version_id}"
            self._call("GET", path)  # NotFound: the server won't check
            stored = self._call("POST", f"{path}/artifacts", json={**body, "name": artifact.name})
        return _artifact(stored, artifact.version_id)

    # HTTP
    def _call(self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any) -> Json:
        """One request; its JSON object answer ({} for a 404 when `missing_ok`)."""
        import requests

        where = f"{method} {path}"
        try:
            response = self._session.request(
                method, self.api_url + path, headers=self._headers, timeout=self._timeout, **kwargs
            )
        except requests.RequestException as exc:  # refused, reset, timed out
            raise Unavailable(f"model registry: {where} failed: {exc}", url=self.api_url) from None
        if response.status_code == 404 and missing_ok:
            return {}
        if response.status_code >= 400:
            details = {"url": self.api_url, "retry_after": response.headers.get("Retry-After")}
            details = {k: v for k, v in details.items() if v}
            raise registry_error(response.status_code, _message(response), where, **details)
        try:
            body = response.json()
        except ValueError:
            raise Unavailable(f"model registry: {where} answered with no JSON") from None
        return body if isinstance(body, dict) else {}

    def _items(self, path: str, page_size: int | None, **params: str) -> Iterator[Json]:
        """Every item of a listing, page after page (`page_size` None: the server's pages)."""
        if page_size:
            params["pageSize"] = str(page_size)
        while True:
            page = self._call("GET", path, params=params)
            yield from page.get("items") or ()
            token = page.get("nextPageToken")
            if not token:
                return
            params["nextPageToken"] = token

    def _listing(
        self, path: str, fallback: str, keep: Callable[[Json], bool] = bool, **params: str
    ) -> list[Json]:
        """A paged listing or, where the server cannot run it (42P01), the global listing
        `fallback` in the server's own pages, filtered by `keep`."""
        try:
            return list(self._items(path, PAGE_SIZE, **params))
        except _BrokenQuery:
            return [item for item in self._items(fallback, None) if keep(item)]


def _message(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else response.text.strip()[:300]


def _values(properties: Mapping[str, str]) -> Json:
    return {
        k: {"metadataType": "MetadataStringValue", "string_value": v} for k, v in properties.items()
    }


def _props(item: Json) -> dict[str, str]:
    """Custom properties as strings (numbers and booleans spelled out; structs skipped)."""
    props: dict[str, str] = {}
    for key, value in (item.get("customProperties") or {}).items():
        for kind in ("string_value", "int_value", "double_value", "bool_value"):
            if kind in value:
                raw = value[kind]
                props[key] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    return props


def _update(state: ModelState, description: str, properties: Mapping[str, str]) -> Json:
    return {
        "state": str(state),
        "description": description,
        "customProperties": _values(properties),
    }


def _model(item: Json) -> RegisteredModel:
    return RegisteredModel(
        id=str(item["id"]),
        name=item["name"],
        state=ModelState(item.get("state", ModelState.LIVE)),
        description=item.get("description", ""),
        custom_properties=_props(item),
    )


def _version(item: Json) -> ModelVersion:
    return ModelVersion(
        id=str(item["id"]),
        model_id=str(item.get("registeredModelId", "")),
        name=item["name"],
        state=ModelState(item.get("state", ModelState.LIVE)),
        description=item.get("description", ""),
        custom_properties=_props(item),
    )


def _artifact(item: Json, version_id: str) -> ModelArtifact:
    props = _props(item)
    digest = props.pop(DIGEST, "")
    props.pop(VERSION_ID, None)
    return ModelArtifact(
        id=str(item["id"]),
        version_id=version_id,
        name=item.get("name", ""),
        uri=item.get("uri", ""),
        digest=digest,
        state=ArtifactState(item.get("state", ArtifactState.UNKNOWN)),
        custom_properties=props,
    )
