"""Stage timing for a compile, shown on a terminal only when the compile is slow.

    with Progress(sys.stderr) as progress:
        with progress.stage("import"):
            ...
    progress.times   # {"import": 0.41, ...}

Every stage is timed (``--report`` prints the times). The stages are shown on
``stream`` only when it is a terminal and the compile has run for ``delay``
seconds: a quick compile stays quiet, a slow one shows where the time goes. A
timer thread then prints the stages already done and the one in progress; later
stages print as they start and overwrite their line with the time when they end.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class Progress:
    def __init__(self, stream=None, delay: float = 2.0, enabled: bool | None = None):
        self.times: dict[str, float] = {}
        self._stream = stream
        if enabled is None:
            enabled = stream is not None and _is_terminal(stream)
        self._enabled = enabled
        self._delay = delay
        self._visible = False
        self._current: str | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Progress":
        if self._enabled:
            self._timer = threading.Timer(self._delay, self._reveal)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._visible and self._current is not None:   # a stage failed: end its line
                self._write("\n")
            self._visible = False

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        with self._lock:
            self._current = name
            if self._visible:
                self._write(_running(name))
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.times[name] = self.times.get(name, 0.0) + seconds
            with self._lock:
                self._current = None
                if self._visible:
                    self._write(f"\r{_done(name, seconds)}\n")

    def _reveal(self) -> None:
        with self._lock:
            self._visible = True
            for name, seconds in self.times.items():     # the stages already done
                self._write(_done(name, seconds) + "\n")
            if self._current is not None:
                self._write(_running(self._current))

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def _running(name: str) -> str:
    return f"xlac: {name:<9} ..."


def _done(name: str, seconds: float) -> str:
    # At least as long as _running(name), so the carriage return overwrites all of it.
    return f"xlac: {name:<9} {seconds:7.2f} s"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False
