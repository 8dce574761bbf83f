"""A command's processes (mkdist._run._processes): stopped at once and reaped, Ctrl-C, the Prefect server.

Each check that kills or signals runs in a fresh interpreter: in this one it would reach the
session's Dask workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mkdist._run._processes import prefect_api_configured


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


def _state(pid: int) -> str:
    """A process's state letter (R, S, Z, ...), or "gone"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="descendants are read from /proc")
def test_descendants_are_killed_deepest_first_and_children_reaped_but_not_the_resource_tracker():
    r = _python("""
        import json, subprocess, sys
        from multiprocessing import resource_tracker
        from mkdist._run._processes import descendants, kill_descendants

        resource_tracker.ensure_running()
        tracker = resource_tracker._resource_tracker._pid
        child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                                  "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                                  "print(p.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
        grandchild = int(child.stdout.readline())
        found = descendants()
        killed = kill_descendants()
        print(json.dumps({"tracker": tracker, "child": child.pid, "grandchild": grandchild, "found": found,
                          "killed": killed}))
    """)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    child, grandchild, tracker = got["child"], got["grandchild"], got["tracker"]
    assert set(got["found"]) == {tracker, child, grandchild}
    assert got["found"].index(child) < got["found"].index(grandchild)  # parents first
    assert got["killed"] == [grandchild, child]  # deepest first, the tracker left to end by itself
    assert _state(child) == "gone"  # killed and reaped by its parent: no zombie
    assert _state(grandchild) in ("gone", "Z", "X")  # killed; reaped by whoever adopted it


def test_stop_now_ends_the_children_then_the_process_with_the_message_and_code():
    r = _python("""
        import subprocess, sys
        from mkdist._run._processes import stop_now

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        stop_now("stopped on purpose\\n", 130)
        print("not reached")
    """)
    assert r.returncode == 130
    assert r.stderr == "stopped on purpose\n"
    assert "not reached" not in r.stdout
    assert _state(int(r.stdout.split()[0])) in ("gone", "Z", "X")


@pytest.mark.parametrize("interrupts, expect", [(1, "stopped after the grace period"), (2, "stopped at once")])
def test_ctrl_c_raises_first_and_stops_after_the_grace_period_or_at_the_second(interrupts, expect):
    r = _python(f"""
        import os, signal, time
        from mkdist._run._processes import handle_interrupts

        t0 = time.monotonic()
        def stop():
            took = time.monotonic() - t0
            print("stopped at once" if took < 0.5 else "stopped after the grace period", flush=True)
            os._exit(7)

        handle_interrupts(stop, grace_s=1.0)
        for _ in range({interrupts}):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
            except KeyboardInterrupt:
                print("KeyboardInterrupt", flush=True)
        time.sleep(5)
        print("not stopped")
    """)
    assert r.returncode == 7, r.stderr
    assert r.stdout.split("\n")[:2] == ["KeyboardInterrupt", expect]


def test_a_prefect_api_is_configured_by_the_environment_or_the_active_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_api_configured()
    monkeypatch.delenv("PREFECT_API_URL")
    assert not prefect_api_configured()  # no profiles file
    (tmp_path / "profiles.toml").write_text('active = "team"\n[profiles.team]\n'
                                            'PREFECT_API_URL = "http://prefect:4200/api"\n[profiles.local]\n')
    assert prefect_api_configured()
    monkeypatch.setenv("PREFECT_PROFILE", "local")
    assert not prefect_api_configured()
    (tmp_path / "profiles.toml").write_text("not toml [")
    assert not prefect_api_configured()


@pytest.mark.slow
def test_the_temporary_prefect_server_answers_and_is_stopped_at_the_end(tmp_path):
    """What ``mkdist run --prefect`` starts when no API is configured (20-40 s to start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, urllib.request
        from mkdist._run._processes import temporary_prefect_server

        with temporary_prefect_server() as server:
            from prefect.settings import PREFECT_API_URL

            url = PREFECT_API_URL.value()
            pid = server._server.server_process.pid
            health = urllib.request.urlopen(url + "/health", timeout=10).read().decode()
        print(json.dumps({"url": url, "pid": pid, "health": health}))
    """)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["url"].startswith("http://127.0.0.1:") and got["health"] == "true"
    assert _state(got["pid"]) in ("gone", "Z", "X")


_IN_A_HOST = """
    import json, os, signal, subprocess, sys, time

    import psutil
    from click.testing import CliRunner

    import mkdist._run._driver as driver
    from mkdist import cli

    npz, store, workers, inject = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

    def host_handler(signum, frame):  # the host's own: a notebook's, an orchestrator's
        raise KeyboardInterrupt("host")

    signal.signal(signal.SIGINT, host_handler)
    # A process the host started, not mkdist: it must outlive whatever mkdist does.
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    real = driver.run_stage

    def run_stage(name, *args, **kwargs):  # Ctrl-C (or a failure) as the embedding starts
        if name == "embedding" and inject == "ctrl-c":
            signal.raise_signal(signal.SIGINT)
        if name == "embedding" and inject == "error":
            raise RuntimeError("injected failure")
        return real(name, *args, **kwargs)

    driver.run_stage = run_stage
    args = ["run", "--input", npz, "--store", store, "--n-clusters", "3", "--n-landmarks", "60",
            "--random-state", "0", "--quiet", "--no-prefect", *(["--n-workers", workers] if workers != "0" else [])]
    r = CliRunner().invoke(cli.main, args)
    def mkdists(p):  # a process mkdist started, still running
        try:
            return (p.pid != sentinel.pid and p.status() != psutil.STATUS_ZOMBIE
                    and "resource_tracker" not in " ".join(p.cmdline()))
        except psutil.Error:
            return False

    deadline = time.monotonic() + 20  # the cluster mkdist started closes in order
    while time.monotonic() < deadline:
        left = [p for p in psutil.Process().children(recursive=True) if mkdists(p)]
        if not left:
            break
        time.sleep(0.2)
    driver.run_stage = real
    again = CliRunner().invoke(cli.main, args)
    print(json.dumps({"exit": r.exit_code, "output": r.output, "handler_restored":
                      signal.getsignal(signal.SIGINT) is host_handler, "sentinel_alive": sentinel.poll() is None,
                      "left": [p.pid for p in left], "again": again.exit_code, "again_output": again.output}))
    sentinel.kill()
"""


@pytest.mark.parametrize("workers, inject, code, said", [
    ("0", "ctrl-c", 130, "mkdist: interrupted; re-run the same command to resume."),
    ("1", "ctrl-c", 130, "mkdist: interrupted; re-run the same command to resume."),
    ("0", "error", 1, "mkdist: failed: RuntimeError: injected failure"),
], ids=["ctrl-c-in-process", "ctrl-c-local-cluster", "error-in-process"])
def test_main_called_in_a_host_process_returns_and_leaves_the_host_and_its_processes(tmp_path, workers, inject,
                                                                                    code, said):
    """``mkdist.cli.main()`` in a host process (CliRunner here; a notebook, an orchestrator):
    Ctrl-C or a failure as the embedding starts ends the command with its exit code and one line,
    never the host: its SIGINT handler is its own again, a process it started still runs, the
    processes mkdist started (its LocalCluster's workers) are stopped, and the same command then
    resumes to the end."""
    from tests.conftest import write_blobs_npz

    npz = tmp_path / "in.npz"
    write_blobs_npz(npz, 100)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MKDIST_DASK_ADDRESS")}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_IN_A_HOST), str(npz), str(tmp_path / "run.zarr"),
                        workers, inject], capture_output=True, text=True, timeout=300, env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["exit"] == code, got
    assert said in got["output"], got
    assert got["handler_restored"] and got["sentinel_alive"] and got["left"] == [], got
    assert got["again"] == 0, got["again_output"]
