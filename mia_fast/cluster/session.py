"""Ray, found and connected: the one-line error when it is not installed, a cluster address that does not answer
refused within seconds, and a session that starts Ray here or joins a cluster, adds no line of Ray's own to stderr,
and shuts down only what it started. Ray is imported only inside these functions."""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mia_fast.errors import MiaFastError

INSTALL_HINT = "pip install 'mia-fast[ray]'"
# Seconds to wait for a cluster's address to answer before giving up.
CONNECT_TIMEOUT_S = 5
DEFAULT_PORTS = {"ray://": 10001, "": 6379}
# What Ray's C++ core writes to stderr wherever RAY_BACKEND_LOG_LEVEL is set, whatever the level (it logs the
# level at INFO before it applies it).
LEVEL_LINE = b"Set ray log level from environment variable RAY_BACKEND_LOG_LEVEL"


class RayUnreachable(MiaFastError):
    """Ray could not be started here, or the cluster at an address could not be reached: no task ran."""


def require_ray() -> Any:
    """The ray module, or a one-line error saying how to install it."""
    try:
        import ray  # noqa: PLC0415 (optional: ray, mia-fast[ray])
        import ray.data  # noqa: F401, PLC0415 (optional: ray; the Data library is the [data] extra)
    except ImportError:
        raise MiaFastError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def cluster_address(address: str | None) -> str | None:
    """The cluster a session joins, checked (:func:`check_address`): ``address``, else the one RAY_ADDRESS names,
    else None (a Ray started here)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    check_address(address)
    return address


def check_address(address: str | None) -> None:
    """Fails within CONNECT_TIMEOUT_S when nothing answers at a cluster address (Ray itself retries for minutes)."""
    if not address:
        return
    if Path(address).exists():
        raise MiaFastError(
            f"--ray took {address!r} as the cluster address, but it is a file: write --ray=ADDRESS, or put --ray "
            "after the input"
        )
    if address in ("auto", "local"):
        return
    scheme = "ray://" if address.startswith("ray://") else ""
    host, _, port = address[len(scheme) :].rpartition(":")
    if not host:
        host, port = port, str(DEFAULT_PORTS[scheme])
    if not port.isdigit():
        raise MiaFastError(f"--ray {address}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, socket.timeout) else exc.strerror or str(exc)
        raise RayUnreachable(
            f"cannot reach the Ray cluster at {address}: {reason} (is the address right, and the cluster up?)"
        ) from None


@contextmanager
def _temporary_environment(**values: str) -> Iterator[None]:
    """Sets the variables the user has not set, for the duration."""
    added = [name for name in values if name not in os.environ]
    os.environ.update({name: values[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextmanager
def _stderr_without_level_line() -> Iterator[None]:
    """This process's stderr, the file descriptor Ray's C++ core writes to, held for the duration and then passed on
    whole but for :data:`LEVEL_LINE`."""
    if sys.stderr is not None:
        sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                if sys.stderr is not None:
                    sys.stderr.flush()
                os.dup2(saved, 2)
                held.seek(0)
                kept = b"".join(line for line in held.readlines() if LEVEL_LINE not in line)
                with open(2, "wb", closefd=False) as stderr:
                    stderr.write(kept)
    finally:
        os.close(saved)


@contextmanager
def ray_session(address: str | None = None) -> Iterator[Any]:
    """Ray, connected: to the cluster at ``address`` (``host:port``, ``ray://host:port`` or ``auto``), or to a
    Ray started here when ``address`` is None (or the one RAY_ADDRESS names). Ray already initialized in this
    process is used as it is. Ray is shut down at the end only if it was started or connected here."""
    ray = require_ray()
    address = cluster_address(address)
    if ray.is_initialized():
        yield ray
        return
    options: dict[str, Any] = {} if address else {"include_dashboard": False}
    # Ray's C++ core logs to the terminal (e.g. one error line per actor pool about restartable actors), and says so
    # where it is told not to (LEVEL_LINE, dropped); a connection to a cluster that does not answer is retried for a
    # few seconds, not twenty.
    environment = _temporary_environment(
        RAY_BACKEND_LOG_LEVEL="fatal", RAY_gcs_server_port_wait_time_s=str(CONNECT_TIMEOUT_S)
    )
    with environment, _stderr_without_level_line(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Ray Client connection timed out")  # the error line below says so
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, **options)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            ray.shutdown()  # a client connection that failed stays half set up, and breaks the next ray.init here
            where = f"connect to the Ray cluster at {address}" if address else "start Ray here"
            raise RayUnreachable(f"cannot {where}: {last_line(exc)}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def last_line(exc: BaseException) -> str:
    """The informative line of an error Ray wraps (its last non-empty line: the original exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
