"""Diagnostics the Rust core asks for (telemetry ``PrintThreadStackTraceCommand``)."""

from __future__ import annotations

import sys
import threading
import traceback


def thread_stacks() -> str:
    """The current stack of every Python thread, as text."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(
            f"Thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
        )
    return "\n".join(parts)
