"""The adversarial values of ``test_api_properties.py`` (``KINDS``: a hypothesis strategy per
parameter kind) and its oracle (:func:`check`, whose rules that module states); every call is
counted in ``TRIED`` and ``OUTCOMES`` for the module's report."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import strategies as st

import ferrymq

#: A call taking longer than this (seconds) counts as a hang.
CALL_LIMIT = 15.0
MIB = 1 << 20

# -- adversarial values -------------------------------------------------------------------------

INTS = [
    -(2**63) - 1,
    -(2**63),
    -(2**31) - 1,
    -1,
    0,
    1,
    2**15,
    2**16,
    2**31,
    2**32,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
]
FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, -0.0, 0.5, 5e-324]
STRINGS = [
    "",
    " ",
    "x" * MIB,
    "a\x00b",
    "\x00",
    "\ud800",
    "a\udfffb",
    "\x01\x02\x7f\n\t",
    "é漢字🙂",
    "a;b",
    "*",
    ">",
    "a.b",
    "%s%n",
]
BYTES: list[Any] = [b"", b"\x00" * 16, b"x" * MIB, bytearray(b"ab"), memoryview(b"cd")]
WRONG: list[Any] = [None, {}, [], (), {"a": 1}, ["a", 1], object(), True, b"bytes", 1j]
DURATIONS: list[Any] = [
    timedelta.max,
    timedelta.min,
    timedelta(0),
    timedelta(microseconds=1),
    timedelta(days=-1),
]
#: Durations for calls that block that long when the value is valid: only invalid or short.
SHORT_WAITS: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    -0.0,
    0,
    0.05,
    2**64,
    10**30,
    -(2**63) - 1,
    timedelta.max,
    timedelta.min,
    timedelta(milliseconds=50),
    "1",
    None,
    True,
    object(),
]

_edges = INTS + FLOATS + STRINGS + BYTES + WRONG + DURATIONS
EVERYTHING = st.one_of(
    st.sampled_from(_edges),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
KINDS: dict[str, st.SearchStrategy[Any]] = {
    "int": st.one_of(st.sampled_from(INTS), st.integers(), EVERYTHING),
    "float": st.one_of(st.sampled_from(FLOATS + INTS), st.floats(), EVERYTHING),
    "duration": st.one_of(st.sampled_from(DURATIONS + FLOATS + INTS), EVERYTHING),
    "wait": st.sampled_from(SHORT_WAITS),
    # a receive's wait: None is its 20 s default long poll (longer than CALL_LIMIT on an empty
    # source; the defaults are checked in test_receive_defaults.py)
    "receive_wait": st.sampled_from([w for w in SHORT_WAITS if w is not None]),
    "str": st.one_of(st.sampled_from(STRINGS), st.text(max_size=40), EVERYTHING),
    # endpoint strings: no random host names (they would be resolved over DNS)
    "endpoint": st.sampled_from(
        [*STRINGS, *WRONG, "127.0.0.1:1", "[::1]:99999", "host:-1", "a:b:c", "://", "x" * 300]
    ),
    "bytes": st.one_of(st.sampled_from(BYTES), st.binary(max_size=40), EVERYTHING),
    "bool": st.one_of(st.sampled_from([True, False, 0, 1, 2, -1, 2**64, None, "yes"]), EVERYTHING),
    "any": EVERYTHING,
}


def str_list(kind: str = "str") -> st.SearchStrategy[Any]:
    return st.one_of(KINDS[kind], st.lists(KINDS[kind], max_size=3))


KINDS["strs"] = str_list()
KINDS["mapping"] = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(STRINGS), st.text(max_size=40)), KINDS["str"], max_size=3
    ),
    st.dictionaries(EVERYTHING.filter(lambda v: v.__hash__ is not None), EVERYTHING, max_size=2),
    EVERYTHING,
)
KINDS["durations"] = st.one_of(st.lists(KINDS["duration"], max_size=3), EVERYTHING)
KINDS["list"] = st.one_of(st.lists(EVERYTHING, max_size=2), EVERYTHING)


def kinds(**params: str) -> dict[str, str]:
    """``{parameter: kind}`` from a table by kind: ``kinds(int="a b", str="c")``."""
    return {p: kind for kind, names in params.items() for p in names.split()}


# -- the oracle ---------------------------------------------------------------------------------

FORBIDDEN = (AttributeError, KeyError, IndexError, SystemError, ferrymq.InternalError)
TRIED: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:60] + f"...<{len(r)} chars>"


#: Set FERRYMQ_PROPS_SURVEY=1 to list every violation at the end instead of failing at the first.
SURVEY = os.environ.get("FERRYMQ_PROPS_SURVEY") == "1"
VIOLATIONS: dict[tuple[str, str], str] = {}


def violation(case: str, param: str, text: str) -> None:
    if not SURVEY:
        pytest.fail(text)
    VIOLATIONS.setdefault((case, param), text)


def names(e: BaseException, param: str, aliases: tuple[str, ...]) -> bool:
    """Whether the error names the parameter: in its message (``param``, the element of a
    plural parameter such as ``topic`` for ``topics``, or a listed alias), or, for a wrong type
    or a string PyO3 could not encode (a lone surrogate) refused while PyO3 read the
    arguments, in the note PyO3 attaches to it ("while processing 'param'")."""
    text = str(e)
    if any(n in text for n in (param, param.removesuffix("s"), *aliases)):
        return True
    notes = getattr(e, "__notes__", [])
    return isinstance(e, (UnicodeEncodeError, TypeError)) and f"'{param}'" in " ".join(notes)


def check(
    case: str, param: str, value: Any, call: Callable[[], Any], aliases: tuple[str, ...] = ()
) -> Any:
    """Run ``call`` and fail unless it succeeds or raises an allowed exception naming ``param``."""
    TRIED[case] += 1
    what = f"{case}({param}={_short(value)})"
    started = time.monotonic()
    try:
        result = call()
    except BaseException as e:  # the oracle looks at everything, even KeyboardInterrupt-likes
        elapsed = time.monotonic() - started
        if elapsed >= CALL_LIMIT:
            violation(case, param, f"{what} took {elapsed:.1f} s before raising {e!r}")
        kind = type(e).__name__
        OUTCOMES[kind] += 1
        text = str(e)
        if kind == "PanicException" or isinstance(e, FORBIDDEN):
            violation(case, param, f"{what} raised {kind}: {text[:300]}")
        elif not isinstance(e, (ferrymq.FerryError, TypeError, ValueError, OverflowError)):
            violation(case, param, f"{what} raised {kind} (not allowed): {text[:300]}")
        else:
            must_name = isinstance(e, (ferrymq.InvalidArgumentError, OverflowError, TypeError)) or (
                isinstance(e, ValueError) and not isinstance(e, ferrymq.FerryError)
            )
            if must_name and not names(e, param, aliases):
                violation(case, param, f"{what} raised {kind} not naming it: {text[:300]}")
        return None
    elapsed = time.monotonic() - started
    if elapsed >= CALL_LIMIT:
        violation(case, param, f"{what} took {elapsed:.1f} s")
    OUTCOMES["ok"] += 1
    return result


def closing(obj: Any) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        # closing a half-made client may fail; that is not under test
        with contextlib.suppress(Exception):
            close()
