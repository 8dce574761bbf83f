"""Fenced commits (storage._lease): a run paused past its lease's TTL while another run takes the
store over and finishes commits nothing when it wakes, says so in one line and exits non-zero;
the other run's results stay whole.

Real processes: run A is the ``mkdist`` command, stopped with SIGSTOP by itself as its embedding
stage starts (the one thing injected: where the pause falls), run B the same command, and A is
continued with SIGCONT once B has finished.  A short lease TTL (MKDIST_LEASE_TTL) keeps it to
seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

from mkdist.storage import RunStore
from mkdist.storage._lease import LEASE_FILE, read_lease

from .conftest import write_blobs_npz

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The command, stopping itself (SIGSTOP) when its embedding stage starts.
_PAUSED_AT_EMBEDDING = """
    import os, signal, sys

    import mkdist._run._driver as driver
    from mkdist import cli

    real = driver.run_stage

    def run_stage(name, *args, **kwargs):
        if name == "embedding":
            os.kill(os.getpid(), signal.SIGSTOP)  # a stopped VM, a long GC pause
        return real(name, *args, **kwargs)

    driver.run_stage = run_stage
    sys.argv = ["mkdist", *sys.argv[1:]]
    cli.console_main()
"""


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MKDIST_DASK_ADDRESS")}
    return {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MKDIST_LEASE_TTL": "2", **(extra or {})}


def _wait(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _stopped(proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"run A ended before it paused: {proc.stderr.read()}")
    return psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED


def paused_run_then_takeover(args: list[str], lease_stale, env: dict, between) -> dict:
    """Run A paused at its embedding past the TTL, run B to the end, A continued: what each did,
    and what ``between()`` saw after B finished, before A was continued."""
    a = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_PAUSED_AT_EMBEDDING), *args], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: _stopped(a), "run A to stop itself")
        _wait(lease_stale, "run A's lease to go stale")
        b = subprocess.run([sys.executable, "-m", "mkdist.cli", *args, "--quiet"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        assert b.returncode == 0, b.stderr
        seen = between()
        a.send_signal(signal.SIGCONT)
        a_out, a_err = a.communicate(timeout=300)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    return {"a": a.returncode, "a_err": a_err, "b": b.returncode, "b_err": b.stderr, "b_out": b.stdout,
            "seen": seen}


def stored(store: RunStore) -> dict:
    """What a finished run left: each stage's token (its committed generation), the labels,
    the stages' states, the finished mark."""
    status = store.stage_status(verify="full")
    return {"tokens": {s: store.stage_token(s) for s, state in status.items() if state == "complete"},
            "labels": store.read_stage("labels")["labels"].values, "status": status,
            "finished": store.attrs.get("finished")}


def _check(got: dict, after: dict) -> None:
    assert got["a"] == 1, got
    said = [line for line in got["a_err"].splitlines() if line.startswith("mkdist:")]
    assert len(said) == 1 and said[0].startswith("mkdist: stopped: ") and "committed nothing" in said[0], got["a_err"]
    assert "was taken over" in said[0] and ("by " in said[0] or "lease object is gone" in said[0]), said
    assert [line for line in got["a_err"].splitlines() if "lease" in line] == said  # one line, no log beside it
    assert "Traceback" not in got["a_err"]
    # B's results are whole and its own: every stage the generation B committed, every chunk
    # verified, the labels B wrote, B's finished mark.
    before = got["seen"]
    assert {"landmarks", "model", "embedding", "labels", "metrics"} <= set(before["tokens"])
    assert after["tokens"] == before["tokens"] and after["status"] == before["status"]
    assert not {"damaged", "incomplete"} & set(after["status"].values())
    np.testing.assert_array_equal(after["labels"], before["labels"])
    assert after["finished"] == before["finished"] is not None


def test_a_paused_run_commits_nothing_after_a_takeover_on_a_local_store(tmp_path):
    npz, store_path = tmp_path / "in.npz", tmp_path / "run.zarr"
    write_blobs_npz(npz, 100)
    args = ["run", "--input", str(npz), "--store", str(store_path), "--n-clusters", "3", "--n-landmarks", "60",
            "--random-state", "0"]

    def lease_stale() -> bool:
        import fsspec

        info = read_lease(fsspec.filesystem("file"), str(store_path / LEASE_FILE))
        return info is not None and info.stale()

    got = paused_run_then_takeover(args, lease_stale, _env(), lambda: stored(RunStore.open(str(store_path))))
    _check(got, stored(RunStore.open(str(store_path))))
    assert "generation 1" in got["a_err"]


def _paused(lease) -> None:
    """The holder's heartbeats stop, as when its process is stopped (its thread joins)."""
    lease._stop.set()
    lease._thread.join()


def test_a_stale_holders_heartbeat_and_commit_are_fenced_off_after_a_takeover_on_a_local_disk(tmp_path):
    """The atomic part, in one process: holder A pauses (its heartbeats stop) past its TTL, B takes
    the lease over (generation 2); A's next heartbeat and A's commit, both already past any check,
    write nothing -- B's lease and the stage pointer stay as they were."""
    import fsspec

    from mkdist.errors import LeaseLostError
    from mkdist.storage._lease import StoreLease

    fs, root = fsspec.filesystem("file"), str(tmp_path / "run.zarr")
    a = StoreLease(fs, root, root, local=True, owner="run A", ttl=0.2, heartbeat=0.1).acquire()
    assert a.generation == 1
    pointer = f"{root}/labels.gen-current.json"
    a.fenced_put(pointer, b'{"by": "A"}', create=True)  # A holds it: its commit lands
    _paused(a)
    time.sleep(0.25)  # past A's TTL without a heartbeat
    b = StoreLease(fs, root, root, local=True, owner="run B", ttl=60).acquire()
    try:
        assert b.generation == 2
        b_lease = open(f"{root}/{LEASE_FILE}", "rb").read()
        with pytest.raises(LeaseLostError, match=r"generation 1\) was taken over .*run B.*generation 2"):
            a.fenced_put(pointer, b'{"by": "A, stale"}')
        with pytest.raises(LeaseLostError):
            a._write()  # the heartbeat it would have sent on waking
        assert open(pointer, "rb").read() == b'{"by": "A"}'
        assert open(f"{root}/{LEASE_FILE}", "rb").read() == b_lease
        b.fenced_put(pointer, b'{"by": "B"}')
        assert open(pointer, "rb").read() == b'{"by": "B"}'
    finally:
        b.release()
        a.release()
    # Released: the next lease counts on from B's generation.
    c = StoreLease(fs, root, root, local=True, owner="run C").acquire()
    try:
        assert c.generation == 3
    finally:
        c.release()
