"""A registry an event or a Model names may be anyone's: one whose tag list never ends (a
`Link: rel="next"` on every page, new tags each time or the same page again) held prune's
delivery for ever, its memory growing with every page. The listing stops at MAX_TAGS now."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from modelhooks.adapters.oci.distribution import MAX_TAGS, DistributionRegistry
from modelhooks.core.errors import BadRequest
from tests.servers.loopback import serving


class _Endless(http.server.BaseHTTPRequestHandler):
    """`/v2/m/tags/list`: 1000 new tags a page and a link to the next, for ever (or, with
    `same`, the same page and link again)."""

    same: ClassVar[bool] = False
    pages: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        last = 0 if self.same else int((query.get("last") or ["0"])[0])
        self.pages.append(self.path)
        body = json.dumps({"name": "m", "tags": [f"t{last + i}" for i in range(1, 1001)]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Link", f'</v2/m/tags/list?n=1000&last={last + 1000}>; rel="next"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(params=[False, True], ids=["new-pages", "same-page"])
def endless(request: pytest.FixtureRequest) -> Iterator[str]:
    _Endless.same, _Endless.pages = request.param, []
    with serving(_Endless) as url:
        yield url


def test_a_tag_list_that_never_ends_is_refused_past_max_tags(endless: str) -> None:
    registry = DistributionRegistry(endless)
    seen = 0
    refusal = "adds no tag" if _Endless.same else f"more than {MAX_TAGS} tags"
    with pytest.raises(BadRequest, match=refusal):  # the same page: at its second reading
        for _ in registry.tags("m"):
            seen += 1
            assert seen <= 2 * MAX_TAGS, "the listing went on past any bound"
    assert seen <= MAX_TAGS
    assert len(_Endless.pages) <= MAX_TAGS // 1000 + 1
