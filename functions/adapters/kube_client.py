"""One way to reach a Kubernetes API server, for every adapter family that needs one (the
families may not import each other): a kubeconfig file when one is configured, else the
pod's in-cluster configuration. The `kubernetes` client is imported here, on first use.

`request` is the hot path's call: one JSON request through the client's own connection
pool, TLS settings and credentials (its token refresh included), without the generated API
methods, whose argument validation (pydantic, its schema built on each method's first call),
parameter serialization and response deserialization cost more CPU than the request itself
(about a third of a burst of Models' CPU in `serve`).

>>> api = connect("/etc/modelhooks/kubeconfig", variable="MODELHOOKS_REGISTRY_KUBECONFIG")  # doctest: +SKIP
>>> request(api, "GET", "/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/bert")["spec"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from modelhooks.core.errors import ConfigError, Unavailable
from modelhooks.core.extras import importing

__all__ = ["check_kubeconfig", "client_from", "connect", "in_cluster", "path", "request"]


def in_cluster(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a pod (the in-cluster configuration can work)."""
    return bool((os.environ if env is None else env).get("KUBERNETES_SERVICE_HOST"))


def check_kubeconfig(kubeconfig: str, variable: str) -> None:
    """At start-up: a configured kubeconfig must exist (ConfigError naming `variable`)."""
    if kubeconfig and not Path(kubeconfig).is_file():
        raise ConfigError(f"{variable}={kubeconfig}: no such file")


def connect(kubeconfig: str, *, variable: str, needs: str) -> Any:
    """An `ApiClient` through `kubeconfig`, else the in-cluster configuration. ConfigError
    when the client is not installed (`needs` says for what); Unavailable when the
    configuration cannot be used (a token file not mounted yet is worth a retry)."""
    with importing("k8s", needs):
        from kubernetes import client, config
    where = f"{variable}={kubeconfig}" if kubeconfig else "in-cluster config"
    try:
        if kubeconfig:
            return client_from(kubeconfig)
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise Unavailable(f"no usable Kubernetes configuration ({where}): {exc}") from None


def client_from(kubeconfig: str | None) -> Any:
    """The client's `new_client_from_config`, a file that is no kubeconfig a ValueError
    saying why without quoting it (a kubeconfig holds tokens): YAML that does not parse, is
    nested past the parser's recursion, is not UTF-8, or has another shape (a list, a
    string, `clusters: 5`) went through as what the YAML parser or the client raised (an
    internal error, exit 70, for `watch-models --kubeconfig`), the parser's quoting the line."""
    import yaml
    from kubernetes import config

    try:
        return config.new_client_from_config(config_file=kubeconfig)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ValueError(f"not YAML: {exc.problem}{at}") from None
    except yaml.YAMLError as exc:  # the reader's: a character YAML does not take
        raise ValueError(f"not YAML: {getattr(exc, 'reason', '') or type(exc).__name__}") from None
    except RecursionError:
        raise ValueError("not YAML: nested too deep") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except (TypeError, AttributeError, KeyError) as exc:
        raise ValueError(f"not a kubeconfig ({type(exc).__name__}: its shape)") from None


def path(group: str, version: str, plural: str, name: str = "", *, namespace: str = "") -> str:
    """The API path of `plural` (a core resource when `group` is ""), cluster-wide when
    `namespace` is "", of the object `name` (and a subresource: "name/status") when given.

    >>> path("modelhooks.dev", "v1alpha1", "models", "bert/status", namespace="ml")
    '/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/bert/status'
    """
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{quote(name)}" if name else "")


_TARGET = "_modelhooks_target"  # (until, host, headers), kept on the ApiClient
AUTH_TTL = 1.0  # s the credentials the client's refresh hook gave are used again


def _target(api_client: Any) -> tuple[str, dict[str, str]]:
    """The host and headers (credentials included) of `api_client`'s requests, read again
    through its refresh hook at most every AUTH_TTL seconds: the hook a kubeconfig's client
    has reloads the whole user entry on each call (~0.1 ms, most of a request's own CPU)."""
    now = time.monotonic()
    kept = api_client.__dict__.get(_TARGET)
    if kept is not None and now < kept[0]:
        return kept[1], kept[2]
    config = api_client.configuration
    headers = {**api_client.default_headers, "Accept": "application/json"}
    bearer = config.auth_settings().get("BearerToken")  # refreshed by the client's hook
    if bearer and bearer.get("value"):
        headers[bearer["key"]] = bearer["value"]
    api_client.__dict__[_TARGET] = (now + AUTH_TTL, config.host, headers)
    return config.host, headers


def request(
    api_client: Any,
    method: str,
    url_path: str,
    *,
    query: Mapping[str, str | int | None] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    timeout: float = 10.0,
) -> Any:
    """The JSON answer to one request through `api_client` (the kubernetes client's
    `ApiClient`: its host, its pool with the TLS and proxy settings, its credentials with
    their refresh). A non-2xx answer raises the client's `ApiException` (status, reason,
    body), as its generated methods do. Only what every client version since 29 has is
    used (`configuration.auth_settings()`, `rest_client.pool_manager`): `call_api`'s
    signature changed in 37."""
    from kubernetes.client.exceptions import ApiException

    host, kept = _target(api_client)
    headers, data = dict(kept), None
    if body is not None:
        headers["Content-Type"] = content_type
        data = json.dumps(body).encode()  # JSON is YAML too (server-side apply)
    params = {k: v for k, v in (query or {}).items() if v is not None}
    url = host + url_path + (f"?{urlencode(params)}" if params else "")
    answer = api_client.rest_client.pool_manager.request(
        method, url, body=data, headers=headers, timeout=timeout
    )
    if answer.status == 401:  # a rotated or expired token: the next request reads it again
        api_client.__dict__.pop(_TARGET, None)
    if not 200 <= answer.status <= 299:
        error = ApiException(status=answer.status, reason=answer.reason)
        error.body = answer.data.decode(errors="replace")
        error.headers = answer.headers
        raise error
    return json.loads(answer.data)
