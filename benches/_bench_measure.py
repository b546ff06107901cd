"""What a Python benchmark measures, stated once: this process's CPU time (user + system) and
context switches, another process's CPU time, and the wall time, CPU time and context switches
of one round (:class:`Span`); and the argument parser with a benchmark's sizes
(:func:`parser`)."""

from __future__ import annotations

import argparse
import os
import resource
import time


def usage() -> tuple[float, int]:
    """This process's CPU seconds (user + system) and context switches so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw


def cpu_seconds() -> float:
    """This process's CPU seconds (user + system) so far."""
    return usage()[0]


def process_cpu_seconds(pid: int | None) -> float | None:
    """CPU time (user + system) of another process of this machine, from /proc."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_usage(pid: int | None) -> tuple[float, int]:
    """CPU seconds (user + system) and context switches (every thread's) of a process of this
    machine, from /proc; ``(0.0, 0)`` for ``None``."""
    if pid is None:
        return 0.0, 0
    switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:  # voluntary and involuntary
                        switches += int(line.split()[-1])
        except OSError:
            continue  # the thread ended meanwhile
    return process_cpu_seconds(pid) or 0.0, switches


class Span:
    """Wall time, CPU time and context switches of this process from creation on."""

    def __init__(self) -> None:
        self.cpu0, self.cs0 = usage()
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def stop(self) -> tuple[float, float]:
        """``(wall seconds, CPU seconds)`` since creation."""
        return self.elapsed(), cpu_seconds() - self.cpu0

    def rate(self, done: int) -> tuple[float, float, float]:
        """``done`` messages since creation as (messages/s, CPU microseconds per message,
        context switches per message)."""
        elapsed = self.elapsed()
        cpu, cs = usage()
        return done / elapsed, (cpu - self.cpu0) / done * 1e6, (cs - self.cs0) / done


def parser(doc: str | None, **sizes: int) -> argparse.ArgumentParser:
    """An argument parser described by the first line of ``doc``, with an int option
    ``--<name>`` for each of ``sizes`` (``messages=20_000, rounds=2`` …: name and default)."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    for name, default in sizes.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    return ap
