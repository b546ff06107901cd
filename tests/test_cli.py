"""The ``ferrymq`` command line, run as a real process: commands, exit codes, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def ferrymq(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrymq", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_version_names_the_features() -> None:
    done = ferrymq("version")
    assert done.returncode == 0
    assert done.stdout.startswith("ferrymq ")
    assert "rocketmq-v2" in done.stdout


def test_help_lists_the_commands_and_the_exit_codes() -> None:
    done = ferrymq("--help")
    assert done.returncode == 0
    for command in ("version", "broker", "demo", "produce", "consume", "bench"):
        assert command in done.stdout
    assert "130 interrupted" in done.stdout


@pytest.mark.parametrize("args", [["demo", "--messages", "0"], ["no-such-command"]])
def test_bad_usage_exits_2_with_one_line(args: list[str]) -> None:
    done = ferrymq(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ferrymq")


def test_demo_counts_every_message() -> None:
    done = ferrymq("demo", "--messages", "3000", "--batch", "300")
    assert done.returncode == 0, done.stderr
    assert "sent 3,000 in" in done.stdout
    assert "all received after" in done.stdout
    # Not a terminal: no progress bar in the output.
    assert "msg/s]" not in done.stderr
