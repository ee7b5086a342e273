from __future__ import annotations

import pytest

from functions.errors import ConfigError, Unauthenticated
from functions.routes import RouteAuth

AUTH = {"Authorization": "Bearer minio-token"}


def test_a_route_overrides_the_default() -> None:
    auth = RouteAuth.from_settings(
        "bearer:token=default-token", "/minio-events=bearer:token=minio-token"
    )
    assert auth.check("/minio-events", AUTH, b"").scheme == "bearer"
    assert auth.check("/minio-events/", AUTH, b"").scheme == "bearer"
    with pytest.raises(Unauthenticated):
        auth.check("/", AUTH, b"")  # the default wants the other token
    assert auth.check("/", {"Authorization": "Bearer default-token"}, b"").scheme == "bearer"


def test_open_default_with_a_guarded_route() -> None:
    auth = RouteAuth.from_settings("none", "/hooks=bearer:token=t")
    assert auth.check("/anything", {}, b"").scheme == "none"
    with pytest.raises(Unauthenticated):
        auth.check("/hooks", {}, b"")


@pytest.mark.parametrize("bad", ["minio=bearer:token=x", "/x=", "/x"])
def test_bad_route_specs_name_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="MODELHOOKS_INGRESS_ROUTE_AUTH"):
        RouteAuth.from_settings("none", bad)
