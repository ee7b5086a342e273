"""What every command shares: settings as flags, and the two ways to send an event (into
this process's broker, or POSTed to a URL)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from modelhooks.core.settings import Settings, describe, load_settings

__all__ = ["http_reason", "http_sender", "local_sender", "settings", "settings_parser"]


def settings_parser(sections: frozenset[str] | None = None) -> argparse.ArgumentParser:
    """A parent parser with the settings a command uses as flags (`--<section>-<name>`):
    those of `sections` (top-level names such as `home`, or sections such as `registry`),
    every one when None. `modelhooks settings --markdown` lists them all."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("settings (flag > environment > config file > default)")
    group.add_argument("--config", type=Path, help="YAML config file (env MODELHOOKS_CONFIG)")
    for spec in describe():
        if sections is not None and spec.path[0] not in sections:
            continue
        group.add_argument(
            spec.flag,
            dest=f"setting:{spec.name}",
            metavar=spec.path[-1].upper(),
            help=f"{spec.description} (env {spec.env}; default {spec.default!r})",
        )
    return parent


def settings(args: argparse.Namespace) -> Settings:
    """The settings: flags > environment > config file > defaults."""
    flags = {k.split(":", 1)[1]: v for k, v in vars(args).items() if k.startswith("setting:")}
    return load_settings(flags, config_file=args.config)


def local_sender(settings: Settings) -> Any:
    """Send into this process's broker; (ok, reason) per event."""
    from modelhooks.bootstrap import build
    from modelhooks.core.logs import configure

    app = build(settings)
    broker = app.broker()
    configure("WARNING")  # the progress bar and summary speak; per-event logs would drown them

    def send(event: Any) -> tuple[bool, str]:
        if app.delivery.resolve is not None:  # as the ingress does: named by content
            event = app.delivery.resolve(event)
        failed = [o for o in broker.publish(event) if o.status >= 300]
        if not failed:
            return True, ""
        return False, "; ".join(_reason(o.as_json()) for o in failed)

    return send


def _reason(outcome: dict[str, Any]) -> str:
    """`function (status): message` of one failed outcome, in full."""
    error = outcome.get("error") or {}
    return f"{outcome.get('function', '?')} ({outcome.get('status')}): {error.get('message', '')}"


def http_reason(status: int, text: str) -> str:
    """The reason of a failed HTTP delivery: every failed function's, else the body."""
    try:
        doc = json.loads(text)
    except ValueError:
        return f"HTTP {status}: {text}"
    failed = [o for o in doc.get("outcomes", []) if o.get("status", 0) >= 300]
    if failed:
        return f"HTTP {status}: " + "; ".join(_reason(o) for o in failed)
    return f"HTTP {status}: {doc.get('message', text)}"


def http_sender(url: str, mode: str, extra: dict[str, str] | None = None) -> Any:
    """POST to `url` in binary or structured mode (with `extra` headers); (ok, reason) per
    event."""
    import requests

    from modelhooks.delivery.encoding import binary, structured

    session = requests.Session()

    def send(event: Any) -> tuple[bool, str]:
        if mode == "structured":
            body = json.dumps(structured(event)).encode()
            headers = {"Content-Type": "application/cloudevents+json"}
        else:
            msg = binary(event)
            body, headers = msg.body, msg.headers
        try:
            resp = session.post(url, data=body, headers={**headers, **(extra or {})}, timeout=60)
        except requests.RequestException as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if resp.status_code < 300:
            return True, ""
        return False, http_reason(resp.status_code, resp.text)

    return send
