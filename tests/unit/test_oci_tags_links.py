"""A registry's tag list links its next page (`Link: <…>; rel="next"`), and the registry
may be anyone's: pages that add nothing (empty, or a link back to a page seen) went on
for ever — MAX_TAGS bounds only the tags — and a link to another host was followed with
this registry's credentials (basic ones in the clear). Such a list is refused now: an
incomplete one would let cleanup miss a protected tag."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import BadRequest
from tests.servers.loopback import serving


class _Hostile(http.server.BaseHTTPRequestHandler):
    """`/v2/m/tags/list`: page 0 lists t0, then `mode` says what the next pages are."""

    mode: ClassVar[str] = "empty"
    elsewhere: ClassVar[str] = ""  # the other host's base URL
    rel: ClassVar[str] = '"next"'  # the next link's rel
    seen: ClassVar[list[tuple[str, str | None]]] = []  # (path, Authorization)

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        page = int((parse_qs(urlsplit(self.path).query).get("page") or ["0"])[0])
        tags = [f"t{page}"] if page == 0 or self.mode in ("cycle", "prev-and-next") else []
        link = {
            "empty": f"/v2/m/tags/list?page={page + 1}",  # empty pages without end
            "cycle": f"/v2/m/tags/list?page={(page + 1) % 2}",  # page 0, 1, 0, 1, …
            "elsewhere": f"{self.elsewhere}/v2/m/tags/list?page=1",
            "other-repo": "/v2/private/tags/list?page=1",
            "prev-and-next": f"/v2/m/tags/list?page={page + 1}",
        }[self.mode]
        if (self.mode in ("elsewhere", "other-repo") and page == 1) or len(self.seen) > 50:
            link = ""  # the end (past 50 pages: a client that would go on for ever)
        if self.mode == "prev-and-next":  # a link back first (page 3 is the last)
            back = f'/v2/m/tags/list?page={max(page - 1, 0)}>; rel="prev", <'
            link = "" if page == 3 else (back if page else "") + link
        body = json.dumps({"name": "m", "tags": tags}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if link:
            self.send_header("Link", f"<{link}>; rel={self.rel}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    _Hostile.seen, _Hostile.rel = [], '"next"'
    with serving(_Hostile) as url:
        yield url


@pytest.mark.parametrize("mode", ["empty", "cycle"])
def test_pages_that_add_no_tag_end_the_listing_refused(hostile: str, mode: str) -> None:
    _Hostile.mode = mode
    with pytest.raises(BadRequest, match="adds no tag"):
        list(DistributionRegistry(hostile).tags("m"))
    assert len(_Hostile.seen) <= 3


@pytest.mark.parametrize("mode", ["elsewhere", "other-repo"])
def test_a_link_off_the_repositorys_list_is_refused_unfollowed(hostile: str, mode: str) -> None:
    with serving(_Hostile) as other:  # the same server, reached under another name
        _Hostile.mode, _Hostile.elsewhere = mode, other.replace("127.0.0.1", "localhost")
        registry = DistributionRegistry(hostile, auth=("user", "hunter2"))
        with pytest.raises(BadRequest, match="next page"):
            list(registry.tags("m"))
    assert [path for path, _ in _Hostile.seen] == ["/v2/m/tags/list?n=1000"]


def test_the_next_link_among_several_is_followed(hostile: str) -> None:
    """`Link: <…page 0>; rel="prev", <…page 2>; rel="next"`: the first link was taken, a
    page back (read again without end, now refused as adding no tag)."""
    _Hostile.mode = "prev-and-next"
    assert list(DistributionRegistry(hostile).tags("m")) == ["t0", "t1", "t2", "t3"]


@pytest.mark.parametrize("rel", ['"prev next"', '"next last"', '" Next "', "next"])
def test_a_next_link_among_its_relation_types_is_followed(hostile: str, rel: str) -> None:
    """RFC 8288: a link's rel may be a space-separated list of relation types, compared
    without case; `rel="prev next"` was not taken as the next page (the list ended at t0)."""
    _Hostile.mode, _Hostile.rel = "prev-and-next", rel
    assert list(DistributionRegistry(hostile).tags("m")) == ["t0", "t1", "t2", "t3"]


class _Referrers(http.server.BaseHTTPRequestHandler):
    """`/v2/m/referrers/<digest>`: three pages of two referrers each, linked, as a registry
    may paginate them (the last one, say, a live adapter of the model)."""

    def do_GET(self) -> None:
        page = int((parse_qs(urlsplit(self.path).query).get("page") or ["0"])[0])
        listed = [{"digest": f"sha256:{page}{n}", "mediaType": "m"} for n in range(2)]
        body = json.dumps({"schemaVersion": 2, "manifests": listed}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        if page < 2:
            path = urlsplit(self.path).path
            self.send_header("Link", f'<{path}?page={page + 1}>; rel="next"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_every_page_of_referrers_is_read() -> None:
    with serving(_Referrers) as url:
        found = DistributionRegistry(url).referrers("m", "sha256:" + "a" * 64)
    assert [r["digest"] for r in found] == [f"sha256:{p}{n}" for p in range(3) for n in range(2)]
