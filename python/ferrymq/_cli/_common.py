"""What every command shares: exit codes and the one-line error."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130


def fail(command: str, error: BaseException, code: int) -> int:
    """Print ``error`` as one line (no traceback) on stderr and return ``code``."""
    text = " ".join(str(error).split()) or type(error).__name__
    print(f"ferrymq {command}: error: {text}", file=sys.stderr)
    return code


def positive_int(text: str) -> int:
    """An argparse type: a whole number above zero."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above zero")
    return value


def progress(total: int | None, desc: str) -> tqdm[Any]:
    """A progress bar on stderr, shown only when stderr is a terminal."""
    return tqdm(total=total, desc=desc, unit="msg", unit_scale=True, disable=None, leave=False)
