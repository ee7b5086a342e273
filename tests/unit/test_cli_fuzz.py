"""Fuzzing the command line: every command and subcommand of `modelhooks`, called in-process
with generated flags, values and positionals (hostile strings, negative and non-finite
numbers, paths that do not exist, URLs with odd schemes, files that are not what they
should be). Whatever the argv: no uncaught exception and no traceback, an exit status the
`modelhooks.cli` docstring documents (70, a bug, is a failure here), and no hang (each
example is bounded). Nothing is served: `serve` and `dead-letter` get a port that is taken,
every host is loopback on a closed port, Sigstore and cloud credentials point nowhere. No
gs://bucket: google-cloud-storage retries a refused connection for 120 s (its default
deadline), which is no hang but longer than an example may take."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import operator
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks import bootstrap
from modelhooks.cli import EXIT, build_parser, main
from modelhooks.events import samples
from tests.unit.signing_material import make_key

DOCUMENTED = {0, *(code for _, code in EXIT)}  # 0 ok, 1 verification, 2 usage, 3, 4
BOUND = 20  # seconds one example may take
FUZZ = settings(
    max_examples=50,  # x 14 commands: ~25 s here
    deadline=None,  # bounded by BOUND instead: a hang fails, a slow import does not
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CLOSED = "127.0.0.1:1"  # nothing listens there


class Hung(BaseException):  # not an Exception: main() must not swallow it
    pass


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Any]:
    """(command path, its parser) for every command and subcommand."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from leaves(sub, (*path, name))


COMMANDS = dict(leaves(build_parser()))


@pytest.fixture
def sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path
) -> Iterator[dict[str, str]]:
    """A working directory of odd files, and an environment that reaches nothing."""
    work = tmp_path / "work"
    (work / "model").mkdir(parents=True)
    (work / "model" / "weights.bin").write_bytes(b"w" * 100)
    (work / "model" / "_SUCCESS").touch()
    (work / "empty").mkdir()
    (work / "event.json").write_text(json.dumps(samples.load("canonical-artifact-pushed")))
    (work / "not-json.json").write_text('{"specversion": "1.0", "id"')
    (work / "binary.jsonl").write_bytes(b"\xff\xfe\x00\x01")
    (work / "list.json").write_text("[1, null, {}]")
    (work / "config.yaml").write_text("serve: {port: -1}\nregistry: [1, 2]\n")
    (work / "plan.json").write_text('{"repository": "oci://127.0.0.1:1/m", "delete": [{}]}')
    real = make_key(work, "real")
    assert real.private.name == "real.pem" and real.public.name == "real.pub.pem"
    (work / "key.pem").write_text(
        "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
    )
    monkeypatch.chdir(work)
    for name, value in {
        "HOME": str(tmp_path),
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        "SIGSTORE_TUF_URL": f"http://{CLOSED}/",
        "SIGSTORE_FULCIO_URL": f"http://{CLOSED}/",
        "SIGSTORE_REKOR_URL": f"http://{CLOSED}/",
        "STORAGE_EMULATOR_HOST": f"http://{CLOSED}",
        "GCE_METADATA_HOST": CLOSED,
        "GCE_METADATA_IP": CLOSED,
        "NO_GCE_CHECK": "True",
        "AWS_ACCESS_KEY_ID": "fuzz",
        "AWS_SECRET_ACCESS_KEY": "fuzz",
        "AWS_EC2_METADATA_DISABLED": "true",
        "MODELHOOKS_STORE_S3_ENDPOINT_URL": f"http://{CLOSED}",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with contextlib.redirect_stderr(io.StringIO()):  # a registry holding sentiment/1
        assert main(["replay", "event.json", "--quiet"]) == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield {"port": str(taken.getsockname()[1])}


def _relative(text: str) -> bool:
    """Generated text never names a place outside the sandbox (the tests run as root)."""
    return not text.startswith(("/", "~", "-")) and ".." not in text and "\x00" not in text


HOSTILE = [
    "",
    " ",
    "-",
    "--",
    "-3",
    "-1.5",
    "0",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "99999999999999999999",
    "0x10",
    "1_000",
    "'; rm -rf x",
    "%s%n",
    "{}",
    "[]",
    '{"a": 1}',
    "ünïcødé ✓",
    "a" * 400,
    "\u202eevil",
    "line\nbreak",
    "model",
    "model/",
    "empty",
    "event.json",
    "not-json.json",
    "binary.jsonl",
    "list.json",
    "config.yaml",
    "plan.json",
    "key.pem",
    "missing.pem",
    "/proc/nonexistent/x",  # absent, and nothing can be made there (the tests may run as root)
    "file:///proc/nonexistent/x",
    "gs://",
    "s3://",
    "s3://bucket/x",
    "oci://",
    "oci://s3://bucket/x",
    f"oci://{CLOSED}/models/x",
    f"oci://{CLOSED}/models/x:v1",
    "oci://[::1/x",
    "oci://UPPER/x@",
    f"http://{CLOSED}/",
    f"https://{CLOSED}/",
    "http://[::1",
    "http://:0/",
    "ftp://x/y",
    "javascript:alert(1)",
    "not-a-url",
    "zot.local:5000",
    "ml-prod/models/sentiment/1",
    "sentiment",
    "Delete",
    "Retain",
    "Untag",
    "sha256",
    "blake3",
    "resource",
    "Reference",
    "2026-11-23T17:02:11Z",
    "2026-13-45",
    "artifact.pushed",
    "dev.modelhooks.model.deleted",
    "sqlite",
    "kubeflow",
    "kubernetes",
    "cloud",
    "local",
    "true",
    "none",
    "oidc:x",
    "hmac:",
    "bearer:env:NOPE",
    "/path=canonical;x",
    "ns=*;bad",
    "Authorization: Bearer x",
    "X:",
]
values = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats().map(str),
    st.text(max_size=30).filter(_relative),
)
SAFE_RATE = ["0", "1000", "-1", "nan", "inf", "x"]  # a legitimately slow rate would hang
MODELS = ["sentiment", "sentiment/1", "sentiment/9", "ml-prod/models/sentiment", "nope"]
FILES = ["event.json", "not-json.json", "binary.jsonl", "list.json", "missing.json", "empty"]
# values that get past parsing, by argument (dest), so the commands themselves run
PLAUSIBLE = {
    "uri": ["model", "empty", "missing", "gs://", "s3://bucket/x", "file://model"],
    "source": [*FILES, ".", "-"],
    "repository": [f"oci://{CLOSED}/models/x", "s3://bucket/x", f"{CLOSED}/m"],
    "model": MODELS,
    "name": MODELS,
    "file": [*FILES, "-"],
    "to": [f"http://{CLOSED}/", f"https://{CLOSED}/x"],
    "plan": ["plan.json", *FILES],
    "key": ["real.pem", "key.pem", "missing.pem"],
    "public_key": ["real.pub.pem", "key.pem", "missing.pem"],
    "certificate": ["real.pub.pem", "key.pem"],
    "certificate_chain": ["real.pub.pem", "key.pem"],
    "password_file": ["event.json", "missing.txt"],
    "identity_token": ["event.json", "missing.txt"],
    "trust_config": ["event.json", "list.json", "missing.json"],
    "signature": ["model.sig", "sig/model.sig", "s3://bucket/s.sig", "model/other.sig"],
    "state": ["state.json", "event.json", "not-json.json"],
    "output": ["export.json", "empty", "model/x.json"],
    "config": ["config.yaml", "event.json", "binary.jsonl", "missing.yaml"],
    "kubeconfig": ["event.json", "missing.yaml"],
    "since": ["2026-11-23T17:02:11Z", "2026-11-23", "yesterday"],
    "until": ["2026-11-23T18:00:00+00:00", "2026-13-45"],
    "type": ["artifact.pushed", "dev.modelhooks.model.deleted", "x"],
    "stream": ["v*", "[", "*"],
    "protect": ["^latest$", "(", ".*"],
    "header": ["Authorization: Bearer x", "X-A: b", "bad"],
    "expected_digest": ["0" * 64, "sha256:x"],
}


def argv_for(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> st.SearchStrategy[list[str]]:
    positionals = [a for a in parser._actions if not a.option_strings]
    optionals = [
        a
        for a in parser._actions
        if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
    ]

    def value_for(action: argparse.Action) -> st.SearchStrategy[str]:
        if "--rate" in action.option_strings:
            return st.sampled_from(SAFE_RATE)
        plausible = (
            sorted(map(str, action.choices)) if action.choices else PLAUSIBLE.get(action.dest)
        )
        if plausible:  # mostly plausible, sometimes anything
            return st.one_of(st.sampled_from(plausible), st.sampled_from(plausible), values)
        return values

    def option(action: argparse.Action) -> st.SearchStrategy[list[str]]:
        flag = st.sampled_from(action.option_strings)
        if action.nargs == 0:
            return flag.map(lambda f: [f])
        return st.tuples(flag, value_for(action)).map(list)

    head = st.tuples(*(value_for(a) for a in positionals)).map(list)
    flags = (
        st.lists(st.sampled_from(optionals).flatmap(option), max_size=5)
        if optionals
        else st.just([])
    )
    extra = st.sampled_from([[]] * 12 + [["--help"], ["--bogus"], ["stray"], ["--", "-x"]])
    whole = st.sampled_from([True] * 9 + [False])  # a positional missing, now and then
    return st.tuples(head, flags, extra, whole).map(
        lambda t: [
            *path,
            *(t[0] if t[3] else t[0][:-1]),
            *functools.reduce(operator.iadd, t[1], []),
            *t[2],
        ]
    )


def run(argv: list[str]) -> tuple[int, str]:
    """(exit status, everything printed) of one in-process call, bounded by BOUND."""

    def hung(_signum: int, _frame: FrameType | None) -> None:
        raise Hung(f"modelhooks {argv} still running after {BOUND} s")

    out = io.StringIO()
    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, BOUND)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: usage errors, --help
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        bootstrap.reset()
    return code, out.getvalue()


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_any_argv_ends_in_a_documented_status_without_a_traceback(
    path: tuple[str, ...], sandbox: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    serves = path in (("serve",), ("dead-letter",))
    # never served: the last word on where to listen is a taken port
    pinned = ["--host", "127.0.0.1", "--port", sandbox["port"]] if serves else []

    @FUZZ
    @given(argv=argv_for(path, COMMANDS[path]), stdin=st.sampled_from(["", "{", "[]", "x\n"]))
    def check(argv: list[str], stdin: str) -> None:
        if serves and "--help" not in argv:
            argv = [*(a for a in argv if a not in ("--", "-x")), *pinned]
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code, printed = run(argv)
        assert "Traceback" not in printed, f"{argv}:\n{printed}"
        assert code in DOCUMENTED, f"{argv} exited {code}:\n{printed}"

    check()
