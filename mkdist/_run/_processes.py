"""The processes of a command: stopping its children at once, Ctrl-C, a temporary Prefect server.

A command (``mkdist run``, ``assign``, ``demo``) starts processes of its own: a LocalCluster's
workers, the report's drawing process, a temporary Prefect server
(:class:`temporary_prefect_server`).  When it is interrupted it must end them all within
seconds and leave no zombie behind (:func:`stop_now`).  The CLI decides what is printed and with which exit code;
this module only handles the processes.  Standard library only at import: the CLI refuses a
bad argument before anything heavy loads.

Stopping at once (:func:`stop_now`: every descendant killed, then ``os._exit``) is for the
``mkdist`` console script alone, whose process and descendants are all the command's: called in
a host process (``mkdist.cli.main()`` in a notebook, a test runner, an orchestrator), the CLI
never uses it, and raises instead (see ``mkdist.cli``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["descendants", "handle_interrupts", "kill_descendants", "prefect_api_configured", "stop_now",
           "temporary_prefect_server"]


def descendants() -> list[int]:
    """Process ids of this process's descendants, parents before their children.

    Read with psutil, which knows each platform's process table (this module walked Linux's
    ``/proc`` by hand before, and found none elsewhere).

    Returns
    -------
    list of int
    """
    import psutil

    out, todo = [], [psutil.Process()]
    while todo:
        try:
            children = todo.pop(0).children()
        except psutil.Error:  # ended meanwhile: its children, if any, were adopted elsewhere
            continue
        out += [c.pid for c in children]
        todo += children
    return out


def _is_resource_tracker(pid: int) -> bool:
    import psutil

    try:
        return any("resource_tracker" in part for part in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def kill_descendants(*, reap_s: float = 1.0) -> list[int]:
    """Kill every descendant of this process (SIGKILL) and reap this process's own children.

    Deepest first: a parent killed first leaves its children to clean up noisily.  Resource
    trackers (multiprocessing's, loky's) are left to end by themselves once the processes they
    serve are gone, unlinking what those left: killed, they were relaunched by a dying worker
    ("process died unexpectedly, relaunching") and the new one printed a KeyError traceback
    for every semaphore it had never seen.

    Parameters
    ----------
    reap_s : float
        Seconds to wait, in all, for the killed children to be reaped: killed but unreaped they
        stay zombies until an init reaps them, and some container inits never do.

    Returns
    -------
    list of int
        The process ids killed.
    """
    killed = [pid for pid in descendants()[::-1] if not _is_resource_tracker(pid)]
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + reap_s
    for pid in killed:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:  # not our child (a grandchild), or already reaped
                break
            time.sleep(0.01)
    return killed


def stop_now(message: str, exit_code: int) -> None:
    """End this process at once: its descendants first (:func:`kill_descendants`), then itself.

    Parameters
    ----------
    message : str
        Written to stderr just before exiting.
    exit_code : int
        The process's exit status (``os._exit``: no cleanup handler runs, none is waited for).
    """
    kill_descendants()
    sys.stderr.write(message)
    sys.stderr.flush()
    os._exit(exit_code)


def handle_interrupts(stop: Callable[[], None], grace_s: float) -> Callable[[], None]:
    """Install this process's Ctrl-C handling (from the main thread only; elsewhere nothing).

    The first Ctrl-C raises KeyboardInterrupt, so that the run stops in order (its lease
    released, its cluster closed), and calls ``stop`` after ``grace_s`` seconds if it is still
    going; a second Ctrl-C calls ``stop`` at once.  Also starts multiprocessing's resource
    tracker quietly (:func:`_start_quiet_resource_tracker`) before any worker process shares it.

    Only for a process that is the command (the ``mkdist`` console script): ``stop`` ends it.
    Called in a host process (a notebook, a test runner), the CLI installs nothing.

    Parameters
    ----------
    stop : callable
        Ends the process (e.g. :func:`stop_now` with the command's message and exit code).
    grace_s : float
        Seconds an interrupted command may spend stopping in order.

    Returns
    -------
    callable
        Puts back the SIGINT handler this replaced (a timer already started still runs).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    seen = []

    def on_interrupt(signum, frame) -> None:
        if seen:
            stop()
        seen.append(signum)
        timer = threading.Timer(grace_s, stop)
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    _start_quiet_resource_tracker()

    def restore() -> None:
        if signal.getsignal(signal.SIGINT) is on_interrupt:
            signal.signal(signal.SIGINT, previous)

    return restore


def _start_quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (shared by the cluster's worker processes)
    with its stderr on /dev/null.

    After an interrupt cuts the workers short (:func:`stop_now`), the tracker unlinks the
    semaphores they held and warns about each "leaked" one on its stderr: the cleanup is
    wanted, the warning after "interrupted; re-run the same command to resume" is not.
    """
    from multiprocessing import resource_tracker

    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def prefect_api_configured() -> bool:
    """Whether a Prefect API is configured (``PREFECT_API_URL`` or the active profile's).

    Read from the environment and ``$PREFECT_HOME/profiles.toml`` without importing Prefect,
    which takes about 2 s.

    Returns
    -------
    bool
    """
    if os.environ.get("PREFECT_API_URL"):
        return True
    profiles = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser() / "profiles.toml"
    if not profiles.is_file():
        return False
    import tomllib

    try:
        data = tomllib.loads(profiles.read_text())
    except (OSError, ValueError):
        return False
    active = os.environ.get("PREFECT_PROFILE") or data.get("active") or "ephemeral"
    return bool((data.get("profiles") or {}).get(active, {}).get("PREFECT_API_URL"))


class temporary_prefect_server:
    """With no Prefect API configured: a temporary server for this command, stopped at the end.

    With an API configured it does nothing.  Waits up to
    ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (default 120) for the server, with
    SIGINT ignored in this process meanwhile (a Ctrl-C then would leave a half-started server).
    The server shares this process's group and installs its own SIGINT handler (uvicorn's), so
    a terminal's Ctrl-C reaches it too: it stops accepting connections while the command stops,
    and :func:`stop_now` ends it with the command's other processes.
    """

    def __enter__(self):
        self._server = None
        if prefect_api_configured():
            return self
        from prefect.server.api.server import SubprocessASGIServer
        from prefect.settings import PREFECT_API_URL, temporary_settings

        server = SubprocessASGIServer()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is \
            threading.main_thread() else None
        try:
            server.start(timeout=int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")))
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        self._server = server
        self._settings = temporary_settings({PREFECT_API_URL: server.api_url})
        self._settings.__enter__()
        return self

    def __exit__(self, *exc):
        if self._server is not None:
            # The flow's last log lines still queued for the API go out now: sent after the
            # server stopped, they end the command with "--- Error logging to API ---".
            from prefect.logging.handlers import APILogWorker

            try:
                APILogWorker.drain_all(timeout=5)
            except Exception as exc:  # noqa: BLE001 - a log line lost is no reason to fail a command that succeeded
                logging.getLogger("mkdist").warning("Prefect log lines not sent before its server stopped: %s: %s",
                                                    type(exc).__name__, exc)
            self._settings.__exit__(*exc)
            self._server.stop()
