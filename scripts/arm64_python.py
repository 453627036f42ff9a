"""An aarch64 Python 3.13 that runs on an x86_64 machine, under qemu user-mode emulation.

    python scripts/arm64_python.py [--cache DIR] [--rebuild]

It imports the arm64 Lambda zip's handlers where the machine has no arm64 Python
(``make package CHECK=1``, tests/infra/test_package.py). No Docker, no root, nothing
installed system-wide: everything comes from Debian's archive (``$DEBIAN_MIRROR``,
default https://deb.debian.org/debian) and is unpacked into the cache folder
(default .tools/arm64-python3.13/, gitignored):

- ``qemu-aarch64`` (statically linked) from trixie's ``qemu-user`` for this machine,
  run with ``-L sysroot`` so the guest's paths resolve inside the sysroot; no
  binfmt_misc. Trixie's QEMU 10 imports the handlers about four times faster than
  bookworm's QEMU 7.2 (``qemu-user-static``): 9 s against 38 s here;
- ``python3.13`` and the libraries it loads from trixie's arm64 packages: trixie ships
  Python 3.13, the version of Lambda's python3.13 runtime.

The suite's InRelease must carry a good signature from the Debian archive keyring
(gpgv; only the text it signs is read, and it must name the suite and not be past its
Valid-Until), each Packages index must match InRelease's SHA256 and each .deb its
index's SHA256. The versions used are written to CACHE/versions.json. A finished
cache is reused as it is (``--rebuild`` starts again); the build goes to a temporary
folder renamed into place, and a cache is removed versions.json first, so neither an
interrupted build nor an interrupted ``--rebuild`` leaves a half-made cache that
passes for finished.
"""

from __future__ import annotations

import argparse
import copy
import email.utils
import hashlib
import http.client
import io
import json
import lzma
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / ".tools" / "arm64-python3.13"
MIRROR = os.environ.get("DEBIAN_MIRROR") or "https://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SUITE = "trixie"
CLEARSIGNED = b"-----BEGIN PGP SIGNED MESSAGE-----\n"
SIGNATURE_END = b"-----END PGP SIGNATURE-----"
# Packages wanted for each Debian architecture; their Depends and Pre-Depends follow.
QEMU = ("qemu-user",)  # for the machine running it (HOSTS)
PYTHON = ("python3.13-minimal", "libpython3.13-stdlib")  # for arm64
HOSTS = {"x86_64": "amd64"}  # machines qemu-user is fetched for
QEMU_BINARY = "usr/bin/qemu-aarch64"  # the one file of qemu-user kept (of some 300 MB)
# Depends that `import` never loads: configuration, data and maintainer-script tools.
SKIP = {
    "debconf",
    "debconf-2.0",
    "perl-base",
    "dpkg",
    "tzdata",
    "netbase",
    "media-types",
    "mime-support",
    "readline-common",
    "install-info",
    "libc-bin",
    "usrmerge",
    "base-files",
}
TIMEOUT = 60
TRIES = 3


class Arm64PythonError(Exception):
    """The emulated Python could not be built."""


class NetworkError(Arm64PythonError):
    """Debian's archive could not be reached."""


class MissingToolError(Arm64PythonError):
    """This machine lacks a tool the build needs (gpgv, Debian's keyring)."""


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    filename: str
    sha256: str
    size: int


def say(text: str) -> None:
    print(f"arm64-python: {text}", file=sys.stderr, flush=True)


def fetch(url: str) -> bytes:
    """``url``'s body. What may pass (no connection, a cut-off body, a server's 5xx or
    429) is tried again, then raises NetworkError; another HTTP error raises at once."""
    last: Exception | None = None
    for attempt in range(TRIES):
        if attempt:
            time.sleep(attempt)
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise Arm64PythonError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
            last = exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            last = exc  # HTTPException: IncompleteRead, RemoteDisconnected, BadStatusLine
    raise NetworkError(f"could not fetch {url} ({TRIES} tries): {last!r}")


def signed_release(work: Path) -> str:
    """The signed text of the suite's InRelease: its signature checked with gpgv, the
    text gpgv vouches for (nothing outside it), for the suite asked and not expired."""
    if not shutil.which("gpgv") or not KEYRING.is_file():
        raise MissingToolError(
            f"checking Debian's signature needs gpgv and {KEYRING} "
            "(apt-get install gpgv debian-archive-keyring)"
        )
    data = fetch(f"{MIRROR}/dists/{SUITE}/InRelease")
    if not (data.startswith(CLEARSIGNED) and data.rstrip().endswith(SIGNATURE_END)):
        raise Arm64PythonError(f"{SUITE}/InRelease has text outside its signed message")
    path = work / "InRelease"
    path.write_bytes(data)
    text = verified(path, KEYRING)
    check_release(text, time.time())
    return text


def verified(path: Path, keyring: Path) -> str:
    """The text a clearsigned file signs, once gpgv found at least one good signature from
    a key in ``keyring`` and no bad one. As apt does, a signature by a key the keyring
    lacks is not a failure (Debian signs with several: an older keyring may lack one)."""
    out = path.with_name(path.name + ".signed")
    out.unlink(missing_ok=True)
    proc = subprocess.run(  # noqa: S603
        ["gpgv", "--status-fd", "1", "--keyring", str(keyring), "--output", str(out), str(path)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    good, bad = 0, list[str]()
    for signature in proc.stdout.split("[GNUPG:] NEWSIG"):
        words = {line.split()[1] for line in signature.splitlines() if len(line.split()) > 1}
        good += int({"GOODSIG", "VALIDSIG"} <= words)
        bad += sorted(words & {"BADSIG", "REVKEYSIG"})
    if bad or not good or not out.is_file():
        why = f"{', '.join(bad)} " if bad else "no good signature from a key in the keyring "
        raise Arm64PythonError(f"{path.name}: {why}({keyring}):\n{proc.stderr}")
    return out.read_text()


def check_release(text: str, now: float) -> None:
    """A signed InRelease for another suite, or one past its Valid-Until (an old one
    replayed), is refused."""
    fields = dict(re.findall(r"^([\w-]+): *(.*)$", text.split("\n\n", 1)[0], re.M))
    if fields.get("Codename") != SUITE:
        raise Arm64PythonError(
            f"{SUITE}/InRelease is signed for Codename {fields.get('Codename')!r} "
            f"(Suite {fields.get('Suite')!r}), not {SUITE}"
        )
    until = fields.get("Valid-Until")
    if not until:
        return  # trixie's has none: a point release's InRelease stands until the next
    try:
        expires = email.utils.parsedate_to_datetime(until).timestamp()
    except (TypeError, ValueError) as exc:
        raise Arm64PythonError(f"{SUITE}/InRelease: bad Valid-Until {until!r}") from exc
    if expires < now:
        raise Arm64PythonError(f"{SUITE}/InRelease expired (Valid-Until: {until}): a stale mirror")


def index(release: str, arch: str) -> dict[str, dict[str, str]]:
    """The suite's main Packages index for ``arch``: stanzas by package name, plus each
    virtual package under ``provides:NAME`` naming its first provider."""
    name = f"main/binary-{arch}/Packages.xz"
    sums = release.split("SHA256:", 1)[-1]
    found = re.search(rf"^ ([0-9a-f]{{64}}) +\d+ {re.escape(name)}$", sums, re.M)
    if not found:
        raise Arm64PythonError(f"{SUITE}/InRelease lists no SHA256 for {name}")
    say(f"fetching the {SUITE} {arch} package index")
    data = fetch(f"{MIRROR}/dists/{SUITE}/{name}")
    if hashlib.sha256(data).hexdigest() != found.group(1):
        raise Arm64PythonError(f"{SUITE}/{name} does not match InRelease's SHA256")
    packages: dict[str, dict[str, str]] = {}
    for stanza in lzma.decompress(data).decode().split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): ?(.*(?:\n .*)*)", stanza, re.M))
        if "Package" not in fields:
            continue
        packages.setdefault(fields["Package"], fields)
        for virtual in re.split(r",\s*", fields.get("Provides", "")):
            if virtual:
                packages.setdefault(f"provides:{virtual.split()[0]}", fields)
    return packages


def closure(packages: dict[str, dict[str, str]], wanted: tuple[str, ...]) -> list[Deb]:
    """``wanted`` and everything their Depends and Pre-Depends pull in, less SKIP."""
    chosen: dict[str, Deb] = {}
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        fields = packages.get(name)
        if fields is None:
            raise Arm64PythonError(f"the index has no package {name}")
        chosen[name] = Deb(
            name, fields["Version"], fields["Filename"], fields["SHA256"], int(fields["Size"])
        )
        depends = ", ".join(fields.get(f, "") for f in ("Pre-Depends", "Depends"))
        for group in filter(None, (g.strip() for g in depends.split(","))):
            options = [re.split(r"[\s(:]", alt.strip())[0] for alt in group.split("|")]
            if any(o in SKIP or o in chosen for o in options):
                continue
            for option in options:
                real = option if option in packages else f"provides:{option}"
                if real in packages:
                    todo.append(packages[real]["Package"])
                    break
            else:
                raise Arm64PythonError(f"{name} depends on {group}: not in the index")
    return sorted(chosen.values(), key=lambda d: d.name)


def members(deb: bytes) -> dict[str, bytes]:
    """The members of a .deb (an ar archive)."""
    if not deb.startswith(b"!<arch>\n"):
        raise Arm64PythonError("not a .deb (no ar header)")
    found, at = {}, 8
    while at + 60 <= len(deb):
        header = deb[at : at + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        found[name] = deb[at + 60 : at + 60 + size]
        at += 60 + size + (size % 2)
    return found


def unpack(deb: bytes, dest: Path, only: str | None = None) -> None:
    """Unpack a .deb's data (or only the file ``only``) into ``dest``; absolute symlinks
    are made relative, so they point inside ``dest`` rather than at the host's files."""
    data = next((v for k, v in members(deb).items() if k.startswith("data.tar")), None)
    if data is None:
        raise Arm64PythonError("the .deb has no data.tar (or a compression Python cannot read)")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar:
            if only and member.name.removeprefix("./") != only:
                continue
            tar.extract(kept_inside(member, dest), dest, **TRUSTED)


# Every member is checked by kept_inside() first; tarfile's own filters (tar_filter) came
# in 3.11.4, after Debian bookworm's 3.11.2, and the check must not depend on them. Where
# they exist, "fully_trusted" says the check was done, so 3.12+ warns of no default.
TRUSTED = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def kept_inside(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """The member to extract into ``dest``, or a TarError naming why it must not be: a
    path, or a link's target, outside ``dest``, or a file that is not a file, folder or
    link. An absolute symlink is made relative to ``dest``; set-id bits are dropped.
    (Written out, not ``TarInfo.replace``, which also came in 3.11.4.)"""
    root = os.path.realpath(dest)
    member = copy.copy(member)  # the archive's own TarInfo is left as it was

    def within(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    name = member.name.removeprefix("./")
    if os.path.isabs(name) or not within(os.path.join(root, name)):
        raise tarfile.TarError(f"{member.name!r} would be written outside {dest}")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise tarfile.TarError(f"{member.name!r} is a device or a FIFO, not a file")
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            here = os.path.dirname(name) or "."
            target = os.path.relpath(target[1:], here)
        if not within(os.path.join(root, os.path.dirname(name), target)):
            raise tarfile.TarError(f"{member.name!r} links to {member.linkname!r}, outside")
        member.linkname = target
    if member.islnk() and not within(os.path.join(root, member.linkname.removeprefix("./"))):
        raise tarfile.TarError(f"{member.name!r} links to {member.linkname!r}, outside")
    member.mode &= 0o755  # no set-id or sticky bit, no write for group or others
    return member


def download(debs: list[Deb], dest: Path, only: str | None = None) -> None:
    for deb in debs:
        say(f"  {deb.name} {deb.version} ({deb.size / 2**20:.1f} MiB)")
        data = fetch(f"{MIRROR}/{deb.filename}")
        if hashlib.sha256(data).hexdigest() != deb.sha256:
            raise Arm64PythonError(f"{deb.filename} does not match the index's SHA256")
        try:
            unpack(data, dest, only)
        except (tarfile.TarError, lzma.LZMAError, EOFError, ValueError) as exc:
            # TarError: FilterError too (a member outside dest); ValueError: a bad ar header
            raise Arm64PythonError(f"{deb.filename}: could not unpack it: {exc}") from exc


def command(cache: Path = DEFAULT_CACHE) -> list[str] | None:
    """The command that runs the emulated python3.13, if the cache holds a finished build."""
    if not (cache / "versions.json").is_file():
        return None
    sysroot = cache / "sysroot"
    qemu = cache / "qemu" / QEMU_BINARY
    return [str(qemu), "-L", str(sysroot), str(sysroot / "usr" / "bin" / "python3.13")]


def discard(cache: Path) -> None:
    """Remove a cache so that no part of it is ever taken for a finished build, however
    it is interrupted: versions.json (what marks it finished) goes first, then the folder
    is renamed away and deleted. Another process removing it at the same time is fine."""
    aside = cache.with_name(f"{cache.name}.old-{os.getpid()}-{time.monotonic_ns()}")
    try:
        (cache / "versions.json").unlink(missing_ok=True)
        cache.rename(aside)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Arm64PythonError(f"could not remove {cache}: {exc}") from exc
    shutil.rmtree(aside, ignore_errors=True)


def sysroot(root: Path) -> None:
    """An empty usr-merged root, as trixie's packages expect (/lib is /usr/lib)."""
    for merged in ("bin", "sbin", "lib"):
        (root / "usr" / merged).mkdir(parents=True, exist_ok=True)
        (root / merged).symlink_to(f"usr/{merged}")


def build(cache: Path = DEFAULT_CACHE) -> list[str]:
    """Build the emulated Python into ``cache`` unless it is there; its command."""
    ready = command(cache)
    if ready:
        return ready
    machine = platform.machine()
    if machine not in HOSTS:
        raise Arm64PythonError(f"qemu-user is fetched for {', '.join(HOSTS)}, not {machine}")
    started = time.monotonic()
    cache.parent.mkdir(parents=True, exist_ok=True)
    for aside in cache.parent.glob(f"{cache.name}.old-*"):  # what an interrupted discard left
        shutil.rmtree(aside, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=cache.name + ".", dir=cache.parent) as tmp:
        work = Path(tmp)
        release, out = signed_release(work), work / "build"
        versions: dict[str, object] = {"suite": SUITE, "mirror": MIRROR}
        for key, arch, wanted in (("qemu", HOSTS[machine], QEMU), ("sysroot", "arm64", PYTHON)):
            debs = closure(index(release, arch), wanted)
            say(f"{len(debs)} {arch} packages into {cache / key}")
            sysroot(out / key)
            download(debs, out / key, QEMU_BINARY if key == "qemu" else None)
            versions[key] = {d.name: {"version": d.version, "sha256": d.sha256} for d in debs}
        for path in (out / "qemu" / QEMU_BINARY, out / "sysroot" / "usr" / "bin" / "python3.13"):
            if not path.is_file():
                raise Arm64PythonError(f"the packages did not provide {path.name}")
        (out / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
        if cache.exists() and command(cache) is None:
            discard(cache)  # a leftover without versions.json: builds happen in tmp
        try:
            out.rename(cache)
        except OSError as exc:
            if command(cache) is None:  # not a concurrent build's finished cache
                raise Arm64PythonError(f"could not move the build to {cache}: {exc}") from exc
            say("another build finished first: using it")
    say(f"built in {time.monotonic() - started:.0f} s: {cache}")
    found = command(cache)
    assert found is not None
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder to build into")
    parser.add_argument("--rebuild", action="store_true", help="start again from nothing")
    args = parser.parse_args(argv)
    try:
        if args.rebuild:
            discard(args.cache)
        cmd = build(args.cache.resolve())
    except Arm64PythonError as exc:
        print(f"arm64-python: {exc}", file=sys.stderr)
        return 1
    print(" ".join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
