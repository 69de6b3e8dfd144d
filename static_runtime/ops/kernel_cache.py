"""Where kernel choices are remembered between processes (``ops/kernels.py``).

Two files in ``$STATIC_RUNTIME_CACHE_DIR`` (default ``~/.cache/static_runtime/``): a snapshot,
``kernels.json`` (``{"format": …, "entries": {key: entry}}``), and a journal beside it,
``kernels.json.journal``, one JSON line ``[format, key, entry]`` per choice made since the
snapshot was last written. A process reads both once (when its first module that measures is
prepared). A new choice — made on the request path, right after its measurement — appends
one line, under an exclusive ``flock`` on a lock file beside them: its cost does not grow
with the cache (rewriting the whole file took 14 ms at 3,200 choices). Past
``COMPACT_BYTES`` of journal, or if the snapshot could not be read or is an older release's, the
writer folds what both files hold (other processes' lines included) into a new snapshot —
a temporary file renamed over it, so readers never see half a file — and empties the
journal. A line cut short (a process killed mid-write) is skipped. An unreadable or
unwritable cache is warned about once and the choices live in memory only. The snapshot also
records when each version of our kernels (the ``native=`` digest in a key) last had a choice
written; a fold drops the choices of versions unwritten for ``STALE_AFTER_S`` (30 days), so
the cache holds what the versions in use measured, not every release's.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
import threading
import time
import warnings
from pathlib import Path

#: 2: ours timed by its unchecked call (format 1 timed it through checks costing ~0.9 µs a
#: call, so tiny products chose ATen's); 3: each candidate's first call timed too (``setup``);
#: an older format's choices are measured again.
CACHE_FORMAT = 3

#: journal bytes past which a write folds it into the snapshot (~250 choices)
COMPACT_BYTES = 64 * 1024

#: a version of our kernels whose choices no process has written for this long has its
#: choices dropped at the next fold: every release (and every edit of the kernels' sources)
#: measures anew under its own digest, and a machine's cache grew to 3,200 choices, half of
#: them for versions nothing read any more — parsed by every process at preparation
STALE_AFTER_S = 30 * 86400

_VERSION = re.compile(r" \| native=([0-9a-f]+)(?: \||$)")


def version_of(key: str) -> str | None:
    """The digest of our kernels' sources a choice was made with (``native=`` in its key),
    or None for a choice among PyTorch's kernels only (never dropped for age)."""
    m = _VERSION.search(key)
    return m.group(1) if m else None


def cache_path() -> Path:
    """``$STATIC_RUNTIME_CACHE_DIR/kernels.json``, else under ``$XDG_CACHE_HOME`` or
    ``~/.cache``, in ``static_runtime/``."""
    root = os.environ.get("STATIC_RUNTIME_CACHE_DIR")
    if root:
        return Path(root) / "kernels.json"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "static_runtime" / "kernels.json"


class DiskCache:
    """Choices of one cache (snapshot and journal): key → entry, for the CPU it was made on."""

    def __init__(self, path: Path):
        self.path = path
        self.journal = path.with_name(path.name + ".journal")
        self._entries: dict[str, dict] | None = None
        self._lock = threading.Lock()
        self._warned = False
        #: the snapshot is unreadable or an older release's: the next write replaces it
        self._stale = False
        #: the snapshot's (inode, mtime, size) when this process last read or wrote it: as
        #: it was, a fold need not parse it again (every fold replaces it: a new inode)
        self._seen: tuple[int, int, int] | None = None
        #: version (``version_of``) → when a process last wrote a choice of it (the
        #: snapshot's record, as last read or written here)
        self._versions: dict[str, float] = {}
        #: the versions this process wrote choices of (recorded at its next fold)
        self._written: set[str] = set()

    def load(self) -> None:
        """Read the files now, if not yet: while a module is prepared, not on its first call
        (3,000 choices parse in ~6 ms, but the objects they make can be what starts a full
        collection of the process — 185 ms on a MobileNet's first call)."""
        with self._lock:
            if self._entries is None:
                self._entries = self._read()

    def get(self, key: str) -> dict | None:
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            return self._entries.get(key)

    def put(self, key: str, entry: dict) -> None:
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            self._entries[key] = entry
            version = version_of(key)
            if version is not None:
                self._written.add(version)
            try:
                self._write(key, entry)
            except OSError as e:
                self._warn(f"cannot write the kernel choice cache {self.path} ({e}); choices "
                           "are kept in memory only")

    def _read(self) -> dict[str, dict]:
        entries = self._read_snapshot()
        entries.update(self._read_journal())
        return entries

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _read_snapshot(self) -> dict[str, dict]:
        self._stale = False
        self._seen = self._stamp()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as e:
            self._warn(f"cannot read the kernel choice cache {self.path} ({e})")
            return {}
        try:
            data = json.loads(text)
            older = data.get("format") if isinstance(data, dict) else None
            if type(older) is int and older < CACHE_FORMAT:
                self._stale = True
                return {}  # an older release's choices: measured again, then rewritten
            if data.get("format") != CACHE_FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError(f"not format {CACHE_FORMAT}")
            versions = data.get("versions")
            self._versions = {k: float(v) for k, v in versions.items()
                              if isinstance(k, str) and isinstance(v, (int, float))} \
                if isinstance(versions, dict) else {}
            return dict(data["entries"])
        except (ValueError, AttributeError) as e:
            self._stale = True
            self._warn(f"the kernel choice cache {self.path} is unreadable ({e}); it will be "
                       "rewritten")
            return {}

    def _read_journal(self) -> dict[str, dict]:
        """The journal's choices of this format, in order (a later line wins)."""
        entries: dict[str, dict] = {}
        try:
            with open(self.journal, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return entries
        except OSError as e:
            self._warn(f"cannot read the kernel choice journal {self.journal} ({e})")
            return entries
        for line in lines:
            try:
                fmt, key, entry = json.loads(line)
            except (ValueError, TypeError):
                continue  # (cut short by a process killed mid-write)
            if fmt == CACHE_FORMAT and isinstance(key, str) and isinstance(entry, dict):
                entries[key] = entry
        return entries

    def _write(self, key: str, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
            line = json.dumps([CACHE_FORMAT, key, entry], sort_keys=True,
                              separators=(",", ":")).encode() + b"\n"
            fd = os.open(self.journal, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if self._stale or size >= COMPACT_BYTES:
                    os.close(fd)
                    fd = -1
                    self._compact()
                    return
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # (after a line cut short: on a line of its own)
                os.write(fd, line)  # (one write of one line, under the lock)
            finally:
                if fd >= 0:
                    os.close(fd)

    def _compact(self) -> None:
        """Under the lock: what both files hold, and this process's choices, as a new
        snapshot; the journal emptied. The snapshot is parsed again only if another process
        replaced it since this one read it (3,000 choices parse in ~6 ms, but the objects
        they make can start a full collection of a large process: ~100–200 ms, on the
        request path here)."""
        merged = self._read_snapshot() if self._stamp() != self._seen or self._stale else {}
        merged.update(self._read_journal())
        merged.update(self._entries or {})
        versions = self._aged(merged)
        self._entries = merged
        # (one string from the C encoder: ``json.dump`` to a file with ``indent`` encodes in
        # Python, ~4 x slower)
        text = json.dumps({"format": CACHE_FORMAT, "entries": merged, "versions": versions},
                          sort_keys=True, separators=(",", ":"))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".kernels.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        with open(self.journal, "w", encoding="utf-8"):
            pass  # (emptied: its lines are in the snapshot now)
        self._stale = False
        self._seen = self._stamp()

    def _aged(self, merged: dict[str, dict]) -> dict[str, float]:
        """Each version's last write (this process's now; a version first seen now: now),
        with the choices of versions unwritten for ``STALE_AFTER_S`` dropped from
        ``merged``, and those versions from the record."""
        now = time.time()
        versions = dict(self._versions)
        for v in self._written:
            versions[v] = now
        present = {version_of(k) for k in merged} - {None}
        for v in present - versions.keys():
            versions[v] = now  # (a choice from before versions were recorded, or a journal's)
        stale = {v for v, t in versions.items() if now - t > STALE_AFTER_S}
        if stale:
            for k in [k for k in merged if version_of(k) in stale]:
                del merged[k]
        self._versions = {v: t for v, t in versions.items() if v not in stale and v in present}
        self._written.clear()
        return self._versions

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"static_runtime: {message}", RuntimeWarning, stacklevel=3)


_CACHES: dict[Path, DiskCache] = {}
_CACHES_LOCK = threading.Lock()


def disk_cache(path: Path | None = None) -> DiskCache:
    """The process's one ``DiskCache`` for ``path`` (default: ``cache_path()``)."""
    path = (path or cache_path()).absolute()
    with _CACHES_LOCK:
        cache = _CACHES.get(path)
        if cache is None:
            cache = _CACHES[path] = DiskCache(path)
        return cache
