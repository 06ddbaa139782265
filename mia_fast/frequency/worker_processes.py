"""Worker processes that end with the process that started them, however it ends (SIGKILL included). A pool's
worker otherwise waits on its queue for ever once its parent is gone, holding its memory, the parent's stdout and
the resource tracker, which ends only when the last worker does.

On Linux the kernel kills a worker when its parent ends (``PR_SET_PDEATHSIG``); elsewhere a thread of the worker
waits for the parent's end. A worker whose parent ended before either was in place ends at once."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.process import BaseProcess
from typing import Any

PR_SET_PDEATHSIG = 1
# A worker's exit code where its parent was gone: nothing reads it (the parent is what would have).
ORPHANED = 1


def process_pool(workers: int, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> ProcessPoolExecutor:
    """``workers`` spawned processes, each bound to this process's life (:func:`die_with_parent`) and then started
    by ``initializer(*initargs)``. On Linux a worker is bound to the thread that started it (the one whose submit
    needed it): submit from the thread that holds the pool's ``with`` block, or one that outlives it."""
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=start_bound_worker,
        initargs=(initializer, initargs),
    )


def start_bound_worker(initializer: Callable[..., None], initargs: tuple[Any, ...]) -> None:
    """A pool worker's start: bound to its parent's life, then ``initializer(*initargs)``."""
    die_with_parent()
    initializer(*initargs)


def die_with_parent() -> None:
    """Ends this process (a multiprocessing child) when its parent ends; at once if that has already happened."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if not kernel_kills_with_parent():
        watch_parent(parent)
    if not parent.is_alive():
        os._exit(ORPHANED)


def kernel_kills_with_parent() -> bool:
    """Asks the kernel to SIGKILL this process when the thread that started it ends: True where it will (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


def watch_parent(parent: BaseProcess) -> None:
    """A daemon thread that ends this process once ``parent`` (``multiprocessing.parent_process()``) has ended: it
    waits on the parent's sentinel, which spawn and Windows both provide, so it costs nothing meanwhile."""

    def watch() -> None:
        parent.join()
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="mia-fast-parent-watch", daemon=True).start()
