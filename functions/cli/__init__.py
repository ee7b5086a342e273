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
    transfer      copy a model between stores (streaming), sign and register it

Every setting is also a flag (`--<section>-<name>`), with an environment twin; see
`modelhooks settings`.

Exit status: 0 ok, 1 verification failed, 2 usage, configuration or bad input,
3 transient (a backend did not answer: retry), 4 conflict (other content already there),
70 a bug in modelhooks (an internal error: please report it), 130 interrupted (Ctrl-C:
the line before says what was done; everything is idempotent, so running it again is safe),
141 the reader of the output went away (`… | head`: quietly, as a shell reports SIGPIPE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from modelhooks.core.errors import Conflict, ModelhooksError, Transient, VerificationFailed

__all__ = ["COMMANDS", "EXIT", "INTERNAL_ERROR", "INTERRUPTED", "build_parser", "main"]

# Exit status by error class (the first that matches): see the module docstring.
EXIT: tuple[tuple[type[ModelhooksError], int], ...] = (
    (VerificationFailed, 1),
    (Transient, 3),
    (Conflict, 4),
    (ModelhooksError, 2),
)
INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: not the user's mistake
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
BROKEN_PIPE = 141  # 128 + SIGPIPE

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
    "transfer",
)


class _Formatter(argparse.HelpFormatter):
    """Descriptions wrapped between words, never inside a `--flag-name`."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


class _Parser(argparse.ArgumentParser):
    """Usage errors in two lines: what was wrong, and where the help is (not the whole
    usage of a command with dozens of settings)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked (a look through the
    installed distributions' metadata, ~20 ms of every start otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"modelhooks {_version()}")  # on stdout, as argparse's version action
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `argv` naming a command, that command's alone (each
    command's module, and what it imports, is loaded to build its parser)."""
    from modelhooks.cli.common import settings_parser

    parser = _Parser(
        prog="modelhooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    everything = settings_parser()
    first = next((a for a in argv or () if not a.startswith("-")), "")
    named = [name for name in COMMANDS if name.replace("_", "-") == first]
    for name in named or COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        sections = getattr(module, "SETTINGS", None)  # the settings the command uses
        module.add_parser(sub, everything if sections is None else settings_parser(sections))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every way it can end is an exit status of the module docstring
    and at most a few lines on stderr, never a traceback (MODELHOOKS_DEBUG=1 shows the
    traceback of an internal error)."""
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the command whose usage it is, not the top level's
            commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            command = commands.choices.get(getattr(args, "command", ""), parser)
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args))
    except ModelhooksError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return next(code for cls, code in EXIT if isinstance(exc, cls))
    except KeyboardInterrupt as exc:  # commands re-raise it saying what they had done
        print(f"interrupted: {exc or 'stopped before it finished'}", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # whoever read our output stopped (`… | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return BROKEN_PIPE
    except OSError as exc:
        # with a file name: one the arguments name (missing, unreadable, a directory);
        # without: the network or the system, which a retry may find better
        print(f"os_error: {_os_error(exc)}", file=sys.stderr)
        return 2 if exc.filename is not None else 3
    except Exception as exc:
        if os.environ.get("MODELHOOKS_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "  this is a bug in modelhooks: please report it with the command line "
            "(MODELHOOKS_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return INTERNAL_ERROR


def _os_error(exc: OSError) -> str:
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    reason = exc.strerror or str(exc)
    return f"{where}: {reason}" if where else reason


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelhooks")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
