"""scripts/arm64_python.py without the network: what it trusts of Debian's InRelease
(signed with keys made here by gpg)."""

from __future__ import annotations

import os
import shutil
import subprocess
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
