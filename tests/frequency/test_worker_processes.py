"""Worker processes end with their parent: a pool's idle worker when the parent is SIGKILLed (by the kernel on
Linux, by the watching thread elsewhere, each tested alone), and a worker whose parent ended before it started."""

import os
import signal
import subprocess
import sys

import pytest
from helpers import end_processes, process_start, processes_ended, wait_until

from mia_fast.frequency.worker_processes import process_pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A parent of one pool worker, which prints the worker's pid once the worker has answered a task (its start done).
PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from mia_fast.frequency.worker_processes import process_pool, watch_parent

def watched():
    watch_parent(multiprocessing.parent_process())

if __name__ == "__main__":
    if sys.argv[1] == "pool":
        pool = process_pool(1, time.sleep, (0,))
    else:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=watched)
    print(pool.submit(os.getpid).result(), flush=True)
    time.sleep(600)
"""

# A parent that ends at once, and its child, which binds itself to the parent only once the parent has ended.
LATE = """
import multiprocessing, os, sys, time
from mia_fast.frequency.worker_processes import die_with_parent

def child(parent, marker):
    while os.getppid() == parent:
        time.sleep(0.01)
    die_with_parent()
    open(marker, "w").close()

if __name__ == "__main__":
    process = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(), sys.argv[1]))
    process.start()
    print(process.pid, flush=True)
    os._exit(0)
"""


def started_worker(script, tmp_path, *args) -> tuple[subprocess.Popen, tuple[int, int]]:
    path = tmp_path / "parent.py"
    path.write_text(script)
    parent = subprocess.Popen([sys.executable, path, *args], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    return parent, (pid, process_start(pid))


@pytest.mark.parametrize("bound_by", ["pool", "watch"])
def test_an_idle_worker_ends_when_its_parent_is_killed(bound_by, tmp_path):
    parent, worker = started_worker(PARENT, tmp_path, bound_by)
    try:
        assert worker[1] is not None
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_until(lambda: processes_ended({worker}), "the worker ended")
    finally:
        parent.kill()
        end_processes({worker})


def test_a_worker_whose_parent_ended_before_it_was_bound_ends_at_once(tmp_path):
    marker = tmp_path / "survived"
    parent, worker = started_worker(LATE, tmp_path, marker)
    try:
        parent.wait()
        wait_until(lambda: processes_ended({worker}), "the worker ended")
    finally:
        end_processes({worker})
    assert not marker.exists()


def test_a_pool_runs_its_initializer_and_tasks_in_processes_of_their_own(tmp_path):
    here = os.getcwd()
    with process_pool(2, os.chdir, (str(tmp_path),)) as pool:
        assert pool.submit(os.getcwd).result() == str(tmp_path)
        assert pool.submit(os.getpid).result() != os.getpid()
    assert os.getcwd() == here != str(tmp_path)
