"""Preloaded by the worker processes of a LocalCluster that mkdist starts: they ignore SIGINT.

A Ctrl-C in a terminal reaches every process of the foreground process group; the run alone
must see it (and stop its cluster itself), or the workers die mid-task and their nannies
restart them.  This is a module, loaded through ``distributed.worker.preload``, rather than
SIG_IGN set in the parent while the workers are spawned: that ignored -- and lost -- a Ctrl-C
pressed while the cluster was starting.
"""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
