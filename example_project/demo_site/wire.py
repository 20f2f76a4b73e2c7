"""Count the bytes each HTTP exchange moves over the socket, and log them one JSON line per request.

Cost figures (304 versus a full fetch) need the server's own byte counts, independent of anything
the crawler measures. The handler's ``rfile`` and ``wfile`` are wrapped: the reader counts what the
handler consumed for one request (so read-ahead of a pipelined next request is not billed to this
one), and the writer holds one response until the request is logged, so a log line is on disk
before the client sees the response it describes (a driver that reads the log when a crawl ends
never misses its last request).
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os

    from typing_extensions import Buffer


class CountingReader(io.BufferedIOBase):
    """A read-through wrapper that counts the bytes taken from *raw* since the last :meth:`reset`."""

    def __init__(self, raw: io.BufferedIOBase) -> None:
        super().__init__()
        self._raw = raw
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:
        data = self._raw.read(size)
        self.count += len(data)
        return data

    def read1(self, size: int = -1, /) -> bytes:
        data = self._raw.read1(size)
        self.count += len(data)
        return data

    def readline(self, size: int | None = -1, /) -> bytes:
        data = self._raw.readline(size)
        self.count += len(data)
        return data

    def close(self) -> None:
        self._raw.close()
        super().close()


class HeldWriter(io.BufferedIOBase):
    """Holds what the handler writes until :meth:`release`, counting every byte since :meth:`reset`."""

    def __init__(self, raw: io.BufferedIOBase) -> None:
        super().__init__()
        self._raw = raw
        self._held = bytearray()
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer, /) -> int:
        with memoryview(data) as view:
            self._held += view
            self.count += view.nbytes
            return view.nbytes

    def flush(self) -> None:
        pass  # the response leaves in release(), after its log line is written

    def release(self) -> None:
        """Send everything held; the socket writer's ``sendall`` sends it all or raises."""
        if self._held:
            data = bytes(self._held)
            self._held.clear()
            self._raw.write(data)

    def close(self) -> None:
        try:
            self.release()
        except OSError:
            pass  # the client has gone; nothing left to deliver
        finally:
            self._raw.close()
            super().close()


class ByteLog:
    """Append-only JSON-lines file shared by every host of a site; one lock serialises the writers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)


def read_byte_log(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The records appended to *path* after byte *offset*, and the offset to read from next time.

    Only whole lines are read, so a line being written while the driver reads is picked up next time.
    """
    target = Path(path)
    if not target.exists():
        return [], offset
    with target.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    records = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return records, offset + end
