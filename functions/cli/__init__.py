"""The `modelhooks` command line: serve, replay, registry list, settings (and sign/verify).

Every setting is also a flag (`--<section>-<name>`), with an environment twin; see
`modelhooks settings`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ModelhooksError
from modelhooks.core.settings import Settings, describe, load_settings

__all__ = ["main"]


def _settings_parser() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("settings (flag > environment > config file > default)")
    group.add_argument("--config", type=Path, help="YAML config file (env MODELHOOKS_CONFIG)")
    for spec in describe():
        group.add_argument(
            spec.flag,
            dest=f"setting:{spec.name}",
            metavar=spec.path[-1].upper(),
            help=f"{spec.description} (env {spec.env}; default {spec.default!r})",
        )
    return parent


def _settings(args: argparse.Namespace) -> Settings:
    flags = {k.split(":", 1)[1]: v for k, v in vars(args).items() if k.startswith("setting:")}
    return load_settings(flags, config_file=args.config)


def cmd_serve(args: argparse.Namespace) -> int:
    from werkzeug.serving import make_server

    from modelhooks.adapters.object_store.watch import LocalStoreWatcher
    from modelhooks.bootstrap import build
    from modelhooks.delivery.broker import Broker
    from modelhooks.delivery.http import create_app
    from modelhooks.delivery.router import load_triggers
    from modelhooks.events.model import CanonicalEvent

    settings = _settings(args)
    deps = build(settings)
    broker = Broker(load_triggers(settings.router.triggers), deps)
    server = make_server(
        settings.serve.host, settings.serve.port, create_app(deps, broker), threaded=True
    )
    host, port = server.server_address[:2]
    store = (settings.home / "store").resolve()
    print(_banner(str(host), int(port), store, settings), file=sys.stderr, flush=True)

    def publish(event: CanonicalEvent) -> None:
        broker.publish(event)

    watcher = None
    if settings.store.backend == "local" and settings.serve.watch_interval > 0:
        watcher = LocalStoreWatcher(store, deps.layout, publish, settings.serve.watch_interval)
        watcher.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if watcher:
            watcher.stop()
        server.server_close()
    return 0


def _banner(host: str, port: int, store: Path, settings: Settings) -> str:
    example = store / "models" / settings.layout.prefix_for("demo", "1")
    return f"""modelhooks serving on http://{host}:{port}
  POST /                   route events through the triggers in infra/knative (broker)
  POST /functions/<name>   call one function
  GET  /healthz
state: {settings.home.resolve()}   (registry: registry.db, store: store/<bucket>/)

Drop a model into the local store (the ready marker {settings.layout.marker} makes it count):
  mkdir -p {example} && echo weights > {example}/weights.bin && touch {example}/{settings.layout.marker}
Replay the bundled samples (real GCS, S3, OCI, Kubernetes notifications):
  .venv/bin/modelhooks replay events/samples --ingress-registry-host zot.local:5000 \\
      --to http://{host}:{port}/
See what got registered:
  .venv/bin/modelhooks registry list
"""


def cmd_replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from modelhooks.cli.replay import read_documents, replay, select, to_events

    settings = _settings(args)
    layout = settings.layout.object_layout()
    events = list(
        select(
            to_events(read_documents(args.source), layout, settings.ingress.registry_host or None),
            types=frozenset(args.type or ()),
            since=args.since,
            until=args.until,
        )
    )
    if args.dry_run:
        for e in events:
            if isinstance(e, ModelhooksError):
                print(json.dumps({"error": e.message}))
                continue
            print(
                json.dumps({"id": e.id, "type": e.type, "subject": e.subject, "time": str(e.time)})
            )
        print(f"{len(events)} events would be sent (dry run)", file=sys.stderr)
        return 0
    send = _http_sender(args.to, args.mode) if args.to else _local_sender(settings)
    with tqdm(total=len(events), unit="event", file=sys.stderr, disable=args.quiet) as bar:
        summary = replay(events, send, rate=args.rate, progress=lambda: bar.update())
    for line in summary.lines():
        print(line, file=sys.stderr)
    return 1 if summary.failed else 0


def _local_sender(settings: Settings) -> Any:
    from modelhooks.bootstrap import build
    from modelhooks.core.logs import configure
    from modelhooks.delivery.broker import Broker
    from modelhooks.delivery.router import load_triggers

    broker = Broker(load_triggers(settings.router.triggers), build(settings))
    configure("WARNING")  # the progress bar and summary speak; per-event logs would drown them

    def send(event: Any) -> tuple[bool, str]:
        failed = [o for o in broker.publish(event) if o.status >= 300]
        if not failed:
            return True, ""
        return (
            False,
            f"{failed[0].function}: {(failed[0].error or {}).get('message', failed[0].status)}",
        )

    return send


def _http_sender(url: str, mode: str) -> Any:
    import requests

    from modelhooks.delivery.runtime import binary, structured

    session = requests.Session()

    def send(event: Any) -> tuple[bool, str]:
        if mode == "structured":
            body = json.dumps(structured(event)).encode()
            headers = {"Content-Type": "application/cloudevents+json"}
        else:
            msg = binary(event)
            body, headers = msg.body, msg.headers
        try:
            resp = session.post(url, data=body, headers=headers, timeout=60)
        except requests.RequestException as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if resp.status_code < 300:
            return True, ""
        return False, f"HTTP {resp.status_code}: {resp.text[:200]}"

    return send


def cmd_watch_models(args: argparse.Namespace) -> int:
    from kubernetes import config

    from modelhooks.adapters.kubernetes.model_source import watch_models
    from modelhooks.cli.replay import to_events

    settings = _settings(args)
    if args.kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        api = config.new_client_from_config(config_file=args.kubeconfig)
    else:
        config.load_incluster_config()
        from kubernetes import client

        api = client.ApiClient()
    send_one = _http_sender(args.to, "structured") if args.to else _local_sender(settings)

    def send(doc: dict[str, Any]) -> None:
        for event in to_events([("watch", doc)], settings.layout.object_layout()):
            ok, reason = (
                (False, event.message) if isinstance(event, ModelhooksError) else send_one(event)
            )
            print(f"{doc['type']} {doc['subject']}: {'ok' if ok else reason}", file=sys.stderr)

    print(f"watching Models on {api.configuration.host}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        watch_models(api, send, namespace=args.namespace)
    return 0


def cmd_registry_list(args: argparse.Namespace) -> int:
    from modelhooks.bootstrap import build

    registry = build(_settings(args)).registry
    rows: list[dict[str, str]] = []
    for model in registry.list_models():
        row = {"model": model.name, "model_state": model.state.value}
        blank = dict.fromkeys(("version", "version_state", "uri", "digest", "artifact_state"), "")
        versions = registry.list_versions(model.id)
        if not versions:
            rows.append({**row, **blank})
        for version in versions:
            vrow = {**row, **blank, "version": version.name, "version_state": version.state.value}
            artifacts = registry.list_artifacts(version.id)
            if not artifacts:
                rows.append(vrow)
            for a in artifacts:
                rows.append(
                    {**vrow, "uri": a.uri, "digest": a.digest, "artifact_state": a.state.value}
                )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ["model", "version", "model_state", "artifact_state", "digest", "uri"]
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    if args.markdown:
        print(settings_table())
        return 0
    import msgspec

    doc = msgspec.to_builtins(_settings(args), enc_hook=str)
    for spec in describe():
        if spec.secret:
            *sections, name = spec.path
            node = doc
            for section in sections:
                node = node[section]
            node[name] = redact(node[name])
    print(json.dumps(doc, indent=2))
    return 0


_LITERAL = re.compile(r"((?:^|[,:;=])(?:secret|token)=)(?!env:|file:)[^,;]+")


def redact(value: str) -> str:
    """A secret setting for display: env:/file: references stay, literal secrets go."""
    if not value or value == "none" or value.startswith(("env:", "file:")):
        return value
    if "=" not in value:
        return "<redacted>"
    return _LITERAL.sub(lambda m: m.group(1) + "<redacted>", value)


def settings_table() -> str:
    """The README's table of every setting."""
    rows = ["| setting | env var | flag | default | meaning |", "|---|---|---|---|---|"]
    for s in describe():
        default = "" if s.default in (None, "") else f"`{s.default}`"
        rows.append(f"| `{s.name}` | `{s.env}` | `{s.flag}` | {default} | {s.description} |")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelhooks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = _settings_parser()

    serve = sub.add_parser("serve", parents=[common], help="host every function in one process")
    serve.set_defaults(func=cmd_serve)

    rp = sub.add_parser("replay", parents=[common], help="send stored events again")
    rp.add_argument("source", help="a file (JSON or JSON Lines), a directory, or - for stdin")
    rp.add_argument("--to", metavar="URL", help="POST to this URL instead of in-process")
    rp.add_argument("--mode", choices=["binary", "structured"], default="binary")
    rp.add_argument(
        "--type", action="append", metavar="TYPE", help="only this canonical type (repeatable)"
    )
    rp.add_argument(
        "--since", type=datetime.fromisoformat, help="only events at or after (ISO 8601)"
    )
    rp.add_argument(
        "--until", type=datetime.fromisoformat, help="only events at or before (ISO 8601)"
    )
    rp.add_argument("--rate", type=float, default=0.0, help="events per second (0 = no limit)")
    rp.add_argument("--dry-run", action="store_true", help="print what would be sent")
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.set_defaults(func=cmd_replay)

    wm = sub.add_parser(
        "watch-models",
        parents=[common],
        help="send Model resource changes as ApiServerSource events (a local ApiServerSource)",
    )
    wm.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or ~/.kube/config)")
    wm.add_argument("--namespace", help="one namespace (default: all)")
    wm.add_argument("--to", metavar="URL", help="POST to this URL instead of in-process")
    wm.set_defaults(func=cmd_watch_models)

    reg = sub.add_parser("registry", help="inspect the model registry")
    reg_sub = reg.add_subparsers(dest="registry_command", required=True)
    ls = reg_sub.add_parser("list", parents=[common], help="models, versions, artifacts")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_registry_list)

    st = sub.add_parser("settings", parents=[common], help="print the effective settings")
    st.add_argument("--markdown", action="store_true", help="the table of every setting")
    st.set_defaults(func=cmd_settings)

    from modelhooks.cli.signing import add_commands

    add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ModelhooksError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
