"""Progress: tqdm's notebook widget where Jupyter's widgets are installed, its text bar on a terminal, and in the
command line, on a stderr that is not a terminal (a log file, CI), one line every few seconds.

`tqdm.auto` picks the widget in any Jupyter kernel and, without ipywidgets,
warns "IProgress not found" on import; the text bar works there too. A bar asked
for with `disable=None` is off where stderr is not a terminal (tqdm's rule), so a
library user's logs stay clean; the command line calls `log_lines()` so that its
user sees the fit advance (and a long compilation go on) in a log as well.
"""

import importlib.util
import sys
import threading
import time

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm as _tqdm
else:
    from tqdm.std import tqdm as _tqdm

__all__ = ["log_lines", "tqdm"]

_LINES = {"on": False, "every": 5.0}


def log_lines(on=True, every=5.0):
    """Where stderr is not a terminal, show the bars asked for with `disable=None` as a line every `every` seconds."""
    _LINES.update(on=bool(on), every=float(every))


def tqdm(iterable=None, *args, disable=False, **kwargs):
    """tqdm's bar, or `LineProgress` where `log_lines()` is on, `disable` is None and stderr is not a terminal."""
    if disable is None and _LINES["on"] and not _isatty(sys.stderr):
        return LineProgress(iterable, every=_LINES["every"], **kwargs)
    return _tqdm(iterable, *args, disable=disable, **kwargs)


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class LineProgress:
    """The part of tqdm's interface jaxrbd uses, printed as one line every `every` seconds from a background thread.

    The thread prints while the main thread is busy in one long call (a compilation,
    the first step), so a log shows that the work goes on; each line gives the count,
    the last `set_postfix` values and the elapsed time.
    """

    def __init__(self, iterable=None, *, total=None, desc="", every=5.0, unit="it", file=None, **_ignored):
        self.iterable = iterable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.desc, self.unit, self.n, self.postfix = desc or "progress", unit, 0, ""
        self.file = sys.stderr if file is None else file
        self._start = time.perf_counter()
        self._stop = threading.Event()
        self._print("started")
        self._thread = threading.Thread(target=self._beat, args=(every,), daemon=True)
        self._thread.start()

    def _beat(self, every):
        while not self._stop.wait(every):
            self._print()

    def _print(self, note=None):
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        parts = [f"{count} {self.unit}", self.postfix, f"{time.perf_counter() - self._start:.0f} s", note or ""]
        print(f"{self.desc}: " + ", ".join(p for p in parts if p), file=self.file, flush=True)

    def update(self, n=1):
        self.n += n

    def set_postfix(self, **values):
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def close(self):
        if not self._stop.is_set():
            self._stop.set()
            self._print("done")

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
