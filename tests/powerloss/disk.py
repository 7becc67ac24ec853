"""A simulated disk under one directory: build the LD_PRELOAD shim (tests/powerloss/shim.c),
run a process on it, and after kill -9 turn the directory into what a power loss leaves.

kill -9 alone keeps the kernel's page cache: every write the process made is still there,
synced or not, so it says nothing about fsync. The shim keeps, beside the directory, the
image a disk would hold: file contents as of each file's last fsync/fdatasync and the
directory's entries as of its last fsync (see shim.c). `power_loss(...)` then replaces the
directory with that image:

- mode "drop": exactly the image: every write and every directory change (create, link,
  rename, unlink) not followed by the matching fsync is gone.
- mode "torn": the image, plus a random subset of the unsynced pages (4 KiB) taken from
  the page cache (the real files) and a random one of the two sizes: a disk that wrote back
  some of the dirty pages before the power went. The directory entries are the image's.

`ShimRun` names the two directories and the environment that puts a process on them;
`ShimRun.stats()` reads the shim's log (syncs seen) and `anomalies()` what it could not model;
`ShimRun.arm_crash(kind, n)` makes the process die just as it issues its nth file (or
directory) fsync from then on: a power loss at an exact point, e.g. while a lane file is
being created.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SHIM_SOURCE = Path(__file__).with_name("shim.c")
PAGE = 4096


def compiler() -> str | None:
    """A C compiler on PATH (cc, gcc or clang), else None."""
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build_shim(out_dir: Path) -> Path:
    """Compile shim.c into out_dir (once per source version); returns the .so path."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc, clang) on PATH")
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:16]
    lib = out_dir / f"libpowerloss-{digest}.so"
    if not lib.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_name(lib.name + f".{os.getpid()}.tmp")
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wno-format-truncation",
             "-o", str(tmp), str(SHIM_SOURCE), "-ldl", "-lpthread"],
            check=True,
            capture_output=True,
            text=True,
        )  # fmt: skip
        tmp.replace(lib)
    return lib


@dataclass
class Stats:
    """What the shim saw in one run: starts, file syncs, directory syncs."""

    starts: int = 0
    file_syncs: int = 0
    dir_syncs: int = 0
    crashed: str | None = None  # "file N" / "dir N": the crash point that fired


@dataclass
class Recovery:
    """What a power loss changed in the directory."""

    mode: str
    files: int = 0  # files in the directory afterwards
    vanished: list[str] = field(default_factory=list)  # names whose entry was never synced
    resurrected: list[str] = field(default_factory=list)  # removed, but not durably
    pages_dropped: int = 0  # unsynced pages the disk did not keep
    pages_kept: int = 0  # unsynced pages it kept ("torn")
    files_changed: list[str] = field(default_factory=list)  # content differs from page cache

    def summary(self) -> str:
        return (
            f"power loss ({self.mode}): {self.files} files, {len(self.files_changed)} "
            f"changed, {self.pages_dropped} unsynced pages dropped, {self.pages_kept} kept, "
            f"vanished {sorted(self.vanished)}, resurrected {sorted(self.resurrected)}"
        )


@dataclass
class ShimRun:
    """One simulated disk: `directory` (what the process uses) and `state` (the shim's image)."""

    lib: Path
    directory: Path
    state: Path
    mode: str = ""  # "" (a faithful disk) or "nodirsync" (a control): see shim.c

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: os.environ) plus what loads the shim on this disk."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if base is None else base)
        env.update(
            LD_PRELOAD=str(self.lib),
            POWERLOSS_DIR=str(self.directory.resolve()),
            POWERLOSS_STATE=str(self.state.resolve()),
            POWERLOSS_MODE=self.mode,
        )
        return env

    def stats(self) -> Stats:
        s = Stats()
        log = self.state / "log"
        for line in log.read_text().splitlines() if log.exists() else []:
            kind = line[:1]
            if kind == "I":
                s.starts += 1
            elif kind == "S":
                s.file_syncs += 1
            elif kind == "D":
                s.dir_syncs += 1
            elif kind == "K":
                s.crashed = line[2:]
        return s

    def arm_crash(self, kind: str, n: int) -> None:
        """From now on, the process kills itself (SIGKILL) as it issues its `n`th fsync of a
        file (`kind` "file") or of the directory ("dir"), before the disk gets it."""
        if kind not in ("file", "dir") or n < 1:
            raise ValueError(f"crash point {kind} {n}")
        tmp = self.state / "crash.tmp"
        tmp.write_text(f"{kind} {n}\n")
        tmp.replace(self.state / "crash")

    def anomalies(self) -> list[str]:
        path = self.state / "anomalies"
        return path.read_text().splitlines() if path.exists() else []

    def power_loss(self, mode: str = "drop", rng: random.Random | None = None) -> Recovery:
        """The process on this disk must be dead (kill -9). Replaces `directory` with what
        the disk holds ("drop" or "torn", see the module docstring) and resets the image
        (a shim started next takes the directory as it is then as all durable)."""
        rec = power_loss(self.directory, self.state, mode, rng or random.Random(0))
        shutil.rmtree(self.state)
        return rec


def _read_ns(state: Path) -> list[tuple[str, int, int]]:
    """(name, id, mode) of every durable entry."""
    out = []
    for line in (state / "ns").read_text().splitlines():
        ident, mode, name = line.split("\t", 2)
        out.append((name, int(ident), int(mode, 8)))
    return out


def _current_ids(state: Path) -> dict[tuple[int, int], int]:
    """(dev, ino) -> id of the file now at that inode (the last binding wins)."""
    ids: dict[tuple[int, int], int] = {}
    path = state / "ids"
    for line in path.read_text().splitlines() if path.exists() else []:
        dev, ino, ident = line.split()
        ids[(int(dev), int(ino))] = int(ident)
    return ids


def _tear(durable: bytes, cached: bytes, rng: random.Random, rec: Recovery) -> bytes:
    """Some of the pages where the page cache differs from the disk made it, some did not;
    the size is one of the two."""
    size = rng.choice([len(durable), len(cached)])
    out = bytearray()
    for off in range(0, max(len(durable), len(cached)), PAGE):
        d = durable[off : off + PAGE].ljust(PAGE, b"\0")
        c = cached[off : off + PAGE].ljust(PAGE, b"\0")
        if d != c and rng.random() < 0.5:
            rec.pages_kept += 1
            out += c
        else:
            rec.pages_dropped += d != c
            out += d
    return bytes(out[:size].ljust(size, b"\0"))


def _count_dropped(durable: bytes, cached: bytes) -> int:
    n = 0
    for off in range(0, max(len(durable), len(cached)), PAGE):
        if durable[off : off + PAGE] != cached[off : off + PAGE]:
            n += 1
    return n


def power_loss(directory: Path, state: Path, mode: str, rng: random.Random) -> Recovery:
    """Rebuild `directory` from the shim's image in `state` (see `ShimRun.power_loss`)."""
    if mode not in ("drop", "torn"):
        raise ValueError(f"mode {mode!r}: drop or torn")
    rec = Recovery(mode)
    entries = _read_ns(state)
    ids = _current_ids(state)
    cached: dict[int, bytes] = {}  # id -> the page cache's content (files still named)
    real_names = set()
    for p in directory.iterdir():
        real_names.add(p.name)
        st = p.lstat()
        ident = ids.get((st.st_dev, st.st_ino))
        if ident is not None and p.is_file():
            cached[ident] = p.read_bytes()
    durable_names = {name for name, _, _ in entries}
    rec.vanished = sorted(real_names - durable_names)
    rec.resurrected = sorted(durable_names - real_names)
    contents: dict[int, bytes] = {}
    for name, ident, _ in entries:
        if ident in contents:
            continue
        data = state / "data" / str(ident)
        durable = data.read_bytes() if data.exists() else b""
        page_cache = cached.get(ident)
        if page_cache is None:
            contents[ident] = durable
            continue
        if mode == "torn":
            contents[ident] = _tear(durable, page_cache, rng, rec)
        else:
            rec.pages_dropped += _count_dropped(durable, page_cache)
            contents[ident] = durable
        if contents[ident] != page_cache:
            rec.files_changed.append(name)
    for p in directory.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    first: dict[int, Path] = {}
    for name, ident, fmode in entries:
        path = directory / name
        if ident in first:
            os.link(first[ident], path)  # one inode under two names, as it was
            continue
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, fmode), "wb") as f:
            f.write(contents[ident])
            os.fchmod(f.fileno(), fmode)
        first[ident] = path
    rec.files = len(entries)
    return rec
