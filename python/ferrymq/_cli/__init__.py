"""The ``ferrymq`` command line: one parser, one error handler, one exit-code table.

Each command is a module of this package with ``add_parser(subparsers)`` (which sets
``func`` on its parser) and a ``run(args) -> int``. :func:`main` parses, runs the command and
maps what goes wrong to one line on stderr and an exit code scripts can rely on:

====  =======================================================================
code  meaning
====  =======================================================================
0     done
1     the broker or the network failed (refused connection, missing topic, ...)
2     bad usage: an unknown option, a bad value, a bad endpoint
3     incomplete: fewer messages than ``--count`` before ``--timeout``
130   interrupted (Ctrl-C); a command prints what it did before it stops
====  =======================================================================
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import ferrymq

from . import bench, broker, consume, demo, produce
from ._common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, fail

__all__ = ["main"]

_COMMANDS = (broker, demo, produce, consume, bench)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferrymq",
        description="ferrymq: RocketMQ 5, RocketMQ remoting, JMQ4 and NATS JetStream from Python.",
        epilog="Exit codes: 0 done, 1 broker or network failure, 2 bad usage, "
        "3 incomplete (fewer messages than --count), 130 interrupted.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    version = sub.add_parser("version", help="print the version and compiled features")
    version.set_defaults(func=_version)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def _version(args: argparse.Namespace) -> int:
    print(f"ferrymq {ferrymq.__version__} (features: {', '.join(ferrymq.features())})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return _version(args)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print(f"ferrymq {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ferrymq.InvalidArgumentError as e:
        return fail(args.command, e, EXIT_USAGE)
    except (ferrymq.FerryError, OSError) as e:
        return fail(args.command, e, EXIT_FAILED)
    return code
