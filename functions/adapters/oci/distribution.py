"""`DistributionRegistry`: the `OciRegistry` port over the OCI distribution API, for any
registry (distribution, zot, Harbor, GHCR, Artifact Registry's Docker path), authenticated
as each registry's 401 challenge asks (a Bearer token from its realm, or basic:
`modelhooks.adapters.oci.auth`): tags (paginated), tag → digest, manifests, blobs,
referrers (the API, or the `sha256-<hex>` fallback tag), deletes with capability
detection. `modelhooks.adapters.oci.clients.OciClients` hands them out per registry host.

>>> client = DistributionRegistry("http://127.0.0.1:5000")  # doctest: +SKIP
>>> client.manifest("models/bert", "v1")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from modelhooks.adapters.oci.credentials import Credentials, StaticCredentials
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    ModelhooksError,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)
from modelhooks.core.records import Manifest, Tag
from modelhooks.events.sources.oci_distribution import (
    UNTAG_PLACEHOLDER,
    UNTAG_PLACEHOLDER_DIGEST,
    is_pullable_digest,
    is_url_host,
)

if TYPE_CHECKING:
    import urllib.request

    from modelhooks.adapters.oci.auth import RegistryAuth
    from modelhooks.core.ports import OciRegistry

__all__ = [
    "CREATED",
    "EMPTY",
    "INDEXES",
    "MAX_ANSWER",
    "MAX_TAGS",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "TITLE",
    "DistributionRegistry",
    "bounded",
    "digest_of",
    "listed",
    "parse_uri",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_ACCEPT = ", ".join(
    [OCI_MANIFEST, OCI_INDEX, "application/vnd.docker.distribution.manifest.v2+json"]
)
EMPTY = {"mediaType": "application/vnd.oci.empty.v1+json", "digest": "", "size": 2}
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"  # the manifest annotation of the push time


INDEXES = (OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_NESTING = 7  # levels of indexes listed under an index that `listed` reads
MAX_INDEX_READS = 256  # listed indexes `listed` reads for one index


def listed(
    manifest: Mapping[str, Any], registry: OciRegistry, repo: str, *, ref: str = ""
) -> tuple[str, ...]:
    """The digests an index of `repo` lists, then those each index among them lists in turn
    (an index may list indexes: a grandchild deleted leaves the tag naming what no one can
    pull), each once, in the order found; () for a manifest that lists nothing. Only entries
    whose mediaType is an index are read (one gone since lists nothing), so a plain
    multi-platform index costs no read. An index listed MAX_NESTING levels down, or more
    than MAX_INDEX_READS indexes to read (a registry is anyone's: an index of 4 MiB lists
    ~25,000 indexes), is a BadRequest naming `ref` (the tag or digest `manifest` was read
    by), not a shorter list: what it would leave out could be deleted while a tag still
    reaches it."""
    found: dict[str, None] = {}
    level, reads = [manifest], 0
    for depth in range(MAX_NESTING + 1):
        deeper: list[Mapping[str, Any]] = []
        for index in level:
            entries = index.get("manifests") if isinstance(index, Mapping) else None
            for entry in entries if isinstance(entries, list) else ():
                digest = entry.get("digest") if isinstance(entry, Mapping) else None
                if not isinstance(digest, str) or not digest or digest in found:
                    continue
                found[digest] = None
                if entry.get("mediaType") not in INDEXES:
                    continue
                reads += 1
                if reads > MAX_INDEX_READS or depth == MAX_NESTING:
                    sep = "@" if is_pullable_digest(ref) else ":"
                    raise BadRequest(
                        f"{repo}{sep if ref else ''}{ref}: an index lists indexes past "
                        f"{MAX_NESTING} levels or {MAX_INDEX_READS} indexes; nothing it "
                        "reaches is decided on",
                        repository=repo,
                        **({"reference": ref} if ref else {}),
                    )
                with contextlib.suppress(NotFound):  # one gone since lists nothing
                    deeper.append(registry.manifest(repo, digest)[0])
        if not deeper:
            break
        level = deeper
    return tuple(found)


MAX_ANSWER = 4 << 20  # distribution's own limit on a manifest's size
# Tags one repository's listing may hold: a registry an event or a Model names may be
# anyone's, and one whose list never ended (a next link on every page) held the delivery for
# ever, its memory growing with every page
MAX_TAGS = 100_000


# An answer's body, all of it (each read of the socket waits 60 s at most): a registry an
# event or a Model names, trickling its answer a byte at a time, held the delivery's thread
# for as long as it trickled
ANSWER_SECONDS = 120.0


def bounded(resp: Any, limit: int, url: str, *, cut: bool = False) -> bytes:
    """The body of `resp`, read no further than `limit` bytes: PayloadTooLarge when there
    is more (`cut`: those bytes); Unavailable when it does not arrive within ANSWER_SECONDS
    (net.read_before)."""
    from modelhooks.adapters.net import Late, read_before

    try:
        data = read_before(resp, limit if cut else limit + 1, time.monotonic() + ANSWER_SECONDS)
    except Late:
        raise Unavailable(f"{url}: the answer did not arrive within {ANSWER_SECONDS:g} s") from None
    if len(data) > limit:
        raise PayloadTooLarge(f"{url}: the answer is over {limit} bytes")
    return data


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class DistributionRegistry:
    """The OCI distribution API over HTTP(S), with optional basic auth."""

    def __init__(
        self,
        base_url: str,
        *,
        auth: tuple[str, str] | Credentials | RegistryAuth | None = None,
        opener: urllib.request.OpenerDirector | None = None,
        workers: int = 8,
    ) -> None:
        """`auth`: (user, password), `Credentials`, or a `RegistryAuth` shared with other
        clients of this registry (its cached tokens); None: anonymous."""
        import urllib.request  # on first use: a function that never pulls pays nothing

        from modelhooks.adapters.oci.auth import RegistryAuth

        self.base_url = base_url.rstrip("/")
        self._open = (opener or urllib.request.build_opener()).open
        self._tag_delete: bool | None = None  # does DELETE by tag work here? (detected)
        self.workers = workers  # concurrent requests for reading and deleting many
        if isinstance(auth, RegistryAuth):
            self.auth = auth
        else:
            credentials = StaticCredentials(*auth) if isinstance(auth, tuple) else auth
            self.auth = RegistryAuth(self.base_url, credentials, self._open)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        limit: int = MAX_ANSWER,
        cut: bool = False,
        **headers: str,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request. A 401 is answered once with what its challenge asks for (a token
        from the realm, or basic credentials: `RegistryAuth`); refused again, it raises.
        An answer is read up to `limit` bytes, PayloadTooLarge past it: a registry names a
        manifest, an index or a page of tags, never gigabytes (one answering without end
        filled the memory of a process that only asked what a tag names); `cut`: the
        first `limit` bytes are the answer (a blob's range, when the Range was ignored)."""
        url = path if path.startswith("http") else f"{self.base_url}{path}"
        import urllib.error
        import urllib.request

        def send(authorization: str | None) -> tuple[int, dict[str, str], bytes, str]:
            req = urllib.request.Request(url, data=body, method=method)
            for k, v in headers.items():
                req.add_header(k.replace("_", "-"), v)
            if authorization:
                req.add_header("Authorization", authorization)
            try:
                with self._open(req, timeout=60) as resp:
                    found = resp.status, resp.headers, bounded(resp, limit, url, cut=cut)
            except urllib.error.HTTPError as e:
                found = e.code, e.headers, bounded(e, MAX_ANSWER, url, cut=True)  # for a message
            except OSError as e:
                raise Unavailable(f"registry {self.base_url} unreachable", reason=str(e)) from e
            status, got, data = found  # every challenge, should there be several headers
            challenge = ", ".join(got.get_all("WWW-Authenticate") or ())
            return status, dict(got.items()), data, challenge

        sent = self.auth.header(method, url)
        status, got, data, challenge = send(sent)
        if status == 401:
            sent = self.auth.answer(method, url, challenge, sent)
            status, got, data, again = send(sent)
            if status == 401:
                raise self.auth.denied(method, url, again or challenge)
        return status, got, data

    def _check(self, status: int, body: bytes, what: str) -> None:
        if status < 300:
            return
        cls: type[ModelhooksError] = {404: NotFound, 409: Conflict}.get(status, Unavailable)
        if 400 <= status < 500 and status not in (404, 409, 429):
            cls = BadRequest
        raise cls(
            f"registry refused {what}", status=status, body=body[:300].decode(errors="replace")
        )

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str, int]:
        """(manifest JSON, digest, size) of a tag or digest."""
        status, _, body = self.request("GET", f"/v2/{repo}/manifests/{ref}", Accept=_ACCEPT)
        self._check(status, body, f"manifest {repo}:{ref}")
        return json.loads(body), digest_of(body), len(body)

    def blob_range(self, repo: str, digest: str, start: int, length: int) -> bytes:
        status, _, body = self.request(
            "GET",
            f"/v2/{repo}/blobs/{digest}",
            limit=start + length,  # the blob from its start when the Range is ignored
            cut=True,
            Range=f"bytes={start}-{start + length - 1}",
        )
        if status == 416:
            return b""
        self._check(status, body, f"blob {digest}")
        return body[:length] if status == 206 else body[start : start + length]

    def blob_chunks(
        self, repo: str, digest: str, start: int, length: int, chunk_size: int
    ) -> Iterator[bytes]:
        """`blob_range` streamed: ONE ranged GET read a piece of at most `chunk_size` at a
        time (its connection kept alive once read to the end)."""
        if length <= 0:
            return
        url = f"{self.base_url}/v2/{repo}/blobs/{digest}"
        with self._get_streamed(url, Range=f"bytes={start}-{start + length - 1}") as resp:
            status = resp.status
            if status == 416:
                return
            if status >= 300:
                self._check(status, bounded(resp, MAX_ANSWER, url), f"blob {digest}")
            skip = start if status == 200 else 0  # the Range was ignored: the whole blob
            try:
                while length > 0:
                    data = resp.read(min(chunk_size, skip or length))
                    if not data:
                        return
                    if skip:
                        skip -= len(data)
                        continue
                    length -= len(data)
                    yield data
            except OSError as e:
                raise Unavailable(f"registry {self.base_url} failed", reason=str(e)) from e

    def _get_streamed(self, url: str, **headers: str) -> Any:
        """An open GET response (urllib's), its body unread; the 401 challenge answered as
        `request` does."""
        import urllib.error
        import urllib.request

        def send(authorization: str | None) -> Any:
            req = urllib.request.Request(url, method="GET", headers=headers)
            if authorization:
                req.add_header("Authorization", authorization)
            try:
                return self._open(req, timeout=60)
            except urllib.error.HTTPError as e:
                return e
            except OSError as e:
                raise Unavailable(f"registry {self.base_url} unreachable", reason=str(e)) from e

        sent = self.auth.header("GET", url)
        resp = send(sent)
        if resp.status == 401:
            challenge = ", ".join(resp.headers.get_all("WWW-Authenticate") or ())
            resp.close()
            sent = self.auth.answer("GET", url, challenge, sent)
            resp = send(sent)
            if resp.status == 401:
                again = ", ".join(resp.headers.get_all("WWW-Authenticate") or ())
                resp.close()
                raise self.auth.denied("GET", url, again or challenge)
        return resp

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        if self.request("HEAD", f"/v2/{repo}/blobs/{digest}")[0] == 200:
            return digest
        status, headers, body = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        self._check(status, body, "blob upload")
        location = headers.get("Location", "")
        sep = "&" if "?" in location else "?"
        url = location if location.startswith("http") else f"{self.base_url}{location}"
        status, _, body = self.request(
            "PUT", f"{url}{sep}digest={digest}", data, Content_Type="application/octet-stream"
        )
        self._check(status, body, "blob upload")
        return digest

    def push_manifest(self, repo: str, ref: str, manifest: dict[str, Any]) -> str:
        data = json.dumps(manifest, separators=(",", ":")).encode()
        media = str(manifest["mediaType"])
        status, _, body = self.request(
            "PUT", f"/v2/{repo}/manifests/{ref}", data, Content_Type=media
        )
        self._check(status, body, f"manifest push {repo}:{ref}")
        return digest_of(data)

    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]]:
        """Referrers of `digest`: the referrers API (every page: a registry may paginate
        it, as the tag list, and a referrer past the first page — a live adapter, a
        signature — was never seen), else the `sha256-<hex>` fallback tag. BadRequest past
        MAX_TAGS referrers, or for a next page `_next_page` does not follow."""
        listing = f"/v2/{repo}/referrers/{digest}"
        status, headers, body = self.request("GET", listing, Accept=OCI_INDEX)
        if status == 200:  # an empty index may say "manifests": null
            found: dict[str, dict[str, Any]] = {}
            while True:
                page = json.loads(body).get("manifests") or []
                added = {str(m.get("digest")): m for m in page if str(m.get("digest")) not in found}
                found |= added
                if len(found) > MAX_TAGS:
                    raise BadRequest(
                        f"{self.base_url}/{repo}@{digest} has over {MAX_TAGS} referrers"
                    )
                link = _next_link(headers)
                if link is None:
                    return list(found.values())
                path = self._next_page(repo, link, added=len(added), listing=listing)
                status, headers, body = self.request("GET", path, Accept=OCI_INDEX)
                self._check(status, body, f"referrers of {repo}@{digest}")
        try:
            index, _, _ = self.manifest(repo, digest.replace(":", "-"))
        except NotFound:
            return []
        return list(index.get("manifests") or [])

    def tags(self, repo: str, page: int = 1000) -> Iterator[str]:
        """Every tag of `repo`, page by page (the `Link: …; rel="next"` chain); BadRequest
        past MAX_TAGS, for a next page that is not this list's on this registry (it is not
        followed: it would get this registry's credentials), and for a page that adds no
        tag yet links on (empty, or seen already: a loop, which went on for ever). A list
        cut short is never taken for the whole: cleanup would miss a protected tag."""
        path: str | None = f"/v2/{repo}/tags/list?n={page}"
        seen: set[str] = set()
        while path:
            status, headers, body = self.request("GET", path)
            if status == 404:
                return  # no such repository: no tags
            self._check(status, body, f"tags of {repo}")
            tags = [t for t in json.loads(body).get("tags") or [] if t not in seen]
            seen.update(tags)
            if len(seen) > MAX_TAGS:
                raise BadRequest(
                    f"{self.base_url}/{repo} lists more than {MAX_TAGS} tags",
                    repository=repo,
                    limit=MAX_TAGS,
                )
            yield from tags
            path = _next_link(headers)
            if path is not None:
                path = self._next_page(repo, path, added=len(tags), listing=f"/v2/{repo}/tags/list")

    def _next_page(self, repo: str, link: str, *, added: int, listing: str) -> str:
        """The path of the next page `link` names of `listing` (a tag list, a referrers
        list), or BadRequest saying why it is not followed."""
        from urllib.parse import urlsplit

        base, parts = urlsplit(self.base_url), urlsplit(link)
        elsewhere = parts.scheme or parts.netloc
        what = "tags" if listing.endswith("/tags/list") else "referrers"
        if elsewhere and (parts.scheme, parts.netloc) != (base.scheme, base.netloc):
            why = "is on another host"
        elif parts.path != f"{base.path}{listing}":
            why = f"is not this repository's {what} list"
        elif not added:
            why = f"comes after a page that adds no {what[:-1]}"
        else:
            return listing + (f"?{parts.query}" if parts.query else "")
        raise BadRequest(
            f"{self.base_url}/{repo}: the next page of its {what}, {link[:200]!r}, {why}",
            repository=repo,
        )

    def resolve(self, repo: str, tag: str) -> str | None:
        """The digest `tag` names now, or None when there is no such tag."""
        status, headers, body = self.request("HEAD", f"/v2/{repo}/manifests/{tag}", Accept=_ACCEPT)
        if status == 404:
            return None
        self._check(status, body, f"manifest {repo}:{tag}")
        found = _header(headers, "Docker-Content-Digest")
        return found or self.manifest(repo, tag)[1]

    def history(self, repo: str) -> tuple[list[Tag], list[Manifest]]:
        """Every tag with its digest and push time (the manifest's
        org.opencontainers.image.created annotation, when it has one), one manifest read
        per tag, `workers` at a time. The distribution API cannot list untagged manifests."""
        from concurrent.futures import ThreadPoolExecutor

        def read(name: str) -> Tag | None:
            try:
                manifest, digest, _ = self.manifest(repo, name)
            except NotFound:  # deleted since it was listed (a concurrent run): not a tag
                return None
            return Tag(name, digest, _created(manifest), listed(manifest, self, repo, ref=name))

        with ThreadPoolExecutor(self.workers) as pool:
            found = list(pool.map(read, list(self.tags(repo))))
        return [t for t in found if t is not None], []

    def delete_manifest(self, repo: str, digest: str) -> None:
        """Delete a manifest by digest; deleting what is gone succeeds. Delete its tags
        first (`delete_tag`): not every registry drops them with it (cue-labs' does not).
        A 5xx to a DELETE racing another of the same manifest (distribution v3 answers 500
        UNKNOWN to the one that lost) is a success when the manifest is gone by then."""
        path = f"/v2/{repo}/manifests/{digest}"
        status, _, body = self.request("DELETE", path)
        if status >= 500 and self.request("HEAD", path, Accept=_ACCEPT)[0] == 404:
            return
        if status != 404:
            self._check(status, body, f"manifest delete {repo}@{digest}")

    def delete_manifests(self, repo: str, digests: Sequence[str]) -> None:
        """`delete_manifest` for each, `workers` at a time."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            list(pool.map(lambda d: self.delete_manifest(repo, d), digests))

    def delete_tag(self, repo: str, tag: str) -> bool:
        """Remove `tag`, keeping the manifest it names. Registries that delete by tag do it
        (distribution v3, zot, OCI 1.1); the others (distribution 2.8: 400) get the usual
        workaround: the tag is moved to an empty manifest, which is then deleted by digest
        (one well-known manifest, `UNTAG_PLACEHOLDER`, that the notification translators
        ignore; concurrent untags may share it: each delete drops every tag it holds). A
        tag that is gone already succeeds. Whether this call removed it: a tag DELETE
        answered 404 did not; with the workaround, a tag this process found gone did not
        (another process's untag at the same moment may be told by both)."""
        if self._tag_delete is not False:
            # one at a time per tag in this process: distribution v3 answers 202 to two
            # DELETEs of one tag at once, and both runs told the deletion
            with _TAG_STRIPES[hash((self.base_url, repo, tag)) % len(_TAG_STRIPES)]:
                status, _, body = self.request("DELETE", f"/v2/{repo}/manifests/{tag}")
            if status in (200, 202, 404):
                self._tag_delete = True
                return status != 404
            if status not in (400, 405, 501):
                self._check(status, body, f"tag delete {repo}:{tag}")
            self._tag_delete = False
        moved = False
        with _UNTAG:  # one at a time: interleaved, a placeholder delete can miss a tag
            for _ in range(3):  # … of another process: look again, and once more if so
                if self.resolve(repo, tag) is None:
                    return moved
                self.push_blob(repo, b"{}")
                status, _, body = self.request(
                    "PUT",
                    f"/v2/{repo}/manifests/{tag}",
                    UNTAG_PLACEHOLDER,
                    Content_Type=OCI_MANIFEST,
                )
                self._check(status, body, f"manifest push {repo}:{tag}")
                moved = True
                self.delete_manifest(repo, UNTAG_PLACEHOLDER_DIGEST)
        if self.resolve(repo, tag) is not None:
            raise Unavailable(f"registry {self.base_url} kept tag {repo}:{tag}; try again")
        return moved

    def has_referrers_api(self, repo: str, digest: str) -> bool:
        return self.request("GET", f"/v2/{repo}/referrers/{digest}", Accept=OCI_INDEX)[0] == 200


_UNTAG = threading.Lock()
_TAG_STRIPES = tuple(threading.Lock() for _ in range(64))


_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPO = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)


def _created(manifest: dict[str, Any]) -> datetime | None:
    """The push time a manifest declares (a time zone is required), or None."""
    created = (manifest.get("annotations") or {}).get(CREATED)
    try:
        at = datetime.fromisoformat(created) if isinstance(created, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo else None


def _header(headers: dict[str, str], name: str) -> str:
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), "")


def _next_link(headers: dict[str, str]) -> str | None:
    """The target of `Link: </v2/…?last=x&n=y>; rel="next"`, if any, among the links the
    header lists (`<…>; rel="prev", <…>; rel="next"`: the first was taken, a page back),
    its rel one relation type or a space-separated list of them (`rel="prev next"`, RFC 8288;
    compared without case)."""
    for link in re.findall(r"<([^>]*)>\s*((?:;[^,<]*)*)", _header(headers, "Link")):
        target, params = link
        rel = re.search(r';\s*rel\s*=\s*(?:"([^"]*)"|([^\s;"]+))', params, re.IGNORECASE)
        if rel and "next" in (rel[1] if rel[1] is not None else rel[2]).lower().split():
            return target.strip() or None
    return None


def parse_uri(uri: str) -> tuple[str, str, str]:
    """(host, repository, tag or digest) of `oci://host[:port]/repo[:tag|@digest]`, each as
    the distribution spec's grammar allows (lower-case path components, tags of at most 128
    word characters, sha256 or sha512 digests in lower-case hex of their size:
    `is_pullable_digest`); BadRequest naming the part otherwise.

    >>> parse_uri("oci://r.example:5000/models/bert:v1@sha256:" + "a" * 64)[:2]
    ('r.example:5000', 'models/bert')
    """
    host, _, rest = uri.removeprefix("oci://").partition("/")
    if "@" in rest:  # `repo:tag@digest` names the digest (the tag is informative)
        repo, _, ref = rest.partition("@")
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rpartition(":")[0]
        valid_ref = is_pullable_digest(ref)
    elif ":" in rest.rsplit("/", 1)[-1]:
        repo, _, ref = rest.rpartition(":")
        valid_ref = bool(_TAG.fullmatch(ref))
    else:
        repo, ref, valid_ref = rest, "latest", True
    if not host or not repo:
        raise BadRequest(f"{uri!r}: expected oci://host/repository[:tag|@digest]")
    host_ok = _HOST.fullmatch(host) and is_url_host(host)
    for part, ok in (("host", host_ok), ("repository", _REPO.fullmatch(repo))):
        if not ok:
            raise BadRequest(f"{uri!r}: not a valid registry {part}", field=part)
    if not valid_ref:
        raise BadRequest(
            f"{uri!r}: not a valid tag or digest (a digest is sha256:<64> or sha512:<128> "
            "lower-case hex digits)",
            field="reference",
        )
    return host, repo, ref
