"""Writing what a user keeps without ever losing what was there: a file is replaced only by a complete new one
(written beside it, then renamed over it), an output has one writer at a time (an exclusive lock naming its
holder), and every JSON artefact read back carries a checksum of its content."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mia_fast.errors import MiaFastError

CHECKSUM_KEY = "sha256"


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_directory(directory: Path) -> None:
    """Makes a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path`` (open descriptor, name), named as :func:`is_temporary_of` knows, with
    the mode ``open`` gives a new file (mkstemp's 0600 would make a renamed metadata file unreadable to the other
    users who can read the rest of an output)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, name


def _umask() -> int:
    """This process's umask, read without setting it where Linux says it (setting it races other threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def is_temporary_of(name: str, target: str) -> bool:
    """Whether a file called ``name`` is a temporary file this module wrote on the way to ``target`` (a run killed
    before its rename leaves one)."""
    return name.startswith(f".{target}.") and name.endswith(".tmp")


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write: renamed over ``path`` (durably) when the block ends without an
    error, removed otherwise, so ``path`` is either what it was or the complete new file."""
    path = Path(path)
    fd, name = _temporary_beside(path)
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
        fsync_directory(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Replaces ``path`` by ``data`` as a whole (text as UTF-8), making its folder where there is none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temporary:
        temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _canonical(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def checked_json(payload: Mapping[str, Any], kind: str) -> str:
    """``payload`` as JSON with its ``format`` (``kind``) and a checksum of both; non-finite numbers are refused
    (they are not JSON)."""
    body = {"format": kind, **payload}
    try:
        checksum = hashlib.sha256(_canonical(body)).hexdigest()
    except ValueError as exc:
        raise MiaFastError(f"cannot write a {kind} file: {exc}") from None
    return json.dumps({**body, CHECKSUM_KEY: checksum}, indent=1, allow_nan=False) + "\n"


def write_checked_json(path: str | os.PathLike, payload: Mapping[str, Any], kind: str) -> Path:
    """Writes :func:`checked_json` atomically."""
    return write_atomic(path, checked_json(payload, kind))


def read_checked_json(path: str | os.PathLike, kind: str, writer: str) -> dict[str, Any]:
    """The payload of a file written by :func:`write_checked_json` (without ``format`` and the checksum); one clear
    error when it cannot be read, is not a ``kind`` file (``writer`` says what writes one), or was changed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MiaFastError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise MiaFastError(f"{path} is not a {kind} file (not JSON); {writer} writes one") from None
    if not isinstance(data, dict) or data.get("format") != kind:
        raise MiaFastError(f"{path} is not a {kind} file; {writer} writes one")
    checksum = data.pop(CHECKSUM_KEY, None)
    if checksum is None:
        raise MiaFastError(f"{path} has no checksum (written by an older mia-fast?); {writer} writes it again")
    try:
        actual = hashlib.sha256(_canonical(data)).hexdigest()
    except ValueError:
        actual = None
    if actual != checksum:
        raise MiaFastError(f"{path}: checksum mismatch: the file was changed after it was written; {writer} again")
    del data["format"]
    return data


LOCK_MARK = "mia-fast output lock"
_MARK_LINE = f"{LOCK_MARK}\n".encode()


def lock_path(output: str | os.PathLike) -> Path:
    """The lock of an output: ``OUT.lock``."""
    output = Path(output)
    return output.with_name(output.name + ".lock")


def holds_lock_mark(lock: Path) -> bool:
    """Whether the file at ``lock`` is a lock of this tool (it starts with the tool's mark); a link is not."""
    if lock.is_symlink() or not lock.is_file():
        return False
    try:
        with open(lock, "rb") as f:
            return f.read(len(_MARK_LINE)) == _MARK_LINE
    except OSError:
        return False


def foreign_lock(lock: Path, option: str = "--out") -> MiaFastError:
    """The one line refusing a file at an output's lock path that is not a lock of this tool."""
    return MiaFastError(
        f"{lock} is not a lock of mia-fast (it lacks the tool's mark); it was left as it is: move it away, or choose "
        f"another {option}"
    )


class OutputLock:
    """An exclusive lock on an output for the length of a run: ``<output>.lock`` holds this tool's mark and the
    writer's PID, and a second writer is refused naming it. The lock is the kernel's (``flock``), so a killed writer
    holds none. A file at that path without the mark is not ours: it is refused, never truncated or removed."""

    def __init__(self, output: str | os.PathLike) -> None:
        self.output = Path(output)
        self.path = lock_path(self.output)
        self._fd: int | None = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def _open(self) -> int:
        """The lock file, made with the mark in it where there is none: a temporary file linked into place, so that
        no reader ever sees a lock without its mark."""
        while True:
            try:
                return os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                pass
            fd, name = _temporary_beside(self.path)
            try:
                os.write(fd, _MARK_LINE)
                with contextlib.suppress(FileExistsError):
                    os.link(name, self.path)
            finally:
                os.close(fd)
                os.unlink(name)

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._lock()
        except OSError as exc:
            raise MiaFastError(f"cannot write {self.output}: {exc.strerror or exc}") from None
        if os.pread(fd, len(_MARK_LINE), 0) != _MARK_LINE:
            os.close(fd)
            raise foreign_lock(self.path, "output")
        # The mark stays in place: only the PID after it is rewritten.
        os.ftruncate(fd, len(_MARK_LINE))
        os.pwrite(fd, f"{os.getpid()}\n".encode(), len(_MARK_LINE))
        self._fd = fd

    def _lock(self) -> int:
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise MiaFastError(
                    f"{self.output} is being written by process {self._holder()} (lock {self.path.name}); "
                    "wait for it to finish or choose another output"
                ) from None
            # A holder that was releasing may have removed the file we opened: lock the one at the path.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def _holder(self) -> str:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return "unknown"
        return lines[1].strip() if len(lines) > 1 and lines[1].strip() else "unknown"

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
