"""Command line of ferrymq: ``ferrymq version`` and ``ferrymq demo``."""

from __future__ import annotations

import argparse
import sys

import ferrymq


def _version(_: argparse.Namespace) -> int:
    print(f"ferrymq {ferrymq.__version__} (features: {', '.join(ferrymq.features())})")
    return 0


def _demo(_: argparse.Namespace) -> int:
    # Until the embedded broker and producer land, the demo is a smoke check of the build.
    _version(_)
    msg = ferrymq.Message("demo", b"hello")
    print(f"built {msg!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferrymq", description="ferrymq command line")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("version", help="print the version and compiled features").set_defaults(
        func=_version
    )
    sub.add_parser("demo", help="send and receive messages on an embedded broker").set_defaults(
        func=_demo
    )
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        return _version(args)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
