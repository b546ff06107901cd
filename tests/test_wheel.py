"""The release wheel installs and runs where no Rust toolchain is (#21).

``scripts/build-wheel`` builds ``dist/ferrymq-VERSION-cp310-abi3-manylinux2014_x86_64.
manylinux_2_17_x86_64.whl`` (zig links it against glibc 2.17) and the sdist next to it;
``scripts/test`` exports the wheel's path as ``FERRYMQ_WHEEL``. These tests check the wheel's
tags and the glibc symbol versions its extension module needs, install it into a fresh
virtualenv with every directory holding ``cargo`` or ``rustc`` removed from ``PATH``, and run
the installed ``ferrymq`` command on its embedded broker. Installing fetches the wheel's
pure-Python dependencies (tqdm) from the package index.

``FERRYMQ_WHEEL`` set but naming no file fails the tests; unset (a developer's run), they test
the manylinux2014 wheel in the repository's ``dist/`` and are skipped when there is none.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The environment variable naming the wheel under test (set by scripts/test).
WHEEL_ENV = "FERRYMQ_WHEEL"
ROOT = Path(__file__).resolve().parent.parent
#: The platform tags of a manylinux2014 x86_64 wheel (legacy name and its PEP 600 alias).
PLATFORM = "manylinux2014_x86_64.manylinux_2_17_x86_64"
#: The oldest glibc the wheel promises to run on.
GLIBC_FLOOR = (2, 17)

# The traffic the installed command runs on its embedded broker; the exit code says whether
# every message arrived (3 when some did not).
TRAFFIC = ["bench", "--count", "2000"]


def _wheel_path() -> Path:
    named = os.environ.get(WHEEL_ENV)
    if named:
        path = Path(named)
        assert path.is_file(), f"{WHEEL_ENV}={named} names no file: the wheel build failed?"
        return path
    found = sorted((ROOT / "dist").glob(f"ferrymq-*-{PLATFORM}.whl"))
    if not found:
        pytest.skip(
            f"{WHEEL_ENV} is unset and dist/ holds no {PLATFORM} wheel: "
            "build one with scripts/build-wheel (scripts/test does and sets it)"
        )
    assert len(found) == 1, f"several release wheels in dist/: {found}"
    return found[0]


@pytest.fixture(scope="module")
def wheel() -> Path:
    return _wheel_path()


def _version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def test_wheel_is_abi3_manylinux2014(wheel: Path) -> None:
    assert wheel.name == f"ferrymq-{_version(wheel)}-cp310-abi3-{PLATFORM}.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"ferrymq-{_version(wheel)}.dist-info/WHEEL").decode()
    tags = set(re.findall(r"^Tag: (\S+)$", meta, re.MULTILINE))
    assert tags == {
        "cp310-abi3-manylinux_2_17_x86_64",
        "cp310-abi3-manylinux2014_x86_64",
    }, meta
    assert "Root-Is-Purelib: false" in meta


def _glibc_versions(elf: bytes) -> set[tuple[int, ...]]:
    """The ``GLIBC_x.y`` versions an ELF64 little-endian shared object needs, read from its
    version-needs section (what ``readelf -V`` prints under ``.gnu.version_r``)."""
    assert elf[:4] == b"\x7fELF", "not an ELF object"
    assert elf[4:6] == b"\x02\x01", "not a 64-bit little-endian ELF object"
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    sht_gnu_verneed = 0x6FFFFFFE
    needed: set[tuple[int, ...]] = set()
    for _, sh_type, _, _, offset, _, link, count, _, _ in sections:
        if sh_type != sht_gnu_verneed:
            continue
        strtab = sections[link][4]
        entry = offset
        for _ in range(count):
            _, aux_count, _, aux, next_entry = struct.unpack_from("<HHIII", elf, entry)
            at = entry + aux
            for _ in range(aux_count):
                _, _, _, name, next_aux = struct.unpack_from("<IHHII", elf, at)
                end = elf.index(b"\0", strtab + name)
                text = elf[strtab + name : end].decode()
                if text.startswith("GLIBC_") and text[6:7].isdigit():
                    needed.add(tuple(int(p) for p in text[6:].split(".")))
                at += next_aux
            entry += next_entry
    return needed


def test_extension_needs_no_glibc_above_2_17(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        modules = [n for n in z.namelist() if re.fullmatch(r"ferrymq/_native\..*\.so", n)]
        assert modules == ["ferrymq/_native.abi3.so"], z.namelist()
        needed = _glibc_versions(z.read(modules[0]))
    assert needed, "the extension module names no GLIBC version: is it linked against glibc?"
    too_new = sorted(v for v in needed if v > GLIBC_FLOOR)
    assert not too_new, f"needs glibc {too_new}, above {GLIBC_FLOOR}"


def test_sdist_holds_the_sources(wheel: Path) -> None:
    sdist = wheel.parent / f"ferrymq-{_version(wheel)}.tar.gz"
    assert sdist.is_file(), f"no sdist next to the wheel: {sdist}"
    top = f"ferrymq-{_version(wheel)}/"
    with tarfile.open(sdist) as t:
        names = {n.removeprefix(top) for n in t.getnames()}
    for needed in (
        "Cargo.toml",
        "Cargo.lock",
        "pyproject.toml",
        "README.md",
        "rust/ferrymq-core/Cargo.toml",
        "rust/ferrymq-core/build.rs",
        "rust/ferrymq-core/src/lib.rs",
        "rust/ferrymq-core/proto/apache/rocketmq/v2/service.proto",
        "rust/ferrymq-server/Cargo.toml",
        "rust/ferrymq-python/Cargo.toml",
        "rust/ferrymq-python/src/lib.rs",
        "python/ferrymq/__init__.py",
        "python/ferrymq/_native.pyi",
        "python/ferrymq/py.typed",
        "python/ferrymq/_cli/__init__.py",
    ):
        assert needed in names, f"{needed} missing from {sdist.name}"


def _without_rust(path: str) -> str:
    """``path`` without the directories that hold ``cargo`` or ``rustc``."""
    return os.pathsep.join(
        d
        for d in path.split(os.pathsep)
        if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("cargo", "rustc"))
    )


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv for ``wheel`` (not installed yet); its ``bin`` directory."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv / "bin"


def _env(bin_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CARGO", "RUSTUP", "RUSTC"))
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), _without_rust(os.environ.get("PATH", ""))])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(bin_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(bin_dir),
        cwd=bin_dir.parent,
    )


@pytest.fixture(scope="module")
def ferrymq_bin(wheel: Path, installed: Path) -> Path:
    """The installed console script; installing compiles nothing (binary packages only)."""
    assert shutil.which("cargo", path=_env(installed)["PATH"]) is None
    assert shutil.which("rustc", path=_env(installed)["PATH"]) is None
    done = _run(
        installed,
        str(installed / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary",
        ":all:",
        str(wheel),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return installed / "ferrymq"


def test_installed_module_comes_from_the_wheel(installed: Path, ferrymq_bin: Path) -> None:
    done = _run(
        installed,
        str(installed / "python"),
        "-c",
        "import ferrymq, ferrymq._native as n; print(ferrymq.__file__); print(n.__file__)",
    )
    assert done.returncode == 0, done.stderr
    venv = installed.parent.resolve()
    for line in done.stdout.splitlines():
        assert Path(line).resolve().is_relative_to(venv), done.stdout


def test_installed_command_prints_the_version(wheel: Path, ferrymq_bin: Path) -> None:
    done = _run(ferrymq_bin.parent, str(ferrymq_bin), "version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ferrymq {_version(wheel)} "), done.stdout
    assert "rocketmq-v2" in done.stdout


def test_installed_command_runs_traffic_on_the_embedded_broker(ferrymq_bin: Path) -> None:
    done = _run(ferrymq_bin.parent, str(ferrymq_bin), *TRAFFIC)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "all 2,000 messages received" in done.stdout
    assert "p99.9" in done.stdout
