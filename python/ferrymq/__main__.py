"""Command line: ``ferrymq version``."""

from __future__ import annotations

import argparse
import sys

import ferrymq


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferrymq", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("version", help="print the version and compiled features")
    args = parser.parse_args(argv)
    if args.command in (None, "version"):
        print(f"ferrymq {ferrymq.__version__} (features: {', '.join(ferrymq.features())})")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
