"""The cyclic garbage collector held off while one large read is decoded and turned into models.

Decoding 10,000 nodes' JSON makes about a million dicts and lists at once. Each collection their
allocation sets off walks them, and once they count as long-lived the next full collection walks
the whole heap, yet none of them can be in a reference cycle: reference counting frees them all
the moment the parse is done. At 10,000 nodes and 50,000 jobs those collections were half of the
control plane's refresh cycle. Collection resumes, counting only what the read kept, at the end.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside. For synchronous work only, never across an await (other
    tasks would run without it for as long); nesting is free, and whoever disabled the collector
    before (a test, an embedding process) finds it still disabled after."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
