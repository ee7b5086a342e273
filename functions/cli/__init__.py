"""The `modelhooks` command line: one module per command.

    serve         every function in one process (modelhooks.cli.serve)
    replay        send stored events again
    watch-models  a local ApiServerSource for Model resources
    registry      inspect the model registry
    settings      the effective settings
    sign, verify  model-signing signatures where a model lies
    dead-letter   keep dead-lettered events for replay
    prune         tag retention for an OCI repository: plan, then apply that plan
    cleanup       a model's deletion policy by hand: the plan, then exactly that

Every setting is also a flag (`--<section>-<name>`), with an environment twin; see
`modelhooks settings`.

Exit status: 0 ok, 1 verification failed, 2 usage, configuration or bad input,
3 transient (a backend did not answer: retry), 4 conflict (other content already there).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from modelhooks.core.errors import Conflict, ModelhooksError, Transient, VerificationFailed

__all__ = ["COMMANDS", "EXIT", "build_parser", "main"]

# Exit status by error class (the first that matches): see the module docstring.
EXIT: tuple[tuple[type[ModelhooksError], int], ...] = (
    (VerificationFailed, 1),
    (Transient, 3),
    (Conflict, 4),
    (ModelhooksError, 2),
)

COMMANDS = (
    "serve",
    "replay",
    "watch_models",
    "registry",
    "settings",
    "sign",
    "verify",
    "dead_letter",
    "prune",
    "cleanup",
)


class _Parser(argparse.ArgumentParser):
    """Usage errors in two lines: what was wrong, and where the help is (not the whole
    usage of a command with dozens of settings)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from modelhooks.cli.common import settings_parser

    parser = _Parser(
        prog="modelhooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"modelhooks {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    everything = settings_parser()
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        sections = getattr(module, "SETTINGS", None)  # the settings the command uses
        module.add_parser(sub, everything if sections is None else settings_parser(sections))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the command whose usage it is, not the top level's
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = commands.choices.get(getattr(args, "command", ""), parser)
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args))
    except ModelhooksError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return next(code for cls, code in EXIT if isinstance(exc, cls))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelhooks")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
