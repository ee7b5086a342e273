"""A configured endpoint's pool (endpoints.endpoint_pool) takes its proxy from the environment
as requests does, without importing requests or urllib3 (a cold start's first GCS listing
paid for them):
the same proxy as requests' own functions for every environment and URL below."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from requests.utils import get_auth_from_url, get_environ_proxies, select_proxy

from modelhooks.adapters.net import _credentials, environment_proxy

VARIABLES = [f"{scheme}_proxy" for scheme in ("http", "https", "all", "no")]

ENVIRONMENTS: list[dict[str, str]] = [
    {},
    {"HTTP_PROXY": "http://proxy:3128"},
    {"HTTPS_PROXY": "http://u:p%40ss@proxy:3128", "HTTP_PROXY": "proxy:8080"},
    {"ALL_PROXY": "socks5://proxy:1080"},
    {"http_proxy": "http://lower:1", "HTTP_PROXY": "http://upper:2"},
    {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "*"},
    {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"},
    {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".example.com, registry:8080"},
    {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.0/8,127.0.0.1"},
    {"HTTP_PROXY": "http://proxy:3128", "no_proxy": "10.1.2.0/33,192.168.0.0/16"},
    {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "xample.com,,"},
    {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "[::1],localhost"},
]

URLS = [
    "http://example.com",
    "https://storage.example.com/storage/v1",
    "http://registry:8080/api",
    "http://registry:9090/api",
    "http://10.2.3.4:8080",
    "http://127.0.0.1:4443",
    "http://192.168.7.7",
    "http://localhost:80",
    "http://[::1]:8080",
]


@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=str)
def test_the_proxy_is_the_one_requests_takes(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean(monkeypatch)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    for url in URLS:
        expected = select_proxy(url, get_environ_proxies(url))
        assert environment_proxy(url) == expected, url


@pytest.mark.parametrize(
    "proxy",
    [
        "http://proxy:3128",
        "http://user:pw@proxy:3128",
        "http://us%3Aer:p%40ss@proxy:3128",
        "http://user@proxy:3128",
        "socks5://u:@proxy:1080",
    ],
)
def test_the_proxy_credentials_are_the_ones_requests_reads(proxy: str) -> None:
    assert _credentials(proxy) == get_auth_from_url(proxy)


def test_an_endpoint_pool_imports_neither_requests_nor_urllib3() -> None:
    """Nor certifi: its bundle is looked up by the first https connection."""
    code = (
        "import sys; from modelhooks.adapters.endpoints import endpoint_pool; "
        "endpoint_pool('https://storage.googleapis.com'); "
        "endpoint_pool('http://registry:8080/api'); "
        "late = {'requests', 'urllib3', 'certifi'} & set(sys.modules); assert not late, late"
    )
    env = {"PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://proxy:3128"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_every_combination_of_the_variables_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "HTTP_PROXY": (None, "http://p:1"),
        "ALL_PROXY": (None, "http://a:2"),
        "NO_PROXY": (None, "example.com", "127.0.0.0/8", "*"),
    }
    _clean(monkeypatch)
    for combination in itertools.product(*values.values()):
        for name, value in zip(values, combination, strict=True):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        for url in URLS:
            expected = select_proxy(url, get_environ_proxies(url))
            assert environment_proxy(url) == expected, (combination, url)


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*VARIABLES, *(v.upper() for v in VARIABLES)):
        monkeypatch.delenv(name, raising=False)
