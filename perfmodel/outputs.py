"""The one output layer: every file the tool writes, and its standard output.

`write_file(path, data, inputs=...)` is how a command writes a file (`calibrate --out`, `models
import --out`, `profile import-aic --out`, `measure`'s profile and log, `compare --plot`, each
file of a report):

- it refuses, in one line (`OutputError`, exit 2), to write onto a file the command read: the
  target and each input are compared by device and inode after resolving links, so a relative
  path, a symlink or a hard link to an input is refused too;
- it writes atomically: a temporary file in the target's folder, flushed and fsynced, then
  renamed over the target (os.replace), so a kill or Ctrl-C leaves the whole previous file (or
  none), never a part; temporary files left by a killed writer are removed by the next write;
- an exclusive lock (fcntl.flock on `.<name>.perfmodel-lock` beside the target, removed when done)
  serialises two writers of one path;
- a symlink is written through: its final target is replaced and the link is kept;
- the new file keeps an existing file's permission bits (and owner, where allowed), else gets
  0666 less the umask; a target that is not a regular file (/dev/null, /dev/stdout, a FIFO) is
  written in place, since it cannot be renamed over.

`AtomicText` is a text file built up over a run (`measure`'s log): its `publish()` replaces the
file with everything written so far through `write_file`.

`prepare_stdio()` and `stdout_failed()` are the CLI's standard output: where stdout cannot encode
the tables' characters (`PYTHONIOENCODING=ascii`, `LC_ALL=C PYTHONUTF8=0`) it is given an ASCII
transliteration (× → x, — → -, σ → sigma), and a closed or failing stdout ends the command with
one line on stderr and exit 1 instead of a traceback.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import io
import os
import stat
import sys
import tempfile
import time
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from perfmodel.inputs import InputError

TMP_TAG = "perfmodel-partial-"
LOCK_SUFFIX = ".perfmodel-lock"


class OutputError(InputError):
    """An output that cannot be written (onto an input, a directory, a folder not writable);
    the message is one line naming it. The CLI prints it and exits 2."""


# ------------------------------------------------------------------------------ files
def _stat(p) -> os.stat_result | None:
    try:
        return os.stat(p)
    except (OSError, ValueError):
        return None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (device and inode, links followed)."""
    sa, sb = _stat(a), _stat(b)
    return sa is not None and sb is not None and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def target_of(path: str | os.PathLike) -> Path:
    """The file a write to `path` replaces: a symlink's final target (for a dangling link, the
    path it names), else `path` itself."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def check_target(path: str | os.PathLike, inputs: Iterable = (), what: str = "--out") -> Path:
    """The file `write_file(path)` would replace, or OutputError (one line) if it is a
    directory or one of `inputs` (paths the command read; None entries are skipped)."""
    p = Path(path)
    target = target_of(p)
    if target.is_dir():
        raise OutputError(f"{what} {p}: is a directory; name a file")
    for inp in inputs:
        if inp is not None and same_file(target, inp):
            raise OutputError(f"{what} {p}: is {inp}, a file this command reads; write to another path")
    return target


def default_mode() -> int:
    """0666 less the umask: the mode `open()` would give a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_all(f, data: bytes) -> None:
    f.write(data)


def _replace(target: Path, data: bytes, mode: int | None) -> None:
    old = _stat(target)
    if mode is None:
        mode = stat.S_IMODE(old.st_mode) & 0o777 if old is not None else default_mode()
    for stale in stale_temp_files(target):
        with contextlib.suppress(OSError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{TMP_TAG}{os.getpid()}-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(OSError):  # allowed for root, or a group the user is in
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_path(target.parent)


def write_file(path: str | os.PathLike, data: bytes | str, *, inputs: Iterable = (), what: str = "--out",
               mode: int | None = None) -> Path:
    """Write `data` (str: UTF-8) to `path` as the module doc says; return the path written to
    (`path` itself, a symlink kept). OutputError, one line naming `what` and the path, for a
    refused target or a failed write; the previous file is then untouched."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    p = Path(path)
    target = check_target(p, inputs, what)
    st = _stat(target)
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):  # a device or FIFO: cannot be renamed over
            with open(target, "wb") as f:
                _write_all(f, data)
            return p
        target.parent.mkdir(parents=True, exist_ok=True)
        with locked(target):
            _replace(target, data, mode)
    except OSError as e:
        raise OutputError(f"cannot write {what} {p}: {e.strerror or e}") from None
    return p


def lock_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p.parent / f".{p.name}{LOCK_SUFFIX}"


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold the lock file beside `path`, and remove it before letting go, so that none is left.
    A waiter that wakes on a lock file its holder removed (its inode no longer at the path) opens
    the path again, so two writers never hold two lock files at once."""
    lp = lock_path(path)
    while True:
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), os.stat(lp)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                break
        except FileNotFoundError:
            pass  # removed by the writer before us: lock the next one
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lp.unlink()  # still holding it: a waiter on this inode retries
        os.close(fd)  # closing releases the lock


def stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Temp files `write_file` left beside `path` when its process was killed (SIGKILL): those
    whose writer process no longer runs."""
    path = Path(path)
    out = []
    head = f".{path.name}.{TMP_TAG}"
    for p in path.parent.glob(f"{glob_escape(head)}*.tmp"):
        pid = p.name[len(head):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            out.append(p)
    return out


def glob_escape(s: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in s)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_path(d: str | os.PathLike) -> None:
    """fsync a file or a folder (a folder: so that a rename in it is durable); best effort."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AtomicText(io.TextIOBase):
    """A text file written over a run: `write` keeps the text, `publish()` replaces the file with
    all of it so far (write_file), at most every `every_s` seconds unless `force`. With `append`,
    the existing file's bytes come first. A kill leaves the last published file, whole."""

    def __init__(self, path: str | os.PathLike, *, append: bool = True, inputs: Iterable = (), what: str = "log",
                 every_s: float = 2.0):
        self.path = Path(path)
        self._inputs, self._what, self._every = tuple(inputs), what, every_s
        check_target(self.path, self._inputs, what)
        self._base = b""
        if append and target_of(self.path).is_file():
            self._base = target_of(self.path).read_bytes()
        self._buf = io.StringIO()
        self._last = float("-inf")
        self._published = None

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return self._buf.write(s)

    def publish(self, force: bool = False) -> None:
        now = time.monotonic()
        text = self._buf.getvalue()
        if text == self._published or (not force and now - self._last < self._every):
            return
        write_file(self.path, self._base + text.encode("utf-8"), inputs=self._inputs, what=self._what)
        self._last, self._published = now, text

    def close(self) -> None:
        if not self.closed:
            try:
                self.publish(force=True)
            finally:
                super().close()


# ------------------------------------------------------------------------------ standard output
ASCII = str.maketrans({"×": "x", "—": "-", "–": "-", "−": "-", "≤": "<=", "≥": ">=", "±": "+/-", "σ": "sigma",
                       "Σ": "sum", "µ": "u", "μ": "u", "τ": "tau", "α": "alpha", "→": "->", "⇒": "=>", "←": "<-",
                       "…": "...", "‘": "'", "’": "'", "“": '"', "”": '"', "·": ".", "≈": "~", "÷": "/", "°": "deg",
                       "§": "S", "⌈": "ceil(", "⌉": ")", "∝": "~", "Δ": "d", "•": "*", "\u00a0": " "})
CODEC = "perfmodel_ascii"  # a name of its own: click rewraps a stream named 'ascii' as UTF-8
PROBE = "×—≤σµτ"  # characters the tables print


def to_ascii(s: str) -> str:
    """`s` in ASCII: the table's symbols spelt out, accents dropped, anything else '?'."""
    s = s.translate(ASCII)
    if s.isascii():
        return s
    return "".join(c if c.isascii() else (unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode() or "?")
                   for c in s)


class _AsciiEncoder(codecs.IncrementalEncoder):
    def encode(self, s: str, final: bool = False) -> bytes:
        return to_ascii(s).encode("ascii", "replace")


def _codec(name: str) -> codecs.CodecInfo | None:
    if name.replace("-", "_") != CODEC:
        return None
    ascii_codec = codecs.lookup("ascii")
    return codecs.CodecInfo(name=CODEC, encode=lambda s, errors="strict": (to_ascii(s).encode("ascii", "replace"), len(s)),
                            decode=ascii_codec.decode, incrementalencoder=_AsciiEncoder,
                            incrementaldecoder=ascii_codec.incrementaldecoder)


codecs.register(_codec)


def ascii_only(stream) -> bool:
    """Whether `stream` prints the tables' characters only as their ASCII transliteration."""
    return (getattr(stream, "encoding", None) or "").replace("-", "_") == CODEC or not _encodes(stream)


def _encodes(stream, text: str = PROBE) -> bool:
    try:
        text.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class StdoutError(OSError):
    """Standard output failed (full, closed, an I/O error); a broken pipe stays BrokenPipeError."""


class _Fd(io.FileIO):
    """fd 1, whose write errors are told apart from those of other files (StdoutError)."""

    def write(self, b) -> int:
        try:
            return super().write(b)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None


def prepare_stdio() -> None:
    """Standard output for the CLI: one line and exit 1 if it is closed; writes through `_Fd`;
    ASCII transliteration where it cannot encode the tables' characters (stderr too)."""
    out = sys.stdout
    try:
        fd = out.fileno() if out is not None else None
        if fd is None:
            raise OSError(errno.EBADF, "closed")
        os.fstat(fd)
    except (OSError, ValueError, AttributeError):
        if out is None or not hasattr(out, "buffer"):  # closed at start, not a test's stand-in
            _say("perfmodel: standard output is closed; redirect it (to a file or /dev/null)")
            sys.exit(1)
        return
    enc = out.encoding if _encodes(out) else CODEC
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_Fd(fd, "wb", closefd=False)), encoding=enc,
                                  errors=out.errors, line_buffering=out.line_buffering)
    err = sys.stderr
    if err is not None and hasattr(err, "buffer") and not _encodes(err):
        sys.stderr = io.TextIOWrapper(err.buffer, encoding=CODEC, errors="strict", line_buffering=True)


def _say(line: str) -> None:
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            print(line, file=sys.stderr, flush=True)


def quiet_stdout() -> None:
    """Point fd 1 at /dev/null, so that the interpreter's last flush of what is left finds no error."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def stdout_failed(e: OSError) -> int:
    """One line on stderr for a failed standard output; the exit code (1)."""
    quiet_stdout()
    _say(f"perfmodel: cannot write to standard output: {e.strerror or e}")
    return 1


__all__ = ["AtomicText", "OutputError", "StdoutError", "ascii_only", "check_target", "fsync_path", "locked", "prepare_stdio",
           "same_file", "stale_temp_files", "stdout_failed", "to_ascii", "write_file"]
