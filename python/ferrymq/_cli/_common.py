"""What every command shares: exit codes and the one-line error."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tqdm import tqdm

import ferrymq

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


def _whole(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} {rule}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number above zero."""
    return _whole(text, 1, "must be above zero")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number, zero or more."""
    return _whole(text, 0, "must not be negative")


def progress(total: int | None, desc: str, *, delay: float = 0.0, quiet: bool = False) -> tqdm[Any]:
    """A progress bar on stderr, shown only when stderr is a terminal (and, with ``delay``,
    only once the run has lasted that many seconds; never when ``quiet``, e.g. while the
    command prints its output lines on the same terminal)."""
    return tqdm(
        total=total,
        desc=desc,
        unit="msg",
        unit_scale=True,
        disable=True if quiet else None,
        leave=False,
        delay=delay,
    )


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above zero")
    return value


def property_pair(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` (the value may hold ``=``; the key may not be empty)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def endpoint_topic_parser(
    sub: Any,
    name: str,
    *,
    help: str,
    description: str,
    epilog: str,
    endpoint: str,
    topic: str,
) -> argparse.ArgumentParser:
    """The subcommand ``name`` taking ``ENDPOINT TOPIC`` first (``endpoint`` and ``topic`` are
    their help texts), its description and examples shown as written."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("endpoint", metavar="ENDPOINT", help=endpoint)
    p.add_argument("topic", metavar="TOPIC", help=topic)
    return p


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """The options that say how to connect, the same for every command that talks to a broker;
    :func:`connection_options` turns them into client arguments."""
    group = parser.add_argument_group("connection")
    group.add_argument("--app", help="jmq://: the JMQ4 app (a consumer's app is its --group)")
    group.add_argument(
        "--token", help="jmq://: the app's token; nats://: an auth token (or $FERRYMQ_TOKEN)"
    )
    group.add_argument("--access-key", help="RocketMQ: the ACL access key (nats://: the user name)")
    group.add_argument(
        "--secret-key",
        help="RocketMQ: the ACL secret key (nats://: the password; or $FERRYMQ_SECRET_KEY)",
    )
    group.add_argument("--namespace", help="RocketMQ / JMQ4 namespace")
    group.add_argument(
        "--request-timeout",
        type=seconds,
        metavar="SECONDS",
        help="how long one request may take before it fails (default: the client's)",
    )


def connection_options(args: argparse.Namespace) -> dict[str, Any]:
    """Client keyword arguments for the connection options given on the command line (only
    those given: a client refuses, naming it, an option its protocol does not take)."""
    out: dict[str, Any] = {}
    secret = args.secret_key
    if args.access_key is not None:
        secret = secret if secret is not None else os.environ.get("FERRYMQ_SECRET_KEY")
        if secret is None:
            raise ferrymq.InvalidArgumentError(
                "--secret-key: --access-key needs it (or $FERRYMQ_SECRET_KEY)"
            )
        out["credentials"] = (args.access_key, secret)
    elif secret is not None:
        raise ferrymq.InvalidArgumentError("--access-key: --secret-key needs it")
    token = args.token if args.token is not None else os.environ.get("FERRYMQ_TOKEN")
    for name, value in (
        ("app", args.app),
        ("token", token),
        ("namespace", args.namespace),
        ("request_timeout", args.request_timeout),
    ):
        if value is not None:
            out[name] = value
    return out


class Interrupts:
    """Ctrl-C as ``KeyboardInterrupt``, except inside :meth:`hold`: there it is kept until
    :meth:`check`, so that a message is never printed without being counted (or the other way
    round). Blocking ferrymq calls outside ``hold`` are interrupted as usual. Use as a context
    manager around the command (it installs its SIGINT handler on the main thread only)."""

    def __init__(self) -> None:
        self._holding = 0
        self._pending = False
        self._previous: Any = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self._holding:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1

    def check(self) -> None:
        """Raise the ``KeyboardInterrupt`` kept while holding, if any."""
        if self._pending and not self._holding:
            self._pending = False
            raise KeyboardInterrupt
