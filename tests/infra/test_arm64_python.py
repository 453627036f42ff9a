"""scripts/arm64_python.py without the network: what it trusts of Debian's InRelease
(signed with keys made here by gpg), how it fetches, unpacks and removes its cache."""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.infra.test_package import script

pytestmark = pytest.mark.unit

tool: ModuleType = script("arm64_python")
RELEASE = "Origin: Debian\nSuite: stable\nCodename: trixie\nSHA256:\n {} 1 main/binary-arm64/Packages.xz\n"
REAL_SUM, FAKE_SUM = "a" * 64, "f" * 64


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two signing keys, "known" and "other"; keyring.gpg holds only the known one."""
    if not (shutil.which("gpg") and shutil.which("gpgv")):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI needs gpg and gpgv for the signature tests")
        pytest.skip("needs gpg and gpgv")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}

    def run(*args: str) -> bytes:
        return subprocess.run(
            ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", *args],
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout

    for who in ("known", "other"):
        run("--quick-gen-key", f"{who} <{who}@example.com>", "ed25519", "sign", "never")
    keyring = home / "keyring.gpg"
    keyring.write_bytes(run("--export", "known@example.com"))

    def sign(text: str, *signers: str) -> bytes:
        source = home / "release.txt"
        source.write_text(text)
        users = [a for s in signers for a in ("-u", f"{s}@example.com")]
        return run(*users, "--clearsign", "--output", "-", str(source))

    yield {"keyring": keyring, "sign": sign}
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, timeout=30)


def verify(gpg: dict[str, Any], tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "InRelease"
    path.write_bytes(data)
    text: str = tool.verified(path, gpg["keyring"])
    return text


def test_only_the_signed_text_is_read_not_what_is_added_around_it(
    gpg: dict[str, Any], tmp_path: Path
) -> None:
    signed = gpg["sign"](RELEASE.format(REAL_SUM), "known")
    fake = RELEASE.format(FAKE_SUM).encode()
    # gpgv accepts text after the signature: it must not reach index().
    text = verify(gpg, tmp_path, signed + b"\n" + fake)
    assert text == RELEASE.format(REAL_SUM)
    assert FAKE_SUM not in text
    # signed_release refuses both, before and after, as apt does.
    for data in (fake + signed, signed + fake):
        with pytest.raises(tool.Arm64PythonError, match="text outside its signed message"):
            release_from(data, gpg, tmp_path)


def release_from(data: bytes, gpg: dict[str, Any], tmp_path: Path) -> str:
    """signed_release() with ``data`` for what the mirror serves."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tool, "KEYRING", gpg["keyring"])
        patch.setattr(tool, "fetch", lambda url: data)
        text: str = tool.signed_release(tmp_path)
    return text


def test_a_signature_by_a_key_the_keyring_lacks_is_not_a_failure(
    gpg: dict[str, Any], tmp_path: Path
) -> None:
    # Trixie's InRelease carries three signatures; an older keyring lacks some keys,
    # and gpgv then exits non-zero although one signature is good.
    signed = gpg["sign"](RELEASE.format(REAL_SUM), "known", "other")
    path = tmp_path / "check"
    path.write_bytes(signed)
    gpgv = ["gpgv", "--keyring", str(gpg["keyring"]), str(path)]
    assert subprocess.run(gpgv, capture_output=True, check=False).returncode != 0
    assert release_from(signed, gpg, tmp_path) == RELEASE.format(REAL_SUM)


@pytest.mark.parametrize(
    ("signers", "why"),
    [(("other",), "no good signature"), (("known", "other"), "BADSIG")],
)
def test_no_good_signature_or_a_bad_one_is_refused(
    gpg: dict[str, Any], tmp_path: Path, signers: tuple[str, ...], why: str
) -> None:
    signed: bytes = gpg["sign"](RELEASE.format(REAL_SUM), *signers)
    tampered = signed.replace(REAL_SUM.encode(), FAKE_SUM.encode())
    with pytest.raises(tool.Arm64PythonError, match=why):
        verify(gpg, tmp_path, tampered if why == "BADSIG" else signed)


def test_an_inrelease_signed_for_another_suite_or_expired_is_refused() -> None:
    now = 1_800_000_000.0  # 2027-01-15
    tool.check_release(RELEASE, now)  # trixie's carries no Valid-Until
    with pytest.raises(tool.Arm64PythonError, match="Codename 'bookworm'"):
        tool.check_release(RELEASE.replace("trixie", "bookworm"), now)
    valid = "Valid-Until: Sat, 16 Jan 2027 00:00:00 UTC\n"
    tool.check_release(valid + RELEASE, now)
    with pytest.raises(tool.Arm64PythonError, match="expired"):
        tool.check_release(valid + RELEASE, now + 86400 * 2)


def test_the_default_mirror_is_https() -> None:
    if not os.environ.get("DEBIAN_MIRROR"):
        assert tool.MIRROR.startswith("https://")


def test_without_gpgv_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool, "KEYRING", Path("/nonexistent/keyring.gpg"))
    with pytest.raises(tool.MissingToolError, match="apt-get install gpgv"):
        tool.signed_release(Path("/nonexistent"))


class Opened:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self) -> bytes:
        return self.body


@pytest.mark.parametrize(
    "failure",
    [
        http.client.IncompleteRead(b"part", 10),
        urllib.error.HTTPError("u", 503, "Service Unavailable", {}, None),
        ConnectionResetError(104, "reset"),
    ],
)
def test_a_passing_failure_is_tried_again_then_is_a_network_error(
    monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(tool.time, "sleep", lambda s: None)

    def urlopen(url: str, timeout: float) -> Opened:
        calls.append(url)
        if len(calls) == 1:
            raise failure
        return Opened(b"body")

    monkeypatch.setattr(tool.urllib.request, "urlopen", urlopen)
    assert tool.fetch("https://mirror/x") == b"body"
    calls.clear()
    monkeypatch.setattr(tool, "TRIES", 1)
    with pytest.raises(tool.NetworkError, match="could not fetch https://mirror/x"):
        tool.fetch("https://mirror/x")


def test_a_4xx_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def urlopen(url: str, timeout: float) -> Opened:
        calls.append(url)
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    monkeypatch.setattr(tool.urllib.request, "urlopen", urlopen)
    with pytest.raises(tool.Arm64PythonError, match="HTTP 404") as failed:
        tool.fetch("https://mirror/x")
    assert not isinstance(failed.value, tool.NetworkError)
    assert len(calls) == 1


def deb_of(files: dict[str, bytes]) -> bytes:
    """A .deb (ar archive) whose data.tar.gz holds ``files``."""
    return deb_with([(tarfile.TarInfo(name), body) for name, body in files.items()])


def deb_with(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """A .deb whose data.tar.gz holds these members (links, devices, modes as given)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, body in members:
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data = buffer.getvalue()
    header = f"{'data.tar.gz/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
    return b"!<arch>\n" + header + data + b"\n" * (len(data) % 2)


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> Any:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def test_a_debs_links_stay_inside_the_sysroot_and_lose_set_id_bits(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tool.unpack(
        deb_with(
            [
                (member("./usr/lib/libx.so.1", mode=0o4755), b"lib"),
                (member("./usr/lib/libx.so", tarfile.SYMTYPE, "/usr/lib/libx.so.1"), b""),
                (member("./usr/bin/x", tarfile.LNKTYPE, "./usr/lib/libx.so.1", 0o4755), b""),
            ]
        ),
        root,
    )
    lib = root / "usr" / "lib"
    assert os.readlink(lib / "libx.so") == "libx.so.1"  # was absolute: now inside the root
    assert (lib / "libx.so").read_bytes() == (root / "usr" / "bin" / "x").read_bytes() == b"lib"
    assert (lib / "libx.so.1").stat().st_mode & 0o7777 == 0o755


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (member("/etc/escaped"), "would be written outside"),
        (member("./usr/lib/../../../escaped"), "would be written outside"),
        (member("./usr/lib/up", tarfile.SYMTYPE, "../../../escaped"), "outside"),
        (member("./usr/lib/hard", tarfile.LNKTYPE, "../escaped"), "outside"),
        (member("./dev/null", tarfile.CHRTYPE), "a device or a FIFO"),
    ],
    ids=["absolute", "dot-dot", "symlink", "hardlink", "device"],
)
def test_a_deb_member_that_would_reach_outside_the_sysroot_is_refused(
    tmp_path: Path, bad: tarfile.TarInfo, says: str
) -> None:
    (tmp_path / "escaped").write_text("the host's")
    with pytest.raises(tarfile.TarError, match=says):
        tool.unpack(deb_with([(bad, b"x")]), tmp_path / "a" / "root")
    assert (tmp_path / "escaped").read_text() == "the host's"
    assert not (tmp_path / "a" / "root").exists() or not any((tmp_path / "a" / "root").rglob("*"))


def test_a_deb_that_would_write_outside_the_sysroot_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good, bad = deb_of({"./usr/bin/x": b"x"}), deb_of({"../../escaped": b"x"})
    debs = {"good.deb": good, "bad.deb": bad, "broken.deb": good[:8] + b"not a header" * 6}
    monkeypatch.setattr(tool, "fetch", lambda url: debs[url.rsplit("/", 1)[-1]])
    monkeypatch.setattr(tool, "say", lambda text: None)

    def deb(name: str) -> Any:
        return tool.Deb(name, "1", name, tool.hashlib.sha256(debs[name]).hexdigest(), 1)

    tool.download([deb("good.deb")], tmp_path / "root")
    assert (tmp_path / "root" / "usr" / "bin" / "x").read_bytes() == b"x"
    for name in ("bad.deb", "broken.deb"):
        with pytest.raises(tool.Arm64PythonError, match=f"{name}: could not unpack it"):
            tool.download([deb(name)], tmp_path / "root")
    assert not (tmp_path / "escaped").exists()


def finished_cache(cache: Path) -> Path:
    for part in ("sysroot/usr/bin/python3.13", f"qemu/{tool.QEMU_BINARY}"):
        (cache / part).parent.mkdir(parents=True, exist_ok=True)
        (cache / part).write_text("")
    (cache / "versions.json").write_text(json.dumps({"suite": "trixie"}))
    return cache


def test_an_interrupted_rebuild_leaves_no_cache_that_passes_for_finished(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = finished_cache(tmp_path / "arm64-python3.13")
    assert tool.command(cache) is not None
    rmtree = shutil.rmtree

    def interrupted(path: Path, *args: object, **kwargs: object) -> None:
        rmtree(Path(path) / "sysroot")  # sorts before versions.json
        raise KeyboardInterrupt

    monkeypatch.setattr(tool.shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tool.main(["--cache", str(cache), "--rebuild"])
    assert tool.command(cache) is None  # so the next run builds again


def test_a_cache_removed_by_another_process_meanwhile_is_fine(tmp_path: Path) -> None:
    tool.discard(tmp_path / "gone")  # no FileNotFoundError
    cache = finished_cache(tmp_path / "arm64-python3.13")
    tool.discard(cache)
    assert not cache.exists()
    assert list(tmp_path.iterdir()) == []
