"""A small disk for the disk-full faults: a tmpfs mounted in a private mount namespace.

`SmallDisk(mountpoint, size)` starts a holder process (`unshare -m --propagation private`,
which mounts the tmpfs on `mountpoint` and then waits on its stdin): the mount exists only in that
namespace, so it goes away with the holder whatever happens to the test — nothing is left
mounted on the machine. Servers run inside it (`command()`: `nsenter -t HOLDER -m --
lane-coordinator`); the test reaches the same files through `/proc/HOLDER/root/...`
(`view`). `fill()` writes a filler file until the file system answers ENOSPC (to the last
byte), `free()` removes it.

Mounting needs root (CAP_SYS_ADMIN) and util-linux's unshare and nsenter. Where they are
missing the test fails and says why: a disk-full test that silently skips proves nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness.subproc import coordinator_cmd

# The holder waits on its stdin: when the test process goes, however it goes, the pipe
# closes, `read` returns and the namespace (with its tmpfs) goes once no server is left in it.
MOUNT = 'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$2" && echo mounted && read _'


class SmallDisk:
    def __init__(self, mountpoint: Path, size: str) -> None:
        missing = [t for t in ("unshare", "nsenter") if shutil.which(t) is None]
        if missing:
            pytest.fail(f"the disk-full fault needs util-linux {' and '.join(missing)}")
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.mountpoint = mountpoint
        self.holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", MOUNT, "sh", size,
             str(mountpoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != "mounted":
            self.holder.kill()
            _, err = self.holder.communicate(timeout=10)
            pytest.fail(
                f"cannot mount a {size} tmpfs in a private mount namespace (euid "
                f"{os.geteuid()}): {err.strip() or 'no reason given'}; the disk-full fault "
                "needs root or CAP_SYS_ADMIN (run the campaign as root, e.g. in CI's container "
                "with --privileged or --cap-add SYS_ADMIN)"
            )
        self.view = Path(f"/proc/{self.holder.pid}/root") / mountpoint.relative_to("/")
        self.filler = self.view / "filler"
        self.filler.touch()  # created while there is room: filling then only appends

    def command(self) -> list[str]:
        """Run the coordinator inside the disk's mount namespace."""
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *coordinator_cmd()]

    def inside(self, path: Path) -> Path:
        """`path` (under the mountpoint, as the server sees it) as the test reaches it."""
        return self.view / path.relative_to(self.mountpoint)

    def free_bytes(self) -> int:
        st = os.statvfs(self.view)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Append to the filler until ENOSPC, down to single bytes; returns bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_APPEND)
        try:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                chunk = b"\0" * size
                while True:
                    try:
                        written += os.write(fd, chunk)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        """Give the space back (the filler is truncated, not removed: it can fill again)."""
        os.truncate(self.filler, 0)

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
            self.holder.communicate(timeout=10)
