"""The pip-install profile's versions, derived (issue 43 item 1): ``sglang-audit env`` prints
torch, flashinfer-python and sgl-kernel as the release's Requires-Dist pins them and cuDNN as
the pinned torch's metadata pins it (inputs/pins.py), each with its source; offline, cuDNN
comes from rules/torch_pins.toml and says so. torch's metadata is never read by downloading
its wheel: only its metadata file or, by byte ranges, the wheel's directory and one member."""

from __future__ import annotations

import email
import io
import json
import random
import re
import time
import zipfile
from pathlib import Path

import pytest
from clirun import cli
from packaging.requirements import Requirement
from test_source import wheel_members, write_zip

from sglang_audit.inputs import pins
from sglang_audit.shipped import load_toml

TABLE = load_toml("torch_pins.toml")["torch"]


def _metadata_pins(package_dir: Path) -> dict[str, str]:
    """The release's exact pins of the three packages, read here from its METADATA headers
    (email parser and packaging's Requirement, not the tool's reader)."""
    meta = next(package_dir.parent.glob("sglang-*.dist-info/METADATA"))
    headers = email.message_from_string(meta.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for line in headers.get_all("Requires-Dist") or []:
        req = Requirement(line)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        name = {"sglang-kernel": "sgl-kernel"}.get(name, name)
        if name in ("torch", "flashinfer-python", "sgl-kernel") and req.marker is None:
            (spec,) = list(req.specifier)
            assert spec.operator == "==", line
            out[name] = spec.version
    return out


@pytest.mark.real_release
@pytest.mark.parametrize("version", [f"0.5.{n}" for n in range(10, 24)])  # every release 0.5.10-0.5.23 (issue 43)
def test_env_prints_the_release_pins(version, release, monkeypatch) -> None:
    monkeypatch.setenv(pins.OFFLINE_ENV, "1")  # cuDNN from the cache or the table: no network in this test
    tree = release(version)
    expected = _metadata_pins(tree.package_dir)
    assert set(expected) == {"torch", "flashinfer-python", "sgl-kernel"}
    code, out, err = cli("env", "--source", f"sglang=={version}", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "sglang-audit-env/1" and doc["release"] == version and doc["profile"] == "pip"
    got = {p["package"]: p for p in doc["packages"]}
    for name, pin in expected.items():
        assert got[name]["version"] == pin
        assert got[name]["source"].startswith(f"sglang {version} Requires-Dist: ")
        assert f"=={pin}" in got[name]["source"]
    # cuDNN: the row of the pinned torch (a cached index answer equals it: test below)
    row = TABLE[expected["torch"]]
    assert got["cuDNN"]["version"] == row["cudnn"] and got["cuDNN"]["dist"] == row["dist"]
    assert got["cuDNN"]["source"].startswith(f"torch {expected['torch']} Requires-Dist {row['dist']}=={row['cudnn']}")
    code, text, _ = cli("env", "--source", f"sglang=={version}")
    assert code == 0
    assert f"torch {expected['torch']} (sglang {version} Requires-Dist: torch=={expected['torch']})" in text.splitlines()
    assert f"cuDNN {row['cudnn']} (torch {expected['torch']} Requires-Dist {row['dist']}=={row['cudnn']}" in text


def test_every_torch_row_is_sourced() -> None:
    for version, row in TABLE.items():
        assert re.fullmatch(r"nvidia-cudnn-cu1[23]", row["dist"]), version
        assert row["read"].startswith("https://files.pythonhosted.org/") and f"torch-{version}-" in row["read"], version
        assert pins.torch_cudnn_number(row["cudnn"]) is not None


@pytest.mark.real_release
def test_the_table_agrees_with_the_index(monkeypatch) -> None:
    """Each row equals what torch's metadata says when the index answers (skipped offline)."""
    monkeypatch.delenv(pins.OFFLINE_ENV, raising=False)
    for version, row in TABLE.items():
        try:
            lines, read = pins.requires_dist("torch", version)
        except pins.MetadataUnavailable as exc:
            pytest.skip(f"package index not reachable: {exc}")
        assert f"{row['dist']}=={row['cudnn']}; {row['marker']}" in lines, (version, read)


def _wheel(tmp_path: Path, requires: tuple[str, ...], version: str = "0.5.9") -> Path:
    return write_zip(tmp_path / f"sglang-{version}-py3-none-any.whl", wheel_members(version, requires))


def test_offline_fallback_says_it_is_the_table(tmp_path, isolated_cache, monkeypatch) -> None:
    monkeypatch.setenv(pins.OFFLINE_ENV, "1")
    wheel = _wheel(tmp_path, ("torch==2.9.1", "flashinfer_python==0.6.3", "sgl-kernel==0.3.21"))
    code, out, err = cli("env", "--source", wheel)
    assert code == 0, err
    row = TABLE["2.9.1"]
    line = next(ln for ln in out.splitlines() if ln.startswith("cuDNN "))
    assert line.startswith(f"cuDNN {row['cudnn']} (torch 2.9.1 Requires-Dist {row['dist']}=={row['cudnn']}; {row['marker']}")
    assert f"rules/torch_pins.toml, read from {row['read']}" in line
    assert "fallback: torch's metadata not read from the package index (SGLANG_AUDIT_OFFLINE=1)" in line
    assert "note: cuDNN from the fallback table rules/torch_pins.toml, not from the package index" in out
    assert "sgl-kernel 0.3.21 (sglang 0.5.9 Requires-Dist: sgl-kernel==0.3.21)" in out
    doc = json.loads(cli("env", "--source", wheel, "--format", "json")[1])
    assert {p["package"]: p["fallback"] for p in doc["packages"]}["cuDNN"] is True


def test_a_range_and_an_unknown_torch_are_said_exit_3(tmp_path, isolated_cache, monkeypatch) -> None:
    monkeypatch.setenv(pins.OFFLINE_ENV, "1")
    wheel = _wheel(tmp_path, ("torch>=2.8,<2.10", "flashinfer_python==0.6.3"))
    code, out, _ = cli("env", "--source", wheel)
    assert code == 3
    assert ("torch unknown (sglang 0.5.9 Requires-Dist: torch>=2.8,<2.10; a range (>=2.8,<2.10): pip installs "
            "the newest matching version at install time)") in out
    assert "sgl-kernel unknown (sglang 0.5.9 Requires-Dist names no sgl-kernel or sglang-kernel" in out
    assert "cuDNN unknown (torch is not pinned to one version" in out
    wheel = _wheel(tmp_path, ("torch==1.0.0",), version="0.5.8")
    code, out, _ = cli("env", "--source", wheel)
    assert code == 3
    assert "cuDNN unknown (torch 1.0.0's metadata could not be read (SGLANG_AUDIT_OFFLINE=1) and rules/torch_pins.toml has no row for it" in out


def test_off_cuda_the_cuda_packages_are_not_derived(tmp_path, isolated_cache, monkeypatch) -> None:
    monkeypatch.setenv(pins.OFFLINE_ENV, "1")
    wheel = _wheel(tmp_path, ("torch==2.9.1", "flashinfer_python==0.6.3", "sgl-kernel==0.3.21"))
    code, out, _ = cli("env", "--source", wheel, "--arch", "gfx942")
    assert code == 0
    assert "torch 2.9.1 (sglang 0.5.9 Requires-Dist: torch==2.9.1)" in out
    assert "cuDNN unknown (torch on hip; not used on this platform)" in out
    code, _, err = cli("env", "--source", wheel, "--arch", "sm999")
    assert code == 2 and "unknown --arch" in err


# ---- torch's metadata from the index, without its wheel -----------------------------------

class FakeIndex:
    """A package index serving one wheel: its JSON page, optionally its PEP 658 metadata file,
    and byte ranges of the wheel. Records every request."""

    def __init__(self, wheel: bytes, with_metadata_file: bool) -> None:
        self.wheel = wheel
        self.with_metadata_file = with_metadata_file
        self.asked: list[tuple[str, str | None]] = []
        self.url = "https://files.example/torch-9.9.9-cp312-cp312-manylinux_2_28_x86_64.whl"

    def get(self, url: str, limit: int, accept: str | None = None, byte_range: str | None = None) -> bytes:
        self.asked.append((url, byte_range))
        if url.endswith("/torch/"):
            return json.dumps({"files": [{"filename": self.url.rsplit("/", 1)[1], "url": self.url}]}).encode()
        if url == self.url + ".metadata":
            if not self.with_metadata_file:
                raise pins.MetadataUnavailable(f"{url}: HTTP 404")
            return METADATA
        assert url == self.url and byte_range, "the wheel itself is never asked whole"
        start_text, _, end_text = byte_range.partition("-")
        if not start_text:
            data = self.wheel[-int(end_text):]
        else:
            data = self.wheel[int(start_text):int(end_text) + 1]
        assert len(data) <= limit
        return data


METADATA = (b"Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n"
            b"Requires-Dist: nvidia-cudnn-cu12==9.1.0.70; platform_system == \"Linux\" and platform_machine == \"x86_64\"\n"
            b"Requires-Dist: nvidia-cudnn-cu12==8.9.2.26; platform_machine == \"aarch64\"\n\n")


def _torch_wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        # the bulk a range read must skip (incompressible, as a wheel's libraries are)
        zf.writestr("torch/lib/libtorch.so", random.Random(0).randbytes(400_000))
        zf.writestr("torch-9.9.9.dist-info/METADATA", METADATA)
    return buf.getvalue()


@pytest.mark.parametrize("with_metadata_file", [True, False])
def test_torch_metadata_without_the_wheel(with_metadata_file, isolated_cache, monkeypatch) -> None:
    index = FakeIndex(_torch_wheel(), with_metadata_file)
    monkeypatch.setattr(pins, "_get", index.get)
    monkeypatch.delenv(pins.OFFLINE_ENV, raising=False)
    torch = pins.Pin("torch", "9.9.9", "sglang 0.0.0 Requires-Dist: torch==9.9.9")
    cudnn = pins.cudnn_pin(torch)
    assert (cudnn.version, cudnn.dist, cudnn.fallback) == ("9.1.0.70", "nvidia-cudnn-cu12", False)
    where = ("torch-9.9.9-cp312-cp312-manylinux_2_28_x86_64.whl.metadata" if with_metadata_file else
             "torch-9.9.9-cp312-cp312-manylinux_2_28_x86_64.whl:torch-9.9.9.dist-info/METADATA (byte ranges)")
    assert cudnn.source == ('torch 9.9.9 Requires-Dist nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux" '
                            f'and platform_machine == "x86_64"; read from {where}')
    read = sum(len(index.get(u, 1 << 30, None, r)) for u, r in list(index.asked) if u == index.url)
    assert read < len(index.wheel) / 2  # the wheel's directory and one member, not the wheel
    # cached per (package, version): a second answer asks nothing
    index.asked.clear()
    assert pins.cudnn_pin(torch) == cudnn and index.asked == []
    entry = isolated_cache / "metadata" / "torch-9.9.9.json"
    assert entry.is_file()
    assert cli("cache", "clear")[0] == 0 and not entry.exists()  # `cache clear` takes metadata/ too
    # offline: the shipped table only (no row for 9.9.9), never the cache, whose content differs by machine
    monkeypatch.setenv(pins.OFFLINE_ENV, "1")
    offline = pins.cudnn_pin(torch)
    assert offline.version is None and offline.fallback and index.asked == []


def test_cudnn_number_as_torch_reports_it() -> None:
    assert pins.torch_cudnn_number("9.10.2.21") == 91002
    assert pins.torch_cudnn_number("8.9.2.26") == 8902


# ---- item 2: the device's cuDNN from the pins when --cudnn is not given --------------------

@pytest.mark.real_release
def test_059_decides_the_cudnn_check_from_the_pip_pin(release) -> None:
    """0.5.9's check_torch_2_9_1_cudnn_compatibility reads torch.backends.cudnn.version() for a
    multimodal model: with no --cudnn, the pip profile's cuDNN (torch 2.9.1's pin) decides it."""
    tree = release("0.5.9")
    torch = _metadata_pins(tree.package_dir)["torch"]
    row = TABLE[torch]
    args = ("resolve", "-s", "sglang==0.5.9", "-a", "sm120", "-m", "qwen3.5-397b-a17b-nvfp4", "--set", "tp_size=8")
    code, out, _ = cli(*args, "--format", "json")
    doc = json.loads(out)
    assert doc["device"]["cudnn"] == pins.torch_cudnn_number(row["cudnn"])
    source = doc["device"]["cudnn_source"]
    assert source.startswith(f"the pip profile: torch {torch} Requires-Dist {row['dist']}=={row['cudnn']}; {row['marker']}")
    assert source.endswith("; from rules/torch_pins.toml (SGLANG_AUDIT_OFFLINE=1); --cudnn overrides")
    rejected = doc["rejected"]
    assert rejected is not None and code == 1
    assert rejected["exception"] == "RuntimeError" and "CuDNN 9.10" in rejected["message"]
    line = (tree.package_dir.parent / rejected["file"]).read_text().splitlines()[rejected["line"] - 1]
    assert "raise RuntimeError(msg)" in line
    before = (tree.package_dir.parent / rejected["file"]).read_text().splitlines()[:rejected["line"]]
    assert any("torch.backends.cudnn.version()" in ln for ln in before[-40:])
    code, text, _ = cli(*args)
    version = ".".join(row["cudnn"].split(".")[:3])
    assert f", cuDNN {version} (the pip profile: torch {torch} Requires-Dist {row['dist']}=={row['cudnn']}" in text.splitlines()[1]
    # a cuDNN at or above 9.15 given by the user passes the check; the image profile leaves it unknown
    code, out, _ = cli(*args, "--cudnn", "9.16.0", "--format", "json")
    doc = json.loads(out)
    assert doc["rejected"] is None and doc["device"]["cudnn_source"] == "given with --cudnn"
    code, out, _ = cli(*args, "--env-profile", "image", "--format", "json")
    doc = json.loads(out)
    assert doc["device"]["cudnn"] is None and code == 3
    assert any("the cuDNN version (pass --cudnn)" in json.dumps(s) for s in doc["settings"].values())


def test_device_for_applies_only_to_pip_on_cuda_without_cudnn(tmp_path, monkeypatch) -> None:
    from sglang_audit.inputs.device import parse_device

    monkeypatch.setenv(pins.OFFLINE_ENV, "1")
    wheel_dir = tmp_path / "tree"
    for name, data in wheel_members("0.5.9", ("torch==2.9.1",)).items():
        (wheel_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (wheel_dir / name).write_bytes(data)
    package = wheel_dir / "sglang"
    row = TABLE["2.9.1"]
    got = pins.device_for(parse_device("sm120"), package, "0.5.9", None)
    assert got.cudnn == pins.torch_cudnn_number(row["cudnn"])
    assert got.cudnn_source == (f"the pip profile: torch 2.9.1 Requires-Dist {row['dist']}=={row['cudnn']}; {row['marker']}; "
                                "from rules/torch_pins.toml (SGLANG_AUDIT_OFFLINE=1); --cudnn overrides")
    given = parse_device("sm120", cudnn="9.16.0")
    assert pins.device_for(given, package, "0.5.9", None) == given and given.cudnn_source == "given with --cudnn"
    assert pins.device_for(parse_device("sm120"), package, "0.5.9", "image").cudnn is None
    assert pins.device_for(parse_device("gfx942"), package, "0.5.9", "pip").cudnn is None


def test_an_unreachable_index_is_asked_once_per_retry_window(isolated_cache, monkeypatch) -> None:
    # a machine whose network drops packets waited TIMEOUT on every command before; now the
    # first command waits, writes the failure down, and the next ones use the table at once
    asked: list[str] = []

    def unreachable(url: str, limit: int, accept: str | None = None, byte_range: str | None = None) -> bytes:
        asked.append(url)
        raise pins.IndexUnreachable(f"{url}: timed out")

    monkeypatch.setattr(pins, "_get", unreachable)
    monkeypatch.delenv(pins.OFFLINE_ENV, raising=False)
    torch = pins.Pin("torch", "2.9.1", "sglang 0.5.9 Requires-Dist: torch==2.9.1")
    first = pins.cudnn_pin(torch)
    assert first.fallback and first.version == TABLE["2.9.1"]["cudnn"] and len(asked) == 1
    assert "timed out" in first.why_fallback
    second = pins.cudnn_pin(torch)
    assert len(asked) == 1, "the unreachable index was asked again within the retry window"
    assert second.version == first.version and "did not answer 0 min ago" in second.why_fallback
    # past the window it is asked again; an answer clears the note
    later = time.time() + pins.RETRY_AFTER + 1
    monkeypatch.setattr(pins.time, "time", lambda: later)
    index = FakeIndex(_torch_wheel(), True)
    monkeypatch.setattr(pins, "_get", index.get)
    ok = pins.cudnn_pin(pins.Pin("torch", "9.9.9", "x"))
    assert ok.version == "9.1.0.70" and index.asked
    assert not (isolated_cache / "metadata" / pins.UNREACHABLE).exists()
    # an HTTP answer (a 404) is the index answering: not remembered as unreachable
    monkeypatch.setattr(pins, "_get", lambda *a, **k: (_ for _ in ()).throw(pins.MetadataUnavailable("HTTP 404")))
    pins.cudnn_pin(pins.Pin("torch", "8.8.8", "x"))
    assert not (isolated_cache / "metadata" / pins.UNREACHABLE).exists()
