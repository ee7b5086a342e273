"""`ArtifactRegistry`: the `OciRegistry` port over Google Artifact Registry's API (REST
transport of `google-cloud-artifact-registry`, imported on first use), for Docker-format
repositories: tags, tag → digest, the whole history in one listing (untagged manifests
included), batched deletes. Manifests and referrers go through the repository's Docker path
(the OCI distribution API on the same host), a `DistributionRegistry`.

An image `LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE[/more]` is the port's
`repo` = `PROJECT/REPOSITORY/IMAGE[/more]` on the registry of host `LOCATION-docker.pkg.dev`;
its API package is `projects/PROJECT/locations/LOCATION/repositories/REPOSITORY/packages/
IMAGE` with "/" in IMAGE escaped as `%2F`, its manifests are versions (`…/versions/sha256:…`)
and its tags `…/tags/TAG`.

>>> registry = ArtifactRegistry("europe-west4-docker.pkg.dev")  # doctest: +SKIP
>>> registry.resolve("my-project/models/bert", "v1")  # doctest: +SKIP
'sha256:…'
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from modelhooks.adapters.oci.distribution import INDEXES, DistributionRegistry, listed
from modelhooks.core.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)
from modelhooks.core.extras import importing
from modelhooks.core.records import Manifest, Tag

__all__ = ["ArtifactRegistry"]

ENDPOINT = "https://artifactregistry.googleapis.com"
_RELATED_TAGS = 100  # a version lists at most this many of its tags (version.proto)
_PAGE = 1000  # the largest page ListTags and ListVersions serve
_OPERATION_TIMEOUT = 600.0  # seconds to wait for a batch delete to finish


class ArtifactRegistry:
    """Docker repositories of Artifact Registry on `host` (`LOCATION-docker.pkg.dev`).

    `docker` reads manifests and referrers; by default an anonymous `DistributionRegistry`
    for `https://HOST` (public repositories): for private ones pass one with basic auth
    `("oauth2accesstoken", <access token>)`. `endpoint` and `credentials` (default:
    Application Default Credentials) reach the API; an `http://` endpoint works, e.g. a test
    stand-in. Batch deletes send at most `batch` versions per request: the service sets the
    limit by region (older documentation said 10,000), so the default stays small.

    >>> ArtifactRegistry("us-docker.pkg.dev", endpoint="http://127.0.0.1:8080",
    ...                  credentials=AnonymousCredentials())  # doctest: +SKIP
    """

    def __init__(
        self,
        host: str,
        *,
        docker: DistributionRegistry | None = None,
        endpoint: str = ENDPOINT,
        credentials: Any = None,
        batch: int = 100,
        timeout: float = 60.0,
    ) -> None:
        location = host.removesuffix("-docker.pkg.dev")
        if location in (host, "") or "/" in location:
            raise ConfigError(
                f"{host!r} is not an Artifact Registry host (LOCATION-docker.pkg.dev)"
            )
        self.host, self.location = host, location
        self.docker = docker or DistributionRegistry(f"https://{host}")
        self.batch, self.timeout = batch, timeout
        self._endpoint, self._credentials = endpoint, credentials
        self._client: Any = None

    def _api(self) -> Any:
        if self._client is None:  # built on first use: importing google.* is slow
            with importing("gcp", "Artifact Registry's API"):
                from google.cloud import artifactregistry_v1

            with _mapped("the Artifact Registry client"):
                self._client = artifactregistry_v1.ArtifactRegistryClient(
                    credentials=self._credentials,
                    transport="rest",
                    client_options={"api_endpoint": self._endpoint},
                )
        return self._client

    def _package(self, repo: str) -> str:
        project, _, rest = repo.partition("/")
        repository, _, image = rest.partition("/")
        if not (project and repository and image):
            raise BadRequest(f"{repo!r}: expected PROJECT/REPOSITORY/IMAGE")
        return (
            f"projects/{project}/locations/{self.location}/repositories/{repository}"
            f"/packages/{quote(image, safe='')}"
        )

    def tags(self, repo: str, page: int = 1000) -> Iterator[str]:
        """Every tag of `repo` (ListTags, page by page); none for a missing image."""
        request = {"parent": self._package(repo), "page_size": min(page, _PAGE)}
        try:
            with _mapped(f"tags of {repo}"):
                for tag in self._api().list_tags(request=request, timeout=self.timeout):
                    yield _last(tag.name)
        except NotFound:
            return

    def resolve(self, repo: str, tag: str) -> str | None:
        """The digest `tag` names now (GetTag), or None."""
        name = f"{self._package(repo)}/tags/{tag}"
        try:
            with _mapped(f"tag {repo}:{tag}"):
                found = self._api().get_tag(name=name, timeout=self.timeout)
        except NotFound:
            return None
        return _last(found.version)

    def history(self, repo: str) -> tuple[list[Tag], list[Manifest]]:
        """Every version (ListVersions, FULL view: one request per page of 1000): its tags
        with the version's creation time as push time, or an untagged `Manifest`. A version
        lists at most 100 tags; one with that many has its tags listed in full (ListTags).
        The children of an index are read through the Docker path (one manifest read per
        index; other manifests cost nothing)."""
        from google.cloud.artifactregistry_v1 import VersionView

        tags: list[Tag] = []
        untagged: list[Manifest] = []
        request = {"parent": self._package(repo), "view": VersionView.FULL, "page_size": _PAGE}
        try:
            with _mapped(f"versions of {repo}"):
                for version in self._api().list_versions(request=request, timeout=self.timeout):
                    digest, at = _last(version.name), _time(version.create_time)
                    names = [_last(t.name) for t in version.related_tags]
                    if len(names) >= _RELATED_TAGS:
                        names = self._tags_of(version.name)
                    media = (version.metadata or {}).get("mediaType")
                    children = (
                        self._children(repo, digest, names[0] if names else digest)
                        if media in INDEXES
                        else ()
                    )
                    tags += [Tag(name, digest, at, children) for name in names]
                    if not names:
                        untagged.append(Manifest(digest, at, children))
        except NotFound:
            return [], []
        return tags, untagged

    def _tags_of(self, version: str) -> list[str]:
        parent = version.rsplit("/versions/", 1)[0]
        request = {"parent": parent, "filter": f'version="{version}"', "page_size": _PAGE}
        return [_last(t.name) for t in self._api().list_tags(request=request, timeout=self.timeout)]

    def _children(self, repo: str, digest: str, ref: str) -> tuple[str, ...]:
        """What the index `digest` lists (`ref`: a tag of it, else its digest, named by a
        refusal)."""
        try:
            index, _, _ = self.docker.manifest(repo, digest)
        except NotFound:  # deleted since it was listed
            return ()
        return listed(index, self.docker, repo, ref=ref)

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str, int]:
        """(manifest JSON, digest, size) through the Docker path."""
        return self.docker.manifest(repo, ref)

    def push_manifest(self, repo: str, ref: str, manifest: dict[str, Any]) -> str:
        """Put a manifest through the Docker path; its digest."""
        return self.docker.push_manifest(repo, ref, manifest)

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]]:
        """Referrers of `digest` through the Docker path."""
        return self.docker.referrers(repo, digest)

    def delete_tag(self, repo: str, tag: str) -> bool:
        """DeleteTag; a tag that is gone succeeds (False: not removed by this call)."""
        return self._delete_tag(f"{self._package(repo)}/tags/{tag}")

    def _delete_tag(self, name: str) -> bool:
        try:
            with _mapped(f"tag delete {name}"):
                self._api().delete_tag(name=name, timeout=self.timeout)
        except NotFound:
            return False
        return True

    def delete_manifests(self, repo: str, digests: Sequence[str]) -> None:
        """Delete versions by digest: their tags first (one ListTags listing, DeleteTag
        each), then BatchDeleteVersions of `batch` versions at a time, each waited for.
        Versions that are gone already succeed."""
        wanted = list(dict.fromkeys(digests))
        if not wanted:
            return
        package = self._package(repo)
        tags = self._tags_naming(package, set(wanted))
        if tags is None:
            return  # no such image
        for tag in tags:
            self._delete_tag(tag)
        names = [f"{package}/versions/{digest}" for digest in wanted]
        for start in range(0, len(names), self.batch):
            chunk = names[start : start + self.batch]
            failed = self._batch_delete(package, chunk)
            if failed:  # refused: some were gone already (or failed): retry what is left
                existing = self._versions(package)
                left = [name for name in failed if _last(name) in existing]
                if left and self._batch_delete(package, left):
                    raise Unavailable(
                        f"Artifact Registry kept {len(left)} of {repo}", left=left[:5]
                    )

    def _tags_naming(self, package: str, digests: set[str]) -> list[str] | None:
        """The names of the tags on these digests; None when the package does not exist."""
        request = {"parent": package, "page_size": _PAGE}
        try:
            with _mapped(f"tags of {package}"):
                found = self._api().list_tags(request=request, timeout=self.timeout)
                return [t.name for t in found if _last(t.version) in digests]
        except NotFound:
            return None

    def _versions(self, package: str) -> set[str]:
        """The digests of the package's versions now (BASIC view)."""
        request = {"parent": package, "page_size": _PAGE}
        try:
            with _mapped(f"versions of {package}"):
                found = self._api().list_versions(request=request, timeout=self.timeout)
                return {_last(v.name) for v in found}
        except NotFound:
            return set()

    def _batch_delete(self, package: str, names: list[str]) -> list[str]:
        """One BatchDeleteVersions, waited for: the names it failed to delete (all of them
        when it was refused because one was missing)."""
        try:
            with _mapped(f"batch delete in {package}"):
                operation = self._api().batch_delete_versions(
                    parent=package, names=names, timeout=self.timeout
                )
                operation.result(timeout=_OPERATION_TIMEOUT)
                metadata = operation.metadata
                return list(metadata.failed_versions) if metadata is not None else []
        except NotFound:
            return names


def _last(name: str) -> str:
    """The id at the end of a resource name (a tag, `sha256:…`), unescaped."""
    return unquote(name.rsplit("/", 1)[-1])


def _time(at: datetime | None) -> datetime | None:
    return datetime.fromtimestamp(at.timestamp(), UTC) if at else None


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """Google API and auth errors as modelhooks errors: missing → NotFound, refused →
    Forbidden, quota → Throttled, other 4xx → BadRequest, 5xx and network → Unavailable."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    try:
        yield
    except api.GoogleAPICallError as e:
        cls: type[ModelhooksError] = Unavailable
        for theirs, ours in (
            (api.NotFound, NotFound),
            (api.Forbidden, Forbidden),
            (api.Unauthorized, Forbidden),
            (api.TooManyRequests, Throttled),
            (api.Conflict, Conflict),
            (api.ClientError, BadRequest),
        ):
            if isinstance(e, theirs):
                cls = ours
                break
        raise cls(f"Artifact Registry refused {what}", status=e.code, reason=e.message) from e
    except auth.InvalidOperation as e:  # a 401 that anonymous credentials cannot answer
        raise Forbidden(f"Artifact Registry wants credentials for {what}", reason=str(e)) from e
    except auth.DefaultCredentialsError as e:
        raise ConfigError("no Google credentials for Artifact Registry", reason=str(e)) from e
    except auth.RefreshError as e:
        cls = Unavailable if getattr(e, "retryable", False) else Forbidden
        raise cls(f"Google credentials refused for {what}", reason=str(e)) from e
    except (api.RetryError, auth.TransportError, OSError) as e:  # requests' errors, timeouts
        raise Unavailable(f"Artifact Registry unreachable for {what}", reason=str(e)) from e
