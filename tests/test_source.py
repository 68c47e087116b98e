"""Tests for sglang_audit.source: locating checkouts, archives, releases and the install."""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sglang_audit.errors import SourceError
from sglang_audit.source import archives, download_watch
from sglang_audit.source import locate as source
from sglang_audit.source.locate import SourceTree, locate_source

SERVER_ARGS = b"class ServerArgs: pass\n"
# Executing this would fail the test loudly: the locator must never import SGLang.
INIT = b"raise RuntimeError('sglang must not be imported by the locator')\n"


def metadata(version: str = "0.5.10", requires: tuple[str, ...] = ()) -> bytes:
    lines = ["Metadata-Version: 2.4", "Name: sglang", f"Version: {version}"]
    lines += [f"Requires-Dist: {req}" for req in requires]
    # The README body mentions flashinfer too; only the headers may count.
    lines += ["", "Requires-Dist: flashinfer_python==9.9.9", ""]
    return "\n".join(lines).encode()


DEFAULT_REQUIRES = (
    "torch==2.8.0",
    "flashinfer_python==0.6.7.post2",
    "flashinfer_cubin==0.6.7.post2",
)


def wheel_members(
    version: str = "0.5.10", requires: tuple[str, ...] = DEFAULT_REQUIRES
) -> dict[str, bytes]:
    return {
        "sglang/__init__.py": INIT,
        "sglang/srt/server_args.py": SERVER_ARGS,
        f"sglang-{version}.dist-info/METADATA": metadata(version, requires),
        "tools/unused.py": b"x = 1\n",  # not under sglang/: must not be extracted
    }


def write_zip(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)  # str name: no sanitising, deflated
    return path


def tar_add(tf: tarfile.TarFile, name: str, data: bytes = b"", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data) if info.isreg() else None)


def write_tar(
    path: Path, members: dict[str, bytes], extra: Callable[[tarfile.TarFile], None] | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            tar_add(tf, name, data)
        if extra is not None:
            extra(tf)
    return path


def sdist_members(top: str = "sglang-0.5.9", *, python_dir: bool = False) -> dict[str, bytes]:
    pkg = f"{top}/python/sglang" if python_dir else f"{top}/sglang"
    pyproject = f"{top}/python/pyproject.toml" if python_dir else f"{top}/pyproject.toml"
    return {
        f"{top}/PKG-INFO": metadata("0.5.9", ('flashinfer_python==0.6.3; extra == "srt"',)),
        pyproject: b'[project]\nname = "sglang"\ndynamic = ["version"]\n',
        f"{pkg}/__init__.py": INIT,
        f"{pkg}/srt/server_args.py": SERVER_ARGS,
        f"{top}/docs/readme.md": b"docs\n",
    }


def snapshot(root: Path, skip: Path) -> set[str]:
    """Every path under `root` except those inside `skip` (the cache dir)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if skip not in (p, *p.parents)}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("SGLANG_AUDIT_CACHE_DIR", str(path))
    return path


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    # Deep enough that `../../../x` from the extraction dir would land inside tmp_path.
    path = tmp_path / "in"
    path.mkdir()
    return path


@pytest.fixture
def guard(tmp_path: Path, cache: Path, inputs: Path) -> Iterator[None]:
    """Fail if anything is written outside the cache dir, and check no temp dirs linger.

    The only new files allowed outside the cache are the test's own input archives.
    """
    before = snapshot(tmp_path, cache)
    yield
    added = snapshot(tmp_path, cache) - before
    assert {p for p in added if not (p.startswith("in/") and p.count("/") == 1)} == set()
    assert all(p.endswith((".whl", ".zip", ".tar.gz")) for p in added)
    assert [p.name for p in (cache / "sources").glob(".*")] == []  # no temp dirs left


# --------------------------------------------------------------------------- checkouts


def make_package(pkg: Path) -> Path:
    (pkg / "srt").mkdir(parents=True)
    (pkg / "srt" / "server_args.py").write_bytes(SERVER_ARGS)
    (pkg / "__init__.py").write_bytes(INIT)
    return pkg


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "sglang-repo"
    make_package(root / "python" / "sglang")
    (root / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\nversion = "0.5.1.post3"\n'
        "dependencies = []\n\n[project.optional-dependencies]\n"
        '# old = ["flashinfer_python==0.1.0"]\n'
        'srt = [\n    "torch==2.8.0",\n    "flashinfer_python==0.3.0rc1",\n]\n'
    )
    return root


def test_checkout_repo_root(repo: Path, cache: Path) -> None:
    tree = locate_source(str(repo))
    assert tree == SourceTree(
        package_dir=Path(os.path.realpath(repo / "python" / "sglang")),
        version="0.5.1.post3",
        flashinfer="0.3.0rc1",  # the commented-out pin is ignored
        origin=str(repo),
    )
    assert not cache.exists()  # a checkout is used in place


def test_checkout_parent_and_package_dir(repo: Path) -> None:
    python_dir = repo / "python"
    pkg = python_dir / "sglang"
    assert locate_source(str(python_dir)).package_dir == Path(os.path.realpath(pkg))
    tree = locate_source(str(pkg))
    assert tree.package_dir == Path(os.path.realpath(pkg))
    assert (tree.version, tree.flashinfer, tree.origin) == ("0.5.1.post3", "0.3.0rc1", str(pkg))


def test_checkout_version_from_version_py_and_foreign_pyproject_ignored(tmp_path: Path) -> None:
    pkg = make_package(tmp_path / "proj" / "sglang")
    (pkg / "version.py").write_text('__version__ = "0.4.6"\n')
    # Someone else's project around the package: its version and pins are not SGLang's.
    (tmp_path / "proj" / "pyproject.toml").write_text(
        '[project]\nname = "other"\nversion = "9.0"\ndependencies = ["flashinfer_python==1.0"]\n'
    )
    tree = locate_source(str(tmp_path / "proj"))
    assert (tree.version, tree.flashinfer) == ("0.4.6", None)


def test_checkout_generated_version_file_beats_dynamic_version_py(tmp_path: Path) -> None:
    pkg = make_package(tmp_path / "sglang")
    (pkg / "version.py").write_text(
        'try:\n    from sglang._version import __version__\nexcept ImportError:\n    __version__ = "0.0.0"\n'
    )
    (pkg / "_version.py").write_text("__version__ = version = '0.5.10'\n")
    assert locate_source(str(pkg)).version == "0.5.10"


def test_dir_without_sglang(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sglang").mkdir(parents=True)  # package dir but no srt/server_args.py
    with pytest.raises(
        SourceError, match=r"^no SGLang package found in .*empty \(expected python/sglang"
    ):
        locate_source(str(tmp_path / "empty"))


def test_checkout_symlink_out_of_tree_is_not_followed(tmp_path: Path) -> None:
    outside = make_package(tmp_path / "elsewhere" / "sglang")
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    (tree_dir / "sglang").symlink_to(outside)
    loop = tree_dir / "python"
    loop.symlink_to(loop)  # a symlink loop must not hang or crash the search
    with pytest.raises(SourceError, match="no SGLang package found in"):
        locate_source(str(tree_dir))


def test_checkout_server_args_must_be_regular_file(tmp_path: Path) -> None:
    pkg = tmp_path / "sglang"
    (pkg / "srt" / "server_args.py").mkdir(parents=True)  # a directory, not a file
    with pytest.raises(SourceError, match="no SGLang package found in"):
        locate_source(str(pkg))


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "sglang-0.5.10-py3-none-any.whl"
    with pytest.raises(
        SourceError, match=r"^source not found: .*nope/sglang-0\.5\.10-py3-none-any\.whl$"
    ):
        locate_source(str(missing))


@pytest.mark.parametrize(
    "spec",
    ["sglang==", "sglang>=0.5", "sglang=0.5.10", "sglang==0.5.*", "sglang[srt]==0.5.10", "sglang"],
)
def test_malformed_release_spec(spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # so `sglang` is not an existing relative dir
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must not run pip"))
    with pytest.raises(SourceError, match=r"expected sglang==X\.Y\.Z") as info:
        locate_source(spec)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- wheels


def test_wheel_extraction_version_and_pin(inputs: Path, cache: Path, guard: None) -> None:
    whl = write_zip(inputs / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    messages: list[str] = []
    tree = locate_source(str(whl), progress=messages.append)
    root = tree.package_dir.parent
    assert root.parent == cache / "sources" and len(root.name) == 16
    assert (tree.version, tree.flashinfer, tree.origin) == ("0.5.10", "0.6.7.post2", str(whl))
    assert (tree.package_dir / "srt" / "server_args.py").read_bytes() == SERVER_ARGS
    assert (root / "sglang-0.5.10.dist-info" / "METADATA").is_file()
    assert not (root / "tools").exists()  # only sglang/ and the METADATA are kept
    assert messages and messages[0].startswith("extracting sglang-0.5.10-py3-none-any.whl")
    assert tree.to_json() == {
        "package_dir": str(tree.package_dir),
        "version": "0.5.10",
        "flashinfer": "0.6.7.post2",
        "origin": str(whl),
    }


@pytest.mark.parametrize(
    ("requires", "pin"),
    [
        (("flashinfer_python[cu13]==0.7.2",), "0.7.2"),
        (("flashinfer-python==0.6.1",), "0.6.1"),
        (('flashinfer_python==0.2.3; extra == "srt"',), "0.2.3"),
        # An unconditional pin beats one limited by an environment marker.
        (("flashinfer_python==0.1; sys_platform == 'darwin'", "flashinfer_python==0.2"), "0.2"),
        (("flashinfer_python>=0.2", "flashinfer_cubin==0.5"), None),
        ((), None),
    ],
)
def test_wheel_flashinfer_pin_forms(
    requires: tuple[str, ...], pin: str | None, inputs: Path, cache: Path
) -> None:
    whl = write_zip(inputs / "w.whl", wheel_members("0.5.13", requires))
    tree = locate_source(str(whl))
    assert (tree.version, tree.flashinfer) == ("0.5.13", pin)


def test_archive_reused_when_complete(
    inputs: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whl = write_zip(inputs / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    first = locate_source(str(whl))
    marker = first.package_dir.parent / ".sglang-audit-complete"
    assert marker.is_file()

    def no_extract(*args: object) -> None:
        raise AssertionError("a complete extraction must be reused")

    monkeypatch.setattr(source, "_extract", no_extract)
    messages: list[str] = []
    assert locate_source(str(whl), progress=messages.append) == first
    assert messages == []


def test_incomplete_extraction_is_redone(inputs: Path, cache: Path) -> None:
    whl = write_zip(inputs / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    tree = locate_source(str(whl))
    root = tree.package_dir.parent
    (root / ".sglang-audit-complete").unlink()  # as if a run died before finishing
    (tree.package_dir / "srt" / "server_args.py").write_text("truncated")
    again = locate_source(str(whl))
    assert again == tree
    assert (again.package_dir / "srt" / "server_args.py").read_bytes() == SERVER_ARGS


def test_archive_without_sglang(inputs: Path, cache: Path, guard: None) -> None:
    whl = write_zip(inputs / "other-1.0-py3-none-any.whl", {"other/__init__.py": b""})
    with pytest.raises(
        SourceError, match=r"no SGLang package found in .*other-1\.0-py3-none-any\.whl"
    ):
        locate_source(str(whl))
    assert list((cache / "sources").iterdir()) == []  # nothing half-done is cached


def test_not_an_archive(inputs: Path, cache: Path) -> None:
    junk = inputs / "sglang-0.5.10-py3-none-any.whl"
    junk.write_text("not a zip")
    with pytest.raises(SourceError, match=r"^not a wheel or sdist archive .*sglang-0\.5\.10"):
        locate_source(str(junk))


def test_cache_not_writable(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("SGLANG_AUDIT_CACHE_DIR", str(blocker))
    whl = write_zip(inputs / "w.whl", wheel_members())
    with pytest.raises(
        SourceError,
        match=r"^cache dir .*cache-is-a-file is not writable; set SGLANG_AUDIT_CACHE_DIR$",
    ):
        locate_source(str(whl))
    with pytest.raises(SourceError, match="is not writable; set SGLANG_AUDIT_CACHE_DIR"):
        locate_source("sglang==0.5.10")


# --------------------------------------------------------------------------- sdists


def test_sdist_tar_gz(inputs: Path, cache: Path, guard: None) -> None:
    sdist = write_tar(inputs / "sglang-0.5.9.tar.gz", sdist_members())
    tree = locate_source(str(sdist))
    assert (
        tree.package_dir
        == cache / "sources" / tree.package_dir.parents[1].name / "sglang-0.5.9" / "sglang"
    )
    assert (tree.version, tree.flashinfer) == ("0.5.9", "0.6.3")  # from PKG-INFO
    assert not (tree.package_dir.parent / "docs").exists()


def test_sdist_zip_with_python_dir_layout(inputs: Path, cache: Path, guard: None) -> None:
    sdist = write_zip(inputs / "sglang-0.5.9.zip", sdist_members("sglang-main", python_dir=True))
    tree = locate_source(str(sdist))
    assert tree.package_dir.parts[-3:] == ("sglang-main", "python", "sglang")
    assert (tree.package_dir.parent / "pyproject.toml").is_file()
    assert (tree.version, tree.flashinfer) == ("0.5.9", "0.6.3")


def test_sdist_version_from_pyproject(inputs: Path, cache: Path) -> None:
    members = {
        "sglang-0.5.1/pyproject.toml": b'[project]\nname = "sglang"\nversion = "0.5.1"\ndependencies = ["flashinfer_python==0.2.11.post3"]\n',
        "sglang-0.5.1/sglang/srt/server_args.py": SERVER_ARGS,
    }
    tree = locate_source(str(write_tar(inputs / "sglang-0.5.1.tar.gz", members)))
    assert (tree.version, tree.flashinfer) == ("0.5.1", "0.2.11.post3")


# --------------------------------------------------------------------------- refusals

GOOD = {"sglang/srt/server_args.py": SERVER_ARGS}


def refused(archive: Path, pattern: str) -> None:
    with pytest.raises(SourceError, match=pattern) as info:
        locate_source(str(archive))
    assert "\n" not in str(info.value)
    assert not list(archive.parents[1].rglob("evil*"))  # nothing landed anywhere


@pytest.mark.parametrize(
    "name", ["../../../evil.py", "sglang/../../evil.py", "sglang\\..\\..\\evil.py"]
)
def test_refuse_dotdot_member(name: str, inputs: Path, guard: None) -> None:
    refused(
        write_zip(inputs / "a.whl", {**GOOD, name: b"x"}),
        re.escape(f"member {name!r} has a '..' path component"),
    )
    refused(write_tar(inputs / "a.tar.gz", {**GOOD, name: b"x"}), "'..' path component")


def test_refuse_absolute_member(inputs: Path, tmp_path: Path, guard: None) -> None:
    evil = str(tmp_path / "evil.py")
    refused(
        write_zip(inputs / "a.whl", {**GOOD, evil: b"x"}), rf"member '{evil}' has an absolute path"
    )
    refused(
        write_tar(inputs / "a.tar.gz", {**GOOD, evil: b"x"}),
        rf"member '{evil}' has an absolute path",
    )
    assert not Path(evil).exists()


def test_refuse_tar_symlink(inputs: Path, guard: None) -> None:
    def link(tf: tarfile.TarFile) -> None:
        tar_add(tf, "sglang/evil_link", type=tarfile.SYMTYPE, linkname="/etc/passwd")

    refused(
        write_tar(inputs / "a.tar.gz", GOOD, link),
        r"member 'sglang/evil_link' is a symlink \(to '/etc/passwd'\)",
    )


def test_refuse_tar_hardlink(inputs: Path, guard: None) -> None:
    def link(tf: tarfile.TarFile) -> None:
        tar_add(tf, "sglang-0.5.9/sglang/evil_hard", type=tarfile.LNKTYPE, linkname="/etc/passwd")

    refused(
        write_tar(inputs / "a.tar.gz", GOOD, link),
        "member 'sglang-0.5.9/sglang/evil_hard' is a hardlink",
    )


def test_refuse_zip_symlink_entry(inputs: Path, guard: None) -> None:
    archive = write_zip(inputs / "a.whl", GOOD)
    with zipfile.ZipFile(archive, "a") as zf:
        info = zipfile.ZipInfo("sglang/srt/evil_link.py")
        info.create_system = 3  # unix, so the mode bits in external_attr count
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    refused(archive, r"member 'sglang/srt/evil_link\.py' is a symlink")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_refuse_duplicate_names(kind: str, inputs: Path, guard: None) -> None:
    if kind == "zip":
        archive = write_zip(inputs / "a.whl", GOOD)
        with warnings.catch_warnings(), zipfile.ZipFile(archive, "a") as zf:
            warnings.simplefilter("ignore")  # zipfile warns about the duplicate we want
            zf.writestr("sglang/srt/server_args.py", b"evil = True\n")
    else:
        archive = write_tar(
            inputs / "a.tar.gz",
            GOOD,
            lambda tf: tar_add(tf, "./sglang/srt/server_args.py", b"evil"),
        )
    refused(archive, r"duplicate member name '(\./)?sglang/srt/server_args\.py'")


def test_refuse_zip_bomb_member(inputs: Path, guard: None) -> None:
    archive = inputs / "bomb.whl"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("sglang/srt/server_args.py", SERVER_ARGS)
        info = zipfile.ZipInfo("sglang/zeros.bin")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as out:
            block = b"\0" * 2**20
            for _ in range(201):  # 201 MiB of zeros compress to ~200 KB
                out.write(block)
    assert archive.stat().st_size < 2**20
    refused(
        archive, r"member 'sglang/zeros\.bin' is 201 MiB uncompressed \(limit 200 MiB; zip bomb\?\)"
    )


def test_refuse_high_compression_ratio(inputs: Path, guard: None) -> None:
    archive = write_zip(inputs / "ratio.whl", {**GOOD, "sglang/zeros.bin": b"\0" * (4 * 2**20)})
    refused(archive, r"member 'sglang/zeros\.bin' has compression ratio above 100:1")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_refuse_total_size(
    kind: str, inputs: Path, guard: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archives, "MAX_TOTAL_BYTES", 1000)  # stands in for 2 GiB
    members = {**GOOD, **{f"sglang/data{i}.txt": os.urandom(300) for i in range(5)}}
    archive = (
        write_zip(inputs / "a.whl", members)
        if kind == "zip"
        else write_tar(inputs / "a.tar.gz", members)
    )
    refused(archive, r"more than 0 MiB uncompressed \(at member 'sglang/data\d\.txt'")


def test_refuse_tar_member_bigger_than_limit_before_reading_it(
    inputs: Path, guard: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 2**20)
    members = {**GOOD, "pkg/unrelated.bin": b"\0" * (2 * 2**20)}  # outside sglang/: still counted
    refused(
        write_tar(inputs / "a.tar.gz", members),
        r"member 'pkg/unrelated\.bin' is 2 MiB uncompressed",
    )


# --------------------------------------------------------------------------- releases


def fake_pip(
    results: list[tuple[int, str]], calls: list[list[str]], wheel: dict[str, bytes] | None = None
):
    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        assert kwargs.get("timeout") == 300
        code, stderr = results[len(calls) - 1]
        if code == 0 and wheel is not None:
            dest = Path(cmd[cmd.index("-d") + 1])
            write_zip(dest / f"sglang-{cmd[-1].split('==')[1]}-py3-none-any.whl", wheel)
        return subprocess.CompletedProcess(cmd, code, "", stderr)

    return run


NOT_FOUND = (
    "ERROR: Could not find a version that satisfies the requirement sglang==0.0.999 (from versions: 0.5.9, 0.5.10)\n"
    "ERROR: No matching distribution found for sglang==0.0.999\n"
)
OFFLINE = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection "
    "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: "
    "Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/sglang/\n"
    "ERROR: Could not find a version that satisfies the requirement sglang==0.5.10 (from versions: none)\n"
    "ERROR: No matching distribution found for sglang==0.5.10\n"
)


def test_release_no_such_version(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", fake_pip([(1, NOT_FOUND), (1, NOT_FOUND)], calls))
    messages: list[str] = []
    with pytest.raises(SourceError) as info:
        locate_source("sglang==0.0.999", progress=messages.append)
    assert str(info.value) == "sglang==0.0.999: no such release on the package index"
    assert messages[0] == "downloading sglang==0.0.999 from the package index ..."
    # The first attempt wants a wheel; the retry allows an sdist. Nothing is installed.
    assert calls[0][:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert "--only-binary=:all:" in calls[0] and "--only-binary=:all:" not in calls[1]
    assert all(cmd[-1] == "sglang==0.0.999" and "install" not in cmd for cmd in calls)
    assert [p.name for p in (cache / "wheels").iterdir()] == []  # staging dir cleaned up


def test_release_network_failure(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", fake_pip([(1, OFFLINE)], calls))
    with pytest.raises(SourceError) as info:
        locate_source("sglang==0.5.10")
    message = str(info.value)
    assert message.startswith("sglang==0.5.10: download failed (no network?): Retrying (Retry(")
    assert "Temporary failure in name resolution" in message and "\n" not in message
    assert len(calls) == 1  # a network failure is not retried as "no wheel"


def test_release_other_failure_uses_last_stderr_line(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = (
        "Traceback (most recent call last):\n  ...\nOSError: [Errno 28] No space left on device\n"
    )
    monkeypatch.setattr(subprocess, "run", fake_pip([(2, stderr)], []))
    with pytest.raises(SourceError) as info:
        locate_source("sglang==0.5.10")
    assert (
        str(info.value)
        == "sglang==0.5.10: download failed (no network?): OSError: [Errno 28] No space left on device"
    )


def test_release_timeout(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(cmd, 300)

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(
        SourceError,
        match=r"^sglang==0\.5\.10: download failed \(no network\?\): pip timed out after 300 s$",
    ):
        locate_source("sglang==0.5.10")


def test_release_download_then_cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", fake_pip([(0, "")], calls, wheel_members("0.5.10")))
    tree = locate_source("sglang==0.5.10")
    assert (tree.version, tree.flashinfer, tree.origin) == (
        "0.5.10",
        "0.6.7.post2",
        "sglang==0.5.10",
    )
    assert [p.name for p in (cache / "wheels").iterdir()] == ["sglang-0.5.10-py3-none-any.whl"]
    # Second time the cached wheel is used: pip is not run again.
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must use the cached wheel"))
    assert locate_source("sglang==0.5.10") == tree
    assert len(calls) == 1


def _pip_via_tmpdir(wait_for: Callable[[], bool] | None = None):
    """A fake `pip download` that, as pip does, writes the archive into its TMPDIR first and
    copies it into -d when complete; ``wait_for`` holds it mid-download until true."""

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        dest = Path(cmd[cmd.index("-d") + 1])
        env = kwargs["env"]
        assert isinstance(env, dict)
        tmp = Path(env["TMPDIR"])
        assert tmp.parent == dest  # pip's temp files stay inside the staging dir
        name = f"sglang-{cmd[-1].split('==')[1]}-py3-none-any.whl"
        # 2.5 MB of stored (incompressible) padding: a size the status line shows in MB
        members = {**wheel_members("0.5.10"), "tools/pad.bin": os.urandom(2_500_000)}
        partial = write_zip(tmp / "pip-unpack-x" / name, members)
        if wait_for is not None:
            for _ in range(1000):
                if wait_for():
                    break
                time.sleep(0.01)
            assert wait_for(), "the download's bytes were never shown while pip ran"
        shutil.copy(partial, dest / name)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_download_progress_in_bytes_on_a_terminal(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang_audit.cli import common

    monkeypatch.setattr(common, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(download_watch, "DOWNLOAD_POLL", 0.01)
    shown: list[str] = []
    real_show = common.STATUS.show

    def spy(text: str) -> None:
        shown.append(text)
        real_show(text)

    monkeypatch.setattr(common.STATUS, "show", spy)
    # pip is held mid-download until the status line has shown the bytes of its temp file
    mid = _pip_via_tmpdir(lambda: any(t.endswith(" MB") for t in shown))
    monkeypatch.setattr(subprocess, "run", mid)
    tree = locate_source("sglang==0.5.10", progress=common.progress)
    assert tree.version == "0.5.10"
    size = (cache / "wheels" / "sglang-0.5.10-py3-none-any.whl").stat().st_size
    assert size > 2_500_000
    want = f"downloading sglang==0.5.10: {download_watch.format_bytes(size)}"
    assert want in shown  # counted while pip still had the file in its TMPDIR
    err = capsys.readouterr().err
    assert "\r\x1b[K" + want in err
    assert f"downloaded sglang==0.5.10 ({download_watch.format_bytes(size)})" in err
    assert download_watch.format_bytes(size).endswith(" MB") and download_watch.format_bytes(999) == "1 kB"


def test_download_prints_nothing_when_piped(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang_audit.cli import common

    monkeypatch.setattr(common, "_stderr_is_tty", lambda: False)
    monkeypatch.setattr(download_watch, "DOWNLOAD_POLL", 0.01)
    monkeypatch.setattr(subprocess, "run", _pip_via_tmpdir(lambda: True))
    assert locate_source("sglang==0.5.10", progress=common.progress).version == "0.5.10"
    assert capsys.readouterr().err == ""


def test_release_sdist_fallback(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if "--only-binary=:all:" in cmd:  # e.g. only cp311 wheels exist for this release
            return subprocess.CompletedProcess(cmd, 1, "", NOT_FOUND)
        write_tar(Path(cmd[cmd.index("-d") + 1]) / "sglang-0.5.9.tar.gz", sdist_members())
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    messages: list[str] = []
    tree = locate_source("sglang==0.5.9", progress=messages.append)
    assert (tree.version, tree.flashinfer) == ("0.5.9", "0.6.3")
    assert any("trying the source distribution" in m for m in messages)
    assert (cache / "wheels" / "sglang-0.5.9.tar.gz").is_file()


def test_release_prefers_cached_wheel_over_prefix_match(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sglang-0.5.1 must not pick up sglang-0.5.10's wheel.
    write_zip(cache / "wheels" / "sglang-0.5.10-py3-none-any.whl", wheel_members("0.5.10"))
    write_zip(cache / "wheels" / "sglang-0.5.1-py3-none-any.whl", wheel_members("0.5.1"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("must use the cached wheel"))
    assert locate_source("sglang==0.5.1").version == "0.5.1"


# --------------------------------------------------------------------------- installed


def test_installed_found_without_importing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"
    make_package(site / "sglang")  # its __init__ raises if executed
    dist = site / "sglang-0.5.10.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_bytes(metadata("0.5.10", DEFAULT_REQUIRES))
    monkeypatch.delitem(sys.modules, "sglang", raising=False)
    monkeypatch.syspath_prepend(str(site))
    tree = locate_source(None)
    assert tree == SourceTree(
        Path(os.path.realpath(site / "sglang")), "0.5.10", "0.6.7.post2", "installed"
    )
    assert "sglang" not in sys.modules


def test_installed_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SourceError) as info:
        locate_source(None)
    assert str(info.value) == (
        "no --source given and no installed sglang found; pass --source DIR|WHEEL|sglang==X"
    )


def test_damaged_complete_extraction_is_redone(inputs: Path, cache: Path) -> None:
    whl = write_zip(inputs / "sglang-0.5.10-py3-none-any.whl", wheel_members())
    tree = locate_source(str(whl))
    shutil.rmtree(tree.package_dir)  # marker still there, package gone
    messages: list[str] = []
    assert locate_source(str(whl), progress=messages.append) == tree
    assert (tree.package_dir / "srt" / "server_args.py").read_bytes() == SERVER_ARGS
    assert len(messages) == 1 and messages[0].startswith("extracting")


def test_tar_dot_and_repeated_directory_entries_are_fine(inputs: Path, cache: Path) -> None:
    def dirs(tf: tarfile.TarFile) -> None:
        for name in (".", "./", "sglang-0.5.9/sglang", "sglang-0.5.9/sglang/"):
            tar_add(tf, name, type=tarfile.DIRTYPE)

    tree = locate_source(str(write_tar(inputs / "s.tar.gz", sdist_members(), dirs)))
    assert (tree.version, tree.package_dir.name) == ("0.5.9", "sglang")


def test_stale_temp_dirs_are_swept(inputs: Path, cache: Path) -> None:
    sources = cache / "sources"
    stale = sources / ".extract-0123456789abcdef-dead"
    fresh = sources / ".extract-0123456789abcdef-busy"  # maybe a concurrent run
    for path in (stale, fresh):
        path.mkdir(parents=True)
    os.utime(stale, (0, 0))
    locate_source(str(write_zip(inputs / "w.whl", wheel_members())))
    assert not stale.exists() and fresh.is_dir()
