"""Where the local queue must not keep its state dir: a synced folder (Dropbox, OneDrive,
Google Drive, iCloud Drive) or a network mount (NFS, SMB, sshfs, ... from /proc/mounts).
SQLite's WAL locking is not a cross-machine protocol (docs/client.md, "Local queue")."""

from __future__ import annotations

import contextlib
from pathlib import Path

from client.errors import SyncedFolderError

# File systems whose locking SQLite's WAL cannot rely on across machines.
NETWORK_FS_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smbfs", "smb2", "smb3", "afs", "ceph", "glusterfs", "lustre",
        "gpfs", "9p", "ncpfs", "coda", "davfs", "sshfs", "fuse.sshfs", "fuse.rclone",
        "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs", "fuse.davfs2",
        "fuse.goofys", "fuse.juicefs", "fuse.onedriver", "fuse.google-drive-ocamlfuse",
        "fuse.dropbox", "fuse.keybase", "fuse.seaweedfs", "fuse.mfs", "fuse.smbnetfs",
    }
)  # fmt: skip
SYNCED_HINT = (
    "SQLite WAL is not a cross-machine protocol: keep the local queue's state dir on a local "
    "disk (set LANE_STATE_DIR), or set LANE_COORDINATOR_URL to use the shared coordinator"
)


def _synced_name(parts: tuple[str, ...]) -> str | None:
    low = [p.lower() for p in parts]
    for i, part in enumerate(low):
        if part == "dropbox" or part.startswith("dropbox (") or part == ".dropbox":
            return "Dropbox"
        if part.startswith("onedrive"):
            return "OneDrive"
        if part in ("google drive", "googledrive", "my drive") or part.startswith("googledrive-"):
            return "Google Drive"
        if part in ("icloud drive", "iclouddrive", "com~apple~clouddocs"):
            return "iCloud Drive"
        if part == "mobile documents" and i > 0 and low[i - 1] == "library":
            return "iCloud Drive (Library/Mobile Documents)"
        if part == "cloudstorage" and i > 0 and low[i - 1] == "library":
            return "a cloud-synced folder (Library/CloudStorage)"
    return None


def _unescape_mount(field: str) -> str:
    """/proc/mounts escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_fstype(path: Path, mounts_text: str) -> tuple[str, str] | None:
    """(mount point, fs type) of the mount holding `path`, from /proc/mounts text."""
    target = str(path)
    best: tuple[str, str] | None = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mp, fstype = _unescape_mount(fields[1]), fields[2]
        inside = target == mp or target.startswith(mp.rstrip("/") + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best[0])):
            best = (mp, fstype)
    return best


def synced_folder_reason(path: Path, mounts_text: str | None = None) -> str | None:
    """Why `path` must not hold the local queue (a synced folder or a network mount), or None."""
    candidates = [path.expanduser().absolute()]
    with contextlib.suppress(OSError, RuntimeError):
        candidates.append(path.expanduser().resolve())
    for p in candidates:
        name = _synced_name(p.parts)
        if name is not None:
            return f"{p} is inside {name}"
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            mounts_text = ""
    for p in candidates:
        found = mount_fstype(p, mounts_text)
        if found is not None:
            mp, fstype = found
            if fstype in NETWORK_FS_TYPES or fstype.split(".", 1)[-1] in NETWORK_FS_TYPES:
                return f"{p} is on a network mount ({fstype} at {mp})"
    return None


def check_state_dir(path: Path, mounts_text: str | None = None) -> None:
    reason = synced_folder_reason(path, mounts_text)
    if reason is not None:
        raise SyncedFolderError(
            message=f"local queue refused: LANE_STATE_DIR {reason}; {SYNCED_HINT}"
        )
