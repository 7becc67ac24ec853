"""Lane files on disk: owner-only modes (0600 files, 0700 directories) whatever the umask,
and a consistent raw copy of a lane file through SQLite's backup API."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
import tempfile
from pathlib import Path

from coordinator.errors import StoreError
from coordinator.store.migrate import EDITED

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_LANE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def make_private_file(path: Path) -> None:
    """Lane files hold every machine's tickets and receipts: owner-only (0600), whatever the
    process umask. A new file is created empty with that mode before SQLite opens it (SQLite
    then gives its -wal and -shm files the database file's mode); an existing lane file that
    an older version left open to others is tightened, with its -wal/-shm/-journal.
    Raises OSError when the file cannot be created (the caller words it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        for suffix in _LANE_FILE_SUFFIXES:
            side = path.with_name(path.name + suffix)
            with contextlib.suppress(OSError):  # absent, or not ours: SQLite's open decides
                if side.stat().st_mode & 0o077:
                    side.chmod(PRIVATE_FILE_MODE)
        return
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # os.open's mode is filtered by the umask
    finally:
        os.close(fd)


def make_private_dir(path: Path) -> None:
    """Create a directory (and missing parents) owner-only (0700), whatever the umask. An
    existing directory keeps its mode: the operator chose it."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    path.chmod(PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask


def copy_lane_file(src: Path, dest: Path) -> None:
    """A consistent copy of a lane file (raw, no migrations applied) via the backup API,
    leaving the source as it was. A file no process has open (no -wal or -shm beside it: a
    stopped server's data dir, a backup) is read `immutable`, so SQLite creates no -wal/-shm
    beside it; should it change meanwhile (a server opened it), it is copied again the
    ordinary way. A file that is not a database is refused as the server refuses it
    (`corrupt file (file is not a database)`); StoreError carries the reason."""
    check_lane_header(src)
    try:
        make_private_file(dest)
        quiet = not _has_side_files(src)
        before = _stat_key(src)
        _backup(src, dest, immutable=quiet)
        if quiet and (_has_side_files(src) or _stat_key(src) != before):
            _backup(src, dest, immutable=False)
    except (sqlite3.Error, OSError) as exc:
        reason = open_failure_reason(exc)
        raise StoreError(f"cannot copy lane file {src.name}: {reason}", reason=reason) from exc


def _has_side_files(path: Path) -> bool:
    return any(path.with_name(path.name + s).exists() for s in ("-wal", "-shm"))


def _stat_key(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


def _backup(src: Path, dest: Path, *, immutable: bool) -> None:
    flags = "mode=ro&immutable=1" if immutable else "mode=ro"
    s = sqlite3.connect(f"file:{src}?{flags}", uri=True)
    d = sqlite3.connect(dest)
    try:
        s.backup(d)
    finally:
        s.close()
        d.close()


SQLITE_HEADER = b"SQLite format 3\x00"
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


TEMP_MARK = ".sqlite.tmp-"  # in the name of a lane file being created (and its side files)


def temp_lane_path(path: Path) -> Path:
    """A temporary name next to a lane file: starts with a dot and does not end in the lane
    suffix, so it is never read as a lane (`lane_from_file_name`)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def remove_lane_file(path: Path) -> None:
    """Remove a (temporary) lane file and its -wal/-shm/-journal; missing ones are fine."""
    for suffix in ("", *_SIDE_SUFFIXES):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


def fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_empty_file(path: Path) -> bool:
    """True when path is a 0-byte regular file (an older version's failed first open)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def check_lane_header(path: Path) -> None:
    """Refuse, without writing anything, an existing non-empty file that is not SQLite.
    Raises OSError when it cannot be read, StoreError when it is not a database."""
    with path.open("rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if head and head != SQLITE_HEADER:
        raise StoreError(
            f"lane file {path.name}: corrupt file (file is not a database)",
            reason="corrupt file (file is not a database)",
        )


def publish_lane_file(tmp: Path, path: Path) -> None:
    """Move a complete, fsynced new lane file into place, atomically and without ever
    replacing a lane file that has content: link (no-clobber) when the name is free; over a
    0-byte file (left by an older version's failed first open) only while it still is that
    same empty file, under an flock of it so that processes sharing the dir take turns.
    Another process's lane file that appeared meanwhile wins: the caller then opens that."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        _replace_empty(tmp, path)
    fsync_path(path.parent, directory=True)


def _replace_empty(tmp: Path, path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # removed meanwhile: the next open creates it again
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        st, now = os.fstat(fd), path.stat()
        if st.st_size == 0 and (st.st_ino, st.st_dev) == (now.st_ino, now.st_dev):
            os.replace(tmp, path)
    finally:
        os.close(fd)


def failure_reason(exc: BaseException | None) -> str | None:
    """The cause of a failed commit or reload for the log (ENOSPC, EMFILE, corrupt, ...)."""
    return None if exc is None else open_failure_reason(exc)


def open_failure_reason(exc: BaseException) -> str:
    """A short, safe reason for a lane that cannot be opened: the errno's name (EMFILE,
    ENOSPC, ...), "corrupt file (...)", "edited migration", or the store's own message."""
    seen: BaseException | None = exc
    while seen is not None:
        reason = getattr(seen, "reason", None)
        if isinstance(reason, str):
            return reason
        if isinstance(seen, OSError) and seen.errno:
            return errno.errorcode.get(seen.errno, f"errno {seen.errno}")
        if isinstance(seen, sqlite3.DatabaseError):
            text = str(seen)
            if "not a database" in text or "malformed" in text:
                return f"corrupt file ({text})"
            if "disk is full" in text or "database or disk is full" in text:
                return "ENOSPC"
            if "unable to open" in text:
                return "cannot open file"
            return type(seen).__name__
        if EDITED in str(seen):
            return "edited migration"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


READY_PROBE_NAME = ".readyz-probe"  # not a lane file name: never listed as a lane
# What refuses a data dir at start (a full disk does not: a restart serves reads from it).
_REFUSING_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def data_dir_refused(data_dir: Path) -> str | None:
    """Why this process can never create lane files in `data_dir` (None: it can), found by a
    real create, since mode checks lie for root: the probe file in an existing dir, else a
    probe directory in its nearest existing parent (removed at once: `check` creates
    nothing). A permission or read-only file system refuses; a full disk does not."""
    target = data_dir
    while not target.exists() and target != target.parent:
        target = target.parent
    try:
        if target == data_dir:
            probe = data_dir / f".lane-probe-{os.getpid()}"  # not /readyz's: a server may run
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".lane-probe-", dir=target))
    except OSError as exc:
        if exc.errno not in _REFUSING_ERRNOS:
            return None
        why = f"{exc.strerror} (uid {os.geteuid()})"
        if target == data_dir:
            return f"data dir: {data_dir} is not writable: {why}"
        return f"data dir: {data_dir} cannot be created: {why} in {target}"
    return None


def data_dir_unwritable(data_dir: Path) -> str | None:
    """Why a commit could not be written in the data dir now (None: it can). A real write,
    not a mode check (root passes every os.access check): a small probe file is created,
    written and removed, and the file system must have free blocks left."""
    probe = data_dir / READY_PROBE_NAME
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
        os.unlink(probe)
        free = os.statvfs(data_dir).f_bavail
    except OSError as exc:
        return f"data dir not writable: {exc.strerror or type(exc).__name__}"
    if free <= 0:
        return "data dir not writable: no free space"
    return None
