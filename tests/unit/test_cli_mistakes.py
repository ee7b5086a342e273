"""The command line under mistakes: each ends in a documented exit status and a line that
says what was wrong and what to do, never a traceback (modelhooks.cli's docstring)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelhooks.cli import INTERNAL_ERROR, INTERRUPTED, main
from modelhooks.events import samples

SAMPLES = Path(samples.__file__).parent
PUSHED = str(SAMPLES / "canonical-artifact-pushed.json")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `modelhooks argv`, usage errors included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "flag", "why"),
    [
        (["prune", "plan", "oci://registry.example.com/m", "--keep", "-3"], "--keep", "0 or more"),
        (["prune", "plan", "oci://r.example.com/m", "--grace-hours", "-1"], "--grace", "0 or more"),
        (["prune", "plan", "oci://r.example.com/m", "--untagged-hours", "nan"], "--untagged", ""),
        (
            ["prune", "plan", "oci://r.example.com/m", "--grace-hours", "24000000000"],
            "--grace",
            "at most 1,000,000 hours",
        ),
        (["replay", PUSHED, "--rate", "-1"], "--rate", "0 or more"),
        (["replay", PUSHED, "--to", "not-a-url"], "--to", "http:// or https:// URL"),
        (["replay", PUSHED, "--to", "ftp://127.0.0.1/"], "--to", "http:// or https:// URL"),
        (["replay", PUSHED, "--to", "http://h:99999/"], "--to", "http:// or https:// URL"),
        (["replay", PUSHED, "--header", "no colon"], "--header", "NAME: VALUE"),
        (["sign", "./m", "--key", "k.pem", "--shard-size", "-5"], "--shard-size", "0 or more"),
        (["watch-models", "--to", "localhost:8080"], "--to", "http:// or https:// URL"),
        (["prune", "plan", "oci://r.example.com/m", "--protect", "("], "--protect", "regular"),
    ],
)
def test_a_bad_flag_value_is_a_usage_error_naming_the_flag(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, why: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"argument {flag}" in err and why in err, err
    assert not home.exists()  # refused before anything ran


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"registry: [1, 2]\n", "invalid setting registry in "),  # and a registry flag
        (b"\xff\xfe\x00", "cannot read config file"),
    ],
)
def test_a_config_file_that_is_not_one_is_a_config_error(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(content)
    code, _, err = run(capsys, "settings", "--config", str(config), "--registry-backend", "sqlite")
    assert code == 2 and err.startswith(f"config_error: {why}"), err


def test_prune_names_what_an_oci_repository_is(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "prune", "plan", "s3://bucket/x")
    assert code == 2 and "'s3://bucket/x': not an OCI repository" in err, err
    assert "oci://s3://" not in err


def test_a_loopback_registry_is_refused_with_the_setting_that_allows_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "prune", "plan", "oci://127.0.0.1:9/models/x")
    assert code == 2 and "loopback" in err
    assert "--store-allowed-hosts" in err and "MODELHOOKS_STORE_ALLOWED_HOSTS" in err, err


def test_replay_to_a_server_that_is_not_there_is_transient_in_one_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    code, _, err = run(capsys, "replay", str(SAMPLES), "--quiet", "--to", url)
    assert code == 3, err
    assert f"{url} did not answer: Connection refused" in err
    assert "HTTPConnectionPool" not in err and "Max retries" not in err, err


def test_replay_raw_to_a_server_that_is_not_there_is_transient_too(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "replay", PUSHED, "--raw", "--quiet", "--to", "http://127.0.0.1:9/")
    assert code == 3 and "did not answer: Connection refused" in err, err


def test_one_unreadable_file_of_a_directory_is_reported_and_the_rest_sent(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dead-letter"
    folder.mkdir()
    (folder / "a-good.json").write_text(Path(PUSHED).read_text())
    (folder / "b-truncated.json").write_text('{"specversion": "1.0", "id": "x", "ty')
    (folder / "c-binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    lines = [json.dumps(samples.load("gcs-pubsub-finalize-marker")), "{not json"]
    (folder / "d-mixed.jsonl").write_text("\n".join(lines) + "\n")
    code, _, err = run(capsys, "replay", str(folder), "--quiet", "--ingress-registry-host", "h")
    assert code == 2, err  # refused documents: bad input, not worth sending again
    # the good two name a version this home does not hold: skipped (said 'succeeded 2')
    assert "sent 2, succeeded 0, failed 3, skipped 2" in err, err
    assert "b-truncated.json is neither JSON nor JSON Lines" in err
    assert "c-binary.jsonl: cannot be read" in err
    assert "d-mixed.jsonl:2 is not JSON" in err


def test_a_dry_run_shows_a_missing_time_as_null(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = samples.load("canonical-artifact-pushed")
    del event["time"]
    (tmp_path / "untimed.json").write_text(json.dumps(event))
    code, out, _ = run(capsys, "replay", str(tmp_path / "untimed.json"), "--dry-run")
    assert code == 0
    (shown,) = [json.loads(line) for line in out.splitlines()]
    assert shown["time"] is None
    code, out, _ = run(capsys, "replay", PUSHED, "--dry-run")
    assert json.loads(out)["time"] == "2026-11-23T17:02:11.535000+00:00"


def test_the_zot_refusal_names_the_setting_to_give(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "replay", str(SAMPLES / "zot-image-updated.json"), "--dry-run")
    assert code == 2
    assert "--ingress-registry-host" in out and "MODELHOOKS_INGRESS_REGISTRY_HOST" in out, out


def test_cleanup_finds_a_model_whose_name_holds_slashes(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from modelhooks.bootstrap import build
    from modelhooks.core.settings import load_settings
    from tests.unit.test_cleanup import FILES, World

    settings = load_settings(env={"MODELHOOKS_HOME": str(home)})
    world = World(home, registry=build(settings).deps.registry)  # the CLI's (SQLite)
    world.version("ml-prod/models/sentiment", "1", "sentiment/1")
    world.version("ml-prod/models/sentiment", "2", "sentiment/2")
    for target, versions in (
        ("ml-prod/models/sentiment", "12"),
        ("ml-prod/models/sentiment/2", "2"),
    ):
        code, out, err = run(
            capsys,
            "cleanup",
            target,
            "--policy",
            "Delete",
            "--dry-run",
            "--json",
            "--home",
            str(home),
        )
        assert code == 0, err
        planned = sorted(r["name"] for r in json.loads(out)["plan"])
        assert planned == sorted(f"sentiment/{v}/{f}" for v in versions for f in FILES)
    code, out, _ = run(
        capsys, "registry", "show", "ml-prod/models/sentiment/2", "--home", str(home)
    )
    assert code == 0 and [v["name"] for v in json.loads(out)["versions"]] == ["2"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("command", ["serve", "dead-letter"])
def test_a_server_whose_port_is_taken_stops_before_touching_the_state(
    home: Path, capsys: pytest.CaptureFixture[str], taken_port: int, command: str
) -> None:
    model = home / "store" / "models" / "models" / "demo" / "1"
    model.mkdir(parents=True)
    (model / "weights.bin").write_text("w")
    (model / "_SUCCESS").touch()
    code, _, err = run(capsys, command, "--port", str(taken_port))
    assert code == 2, err
    assert f"cannot listen on 127.0.0.1:{taken_port}: Address already in use" in err
    assert "--port" in err
    assert not (home / "registry.db").exists()  # the watcher never registered the model


def test_an_internal_error_is_one_line_and_exit_70(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhooks.cli import settings as settings_command

    def broken(*_: Any) -> str:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(settings_command, "settings_table", broken)
    code, _, err = run(capsys, "settings", "--markdown")
    assert code == INTERNAL_ERROR
    assert (
        err.startswith("internal error: ZeroDivisionError: a bug\n") and "MODELHOOKS_DEBUG" in err
    )
    monkeypatch.setenv("MODELHOOKS_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["settings", "--markdown"])


def test_a_file_an_argument_names_that_cannot_be_read_is_bad_input(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.txt"
    argv = ["sign", str(tmp_path), "--key", "k.pem", "--password-file", str(missing)]
    code, _, err = run(capsys, *argv, "--quiet")
    said = f"config_error: --password-file={missing}: cannot be read (No such file or directory)\n"
    assert code == 2 and err == said, err


def test_ctrl_c_in_replay_says_what_was_sent_and_exits_130(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhooks.cli import common

    sent: list[Any] = []

    def sender(_settings: Any) -> Any:
        def send(event: Any) -> tuple[int, str]:
            if len(sent) == 2:
                raise KeyboardInterrupt
            sent.append(event)
            return 200, ""

        return send

    monkeypatch.setattr(common, "local_sender", sender)
    code, _, err = run(capsys, "replay", str(SAMPLES), "--quiet", "--ingress-registry-host", "h")
    assert code == INTERRUPTED
    assert re.fullmatch(
        r"interrupted: sent 2, succeeded 2, failed 0, skipped 0 of \d+ events; "
        "replaying again is safe",
        err.strip().splitlines()[-1],
    ), err


def test_help_is_short_and_shows_plain_values(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["replay"], ["serve"], ["cleanup"], ["prune", "plan"]):
        code, out, _ = run(capsys, *command, "--help")
        assert code == 0
        assert len(out.splitlines()) <= 60, f"{command}: {len(out.splitlines())} lines"
        assert "PosixPath" not in out and "--home" in out
        assert "modelhooks settings --markdown" in out


def test_a_reader_that_goes_away_ends_it_quietly(tmp_path: Path) -> None:
    """`modelhooks replay … --dry-run | head -1`: the rest of the output has nowhere to go;
    that is the reader's choice, not an error to report (141, as a shell reports SIGPIPE)."""
    import subprocess
    import sys

    many = tmp_path / "many.jsonl"  # well past a pipe's buffer once printed
    line = json.dumps(samples.load("canonical-artifact-pushed"))
    many.write_text("\n".join([line] * 2000) + "\n")
    modelhooks = Path(sys.executable).with_name("modelhooks")
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{modelhooks} replay {many} --dry-run | head -1"],
        capture_output=True,
        text=True,
        env={"MODELHOOKS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.count("\n") == 1
    assert done.returncode == 141 and "rror" not in done.stderr, (done.returncode, done.stderr)


@pytest.mark.parametrize(
    ("var", "value", "argv", "why"),
    [
        ("MODELHOOKS_WATCH_CONCURRENCY", "0", ["watch-models"], "1 or more"),
        ("MODELHOOKS_WATCH_BACKOFF_DELAY", "soon", ["watch-models"], "not a number"),
        ("MODELHOOKS_VERIFY_TRUST", "{keys", ["verify", "./m"], "not JSON"),
    ],
)
def test_a_bad_value_of_a_flag_s_environment_twin_names_the_variable(
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    var: str,
    value: str,
    argv: list[str],
    why: str,
) -> None:
    """README: watch-models' --concurrency and --backoff-delay, and verify's --trust-json,
    take their value from an environment variable too (a Deployment's env, the `verifyOn:
    node` init containers'); a bad one is named as it was given, the variable and its
    value, as a setting's is, not as the flag nobody passed."""
    monkeypatch.setenv(var, value)
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"{var}={value!r} (environment)" in err and why in err, err
    assert "argument --" not in err and "--trust-json" not in err, err


@pytest.mark.parametrize(
    ("argv", "choices"), [(["prune"], "{plan,apply}"), (["registry"], "{list,show,export,import}")]
)
def test_a_command_without_its_step_names_the_steps_it_takes(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], choices: str
) -> None:
    """`modelhooks prune` alone said 'the following arguments are required: prune_command'
    (argparse's name for it, in no help); now the steps it takes, as its usage shows them."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"the following arguments are required: {choices}" in err, err
    assert "_command" not in err, err
