"""Settings a user gets wrong: each refused at start-up with a ConfigError naming the
variable or the file's key, never accepted to fail at the first delivery or to hang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import FOREVER, SettingSpec, describe, load_settings
from modelhooks.events import samples

DURATIONS = [s for s in describe() if s.description.startswith("seconds")]


def test_the_durations_are_found() -> None:
    names = {s.name for s in DURATIONS}
    assert {"ingress.max_future_skew", "router.timeout", "serve.read_timeout"} <= names
    assert len(DURATIONS) == 9


@pytest.mark.parametrize("value", ["inf", "1e20", str(FOREVER + 1)])
@pytest.mark.parametrize("spec", DURATIONS, ids=lambda s: s.name)
def test_an_endless_duration_is_refused_naming_the_variable(spec: SettingSpec, value: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid setting {spec.env}="):
        load_settings(env={spec.env: value})


def test_the_longest_future_skew_still_lets_deliveries_in(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ingress.max_future_skew=inf was taken, and every delivery answered 500 (a timedelta
    overflowed): a duration's bound is one its consumers take."""
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    monkeypatch.setenv("MODELHOOKS_INGRESS_MAX_FUTURE_SKEW", str(FOREVER))
    client = create_app(build().broker()).test_client()
    body = json.dumps(samples.load("canonical-artifact-pushed"))
    answer = client.post("/", data=body, headers={"Content-Type": "application/cloudevents+json"})
    assert answer.status_code == 200, answer.get_data(as_text=True)


def _bomb(levels: int) -> str:
    """A config of under 1 KB whose aliases make mappings of 9**levels leaves."""
    lines = ["a0: &a0 {" + ", ".join(f"x{j}: 1" for j in range(9)) + "}"]
    for i in range(1, levels):
        refs = ", ".join(f"k{j}: *a{i - 1}" for j in range(9))
        lines.append(f"a{i}: &a{i} {{{refs}}}")
    return "\n".join(lines) + "\nserve:\n  port: 1\n"


def _settings_cli(config: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`modelhooks settings --config CONFIG` in a process of its own (killed past 30 s)."""
    modelhooks = Path(sys.executable).with_name("modelhooks")
    return subprocess.run(
        [str(modelhooks), "settings", "--config", str(config), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_config_of_aliases_nesting_a_billion_leaves_is_refused_at_once(home: Path) -> None:
    """Every leaf of the file was walked before any was checked: 1 KB hung start-up."""
    bomb = home.parent / "bomb.yaml"
    bomb.write_text(_bomb(9))
    assert bomb.stat().st_size < 1024
    done = _settings_cli(bomb, home)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"config_error: invalid setting a0 in {bomb}: "), done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_section_is_named_with_its_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("serv:\n  port: 1\n")
    with pytest.raises(ConfigError, match=f"invalid setting serv in {config}: "):
        load_settings(env={}, config_file=config)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("# " + "x" * (2 << 20) + "\nserve:\n  port: 1\n", r"is over 1048576 bytes"),
        ("[" * 100_000, "nested too deep"),  # an internal error (RecursionError), exit 70
    ],
    ids=["2 MB", "nested"],
)
def test_a_config_file_that_cannot_be_one_is_refused_unread(
    tmp_path: Path, content: str, reason: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(content)
    with pytest.raises(ConfigError, match=f"config file {config}.*{reason}"):
        load_settings(env={}, config_file=config)


def test_a_config_file_that_never_ends_is_read_bounded(tmp_path: Path) -> None:
    """`--config /dev/zero` was read whole: memory without bound until the OOM killer."""
    endless = tmp_path / "config.yaml"
    endless.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="is over 1048576 bytes: not a config file"):
        load_settings(env={}, config_file=endless)


@pytest.mark.parametrize(
    "text",
    [
        "serve:\n  port: 1\n  threads: 2\nlayout:\n  marker: X\nserve:\n  port: 3\n",
        "serve:\n  threads: 2\n  threads: 4\n",
    ],
    ids=["section", "setting"],
)
def test_a_key_given_twice_in_the_config_file_is_refused(tmp_path: Path, text: str) -> None:
    """PyYAML keeps the last: a second `serve:` dropped the first's threads unsaid."""
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=r"given twice \(first on line \d\)") as err:
        load_settings(env={}, config_file=config)
    assert str(config) in str(err.value)


def test_a_merge_key_is_no_key_given_twice(tmp_path: Path) -> None:
    """YAML's `<<` gives defaults the mapping's own keys override: not a duplicate."""
    config = tmp_path / "c.yaml"
    config.write_text("serve:\n  <<: {threads: 2, port: 9}\n  threads: 4\n")
    serve = load_settings(env={}, config_file=config).serve
    assert (serve.threads, serve.port) == (4, 9)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"K_SINK": "garbage"}, "K_SINK"),
        ({"K_SINK": "ftp://broker/"}, "K_SINK"),
        (
            {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": "mr:8080"},
            "MODELHOOKS_REGISTRY_URL",
        ),
        (
            {"MODELHOOKS_STORE_S3_ENDPOINT_URL": "http://minio:99999"},
            "MODELHOOKS_STORE_S3_ENDPOINT_URL",
        ),
        (
            {"MODELHOOKS_STORE_S3_ENDPOINT_URL": "http://minio:9000\n"},
            "MODELHOOKS_STORE_S3_ENDPOINT_URL",
        ),
        (
            {"MODELHOOKS_OCI_ARTIFACT_REGISTRY_ENDPOINT": "garbage"},
            "MODELHOOKS_OCI_ARTIFACT_REGISTRY_ENDPOINT",
        ),
    ],
)
def test_an_endpoint_that_is_no_url_is_refused_at_start(env: dict[str, str], named: str) -> None:
    """Each was taken: serve started, and every event failed (or was forwarded to
    `garbage`) at the first request."""
    with pytest.raises(
        ConfigError, match=f"invalid setting {named}=.*is not an http:// or https:// URL"
    ):
        load_settings(env=env)


def test_endpoints_that_are_urls_are_taken(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("oci:\n  artifact_registry_endpoint: ''\n")  # empty: the Docker path
    s = load_settings(
        env={
            "K_SINK": "http://broker-ingress.knative-eventing.svc.cluster.local/ns/default",
            "MODELHOOKS_STORE_S3_ENDPOINT_URL": "https://[::1]:9000",
        },
        config_file=config,
    )
    assert s.store.s3_endpoint_url == "https://[::1]:9000"
    assert s.oci.artifact_registry_endpoint == ""


@pytest.mark.parametrize(
    ("spelled", "on"),
    [("yes", True), ("On", True), (" TRUE ", True), ("1", True), ("n", False), ("OFF", False)],
)
@pytest.mark.parametrize(
    "var", ["MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS", "MODELHOOKS_SIGNING_ENABLED"]
)
def test_an_on_off_setting_takes_every_spelling(var: str, spelled: str, on: bool) -> None:
    """signing.enabled took only 'true'/'false' ('True', '1' refused), the bools not
    yes/no/on/off, `modelhooks transfer`'s switches all of them."""
    s = load_settings(env={var: spelled})
    if var.endswith("ENABLED"):
        assert s.signing.enabled == ("true" if on else "false")
    else:
        assert s.store.allow_local_targets is on


def test_a_config_files_yaml_boolean_turns_signing_on(tmp_path: Path) -> None:
    """`signing: {enabled: true}` was refused: "Expected `str`, got `bool`"."""
    config = tmp_path / "c.yaml"
    config.write_text("signing:\n  enabled: true\nnotify:\n  rollout: yes\n")
    s = load_settings(env={}, config_file=config)
    assert (s.signing.enabled, s.notify.rollout) == ("true", True)


def test_an_on_off_setting_spelled_otherwise_says_how_to_spell_it() -> None:
    with pytest.raises(ConfigError, match=r"ROLLOUT='maybe'.*\(on or off: true, yes, on, 1"):
        load_settings(env={"MODELHOOKS_NOTIFY_ROLLOUT": "maybe"})
    with pytest.raises(ConfigError, match=r"one of: '', 'true', 'false'"):
        load_settings(env={"MODELHOOKS_SIGNING_ENABLED": "maybe"})
