"""Precedence is exactly as documented: flag > environment > config file > default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import describe, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults(tmp_path: Path) -> None:
    s = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
    assert s.layout.marker == "_SUCCESS"
    assert s.layout.pattern == "models/{name}/{version}/"
    assert s.ingress.max_body_bytes == 3 << 20  # the API server's largest request
    assert s.registry.backend == "sqlite"


def test_file_beats_default(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "layout:\n  marker: FROM_FILE\n")
    assert load_settings(env={}, config_file=cfg).layout.marker == "FROM_FILE"


def test_env_beats_file(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "layout:\n  marker: FROM_FILE\n")
    s = load_settings(env={"MODELHOOKS_LAYOUT_MARKER": "FROM_ENV"}, config_file=cfg)
    assert s.layout.marker == "FROM_ENV"


def test_flag_beats_env_and_file(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "layout:\n  marker: FROM_FILE\n")
    s = load_settings(
        {"layout.marker": "FROM_FLAG"},
        env={"MODELHOOKS_LAYOUT_MARKER": "FROM_ENV"},
        config_file=cfg,
    )
    assert s.layout.marker == "FROM_FLAG"


def test_config_file_from_env_var_and_from_home(tmp_path: Path) -> None:
    cfg = write(tmp_path / "other.yaml", "ingress:\n  max_body_bytes: 10\n")
    assert load_settings(env={"MODELHOOKS_CONFIG": str(cfg)}).ingress.max_body_bytes == 10
    write(tmp_path / "config.yaml", "ingress:\n  max_body_bytes: 20\n")
    assert load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}).ingress.max_body_bytes == 20


def test_platform_variables_port_and_k_sink() -> None:
    s = load_settings(env={"PORT": "9090", "K_SINK": "http://broker/"})
    assert s.serve.port == 9090
    assert s.router.sink == "http://broker/"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MODELHOOKS_INGRESS_MAX_BODY_BYTES": "lots"}, "MODELHOOKS_INGRESS_MAX_BODY_BYTES"),
        ({"MODELHOOKS_INGRESS_MAX_BODY_BYTES": "0"}, "MODELHOOKS_INGRESS_MAX_BODY_BYTES"),
        ({"MODELHOOKS_LAYOUT_PATTERN": "models/{name}/"}, "MODELHOOKS_LAYOUT_PATTERN"),
        ({"MODELHOOKS_STORE_BACKEND": "ftp"}, "MODELHOOKS_STORE_BACKEND"),
        ({"PORT": "70000"}, "PORT"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    assert named in str(err.value)


@pytest.mark.parametrize(
    "hosts",
    [
        "http://registry.ml.svc:5000",  # a URL
        "registry.ml.svc:5000/models",  # a path
        "*.ml.svc.cluster.local",  # a wildcard (oci.credential_hosts takes one; this does not)
        "registry.ml.svc:5000 10.0.0.7",  # a space, not a comma
        "10.0.0.7:99999",  # no port
    ],
)
def test_an_allowed_host_that_could_never_match_names_the_variable(hosts: str) -> None:
    """store.allowed_hosts is compared as host or host:port with the host an event names:
    a value written otherwise allowed nothing, silently, and every event naming the
    in-cluster registry was refused 403 'loopback or non-public address'."""
    var = "MODELHOOKS_STORE_ALLOWED_HOSTS"
    with pytest.raises(ConfigError, match=re.escape(f"{var}={hosts!r} (environment)")) as err:
        load_settings(env={var: hosts})
    assert "host or host:port" in str(err.value)
    allowed = " Registry.ml.svc:5000, 10.0.0.7:5000,[fd00::1]:5000,minio_1 ,"
    assert load_settings(env={var: allowed}).store.allowed_hosts == allowed


@pytest.mark.parametrize("host", ["http://zot.example:5000", "zot.example:5000/v2", "zot ex"])
def test_a_zot_registry_host_that_is_none_names_the_variable(host: str) -> None:
    """ingress.registry_host makes every zot event's oci://HOST/…: one a URL or a path was
    taken at start-up, and each zot event was then refused 400 ('zot event: … is not a
    registry host', naming no setting) and dead-lettered."""
    var = "MODELHOOKS_INGRESS_REGISTRY_HOST"
    with pytest.raises(ConfigError, match=re.escape(f"{var}={host!r} (environment)")) as err:
        load_settings(env={var: host})
    assert "registry host" in str(err.value)
    assert load_settings(env={var: "zot.example:5000"}).ingress.registry_host == "zot.example:5000"


def test_kubeflow_backend_needs_a_url() -> None:
    with pytest.raises(ConfigError, match=r"registry\.url: the kubeflow backend needs a URL"):
        load_settings(env={"MODELHOOKS_REGISTRY_BACKEND": "kubeflow"})
    s = load_settings(
        env={"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": "http://mr:8080"}
    )
    assert (s.registry.backend, s.registry.url) == ("kubeflow", "http://mr:8080")


def test_bad_flag_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--router-max-depth"):
        load_settings({"router.max_depth": "0"}, env={})


def test_bad_file_value_names_the_key_and_file(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "router:\n  max_depth: deep\n")
    with pytest.raises(ConfigError, match=r"router\.max_depth in .*c\.yaml"):
        load_settings(env={}, config_file=cfg)


def test_unknown_key_in_file_is_an_error(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.yaml", "layout:\n  markr: X\n")
    with pytest.raises(ConfigError, match="markr"):
        load_settings(env={}, config_file=cfg)


def test_every_setting_has_env_flag_and_description() -> None:
    specs = list(describe())
    assert len({s.env for s in specs}) == len(specs)
    assert len({s.flag for s in specs}) == len(specs)
    assert all(s.description for s in specs)


def test_modelhooks_settings_never_prints_a_literal_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhooks.cli import main

    monkeypatch.setenv("MODELHOOKS_REGISTRY_TOKEN", "s3cr3t-tok")
    monkeypatch.setenv("MODELHOOKS_INGRESS_AUTH", "hmac:secret=hunter2,secret=env:OTHER")
    assert main(["settings", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "s3cr3t-tok" not in out and "hunter2" not in out
    assert "secret=env:OTHER" in out  # a reference is not a secret: it stays readable


def test_an_invalid_choice_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"one of: 'sqlite', 'kubeflow'"):
        load_settings({"registry.backend": "foo"}, env={})


def test_usage_errors_are_short_and_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    from modelhooks.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["replay", "samples", "--bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 2
    assert err.startswith("modelhooks replay: error: unrecognized arguments: --bogus")
