"""How many of this process's CPUs other processes leave free: the cap on the threads of a parallel call.

When another process keeps one of two cores busy, a call on two threads runs three threads on two cores: the
scheduler takes turns, a thread that loses its core in the middle of a kernel stalls the others at the next barrier
for the other process's time slice, and the call ends slower than on one thread (a transformer at batch 1: 0.64x of
its one-thread speed, an MLP at batch 64 0.92x). One thread, meanwhile, has a core of its own. So while another
process keeps CPUs busy, calls use fewer threads, as OpenMP's dynamic mode does from the load average, but from what
the CPUs did in the last few tenths of a second: a daemon thread samples /proc/stat (the busy time of each CPU this
process may run on) and the process's own CPU time (its compile workers' included) every SAMPLE_SECONDS; what the
CPUs were busy with beyond that, averaged over the last samples, is the load of the others. The cap is the idle
cores rounded, changed only when they move more than HYSTERESIS cores away from it, so a load near a half core does
not flip it.

Only short calls are capped: a long one (LONG_CALL_SECONDS) amortizes the stalls and still gains from the share of
the busy core it gets. The monitor starts with the first executable that calls on several threads (`cap`), and only
where /proc/stat exists (Linux); elsewhere, or with BRAZE_ADAPT_THREADS=0, the cap is the CPU count. Executables
read the cap when `version` changes; their configured thread count (Executable.threads) stays what was asked for.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Iterable, Mapping

from braze.codegen.compile_workers import worker_pids

ADAPT_ENV = "BRAZE_ADAPT_THREADS"
STAT_PATH = "/proc/stat"
SAMPLE_SECONDS = 0.1   # /proc/stat counts in 10 ms ticks: a tenth of a second reads a core's load to about 0.1
SMOOTHING = 0.7        # weight of the newest sample in the running average of the others' load
HYSTERESIS = 0.6       # idle cores must be this far from the cap before it changes
# A call estimated to take this long on one thread (runtime/threads.py's rough estimate, 2-3x the time on a Zen 4)
# keeps its threads under load: a stall of a time slice is a small part of it, and what the busy core still gives it
# pays (CNN b64 on two threads with a core busy: 1.16-1.23x one thread; transformer b8 1.00-1.21x).
LONG_CALL_SECONDS = 0.02
BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (guest time is counted in user already)

version = 0  # bumped when the cap changes: executables rebind their calls
_cap: int | None = None
_monitor: LoadMonitor | None = None
_lock = threading.Lock()
_started = False


def busy_seconds(stat_text: str, cpus: Iterable[int], ticks_per_second: float) -> float | None:
    """The busy time since boot, in seconds, of the CPUs `cpus` by /proc/stat's per-CPU lines (None when a CPU's
    line is missing or malformed)."""
    wanted = {f"cpu{c}" for c in cpus}
    total, found = 0, 0
    for line in stat_text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in wanted:
            continue
        try:
            counts = [int(fields[1 + i]) for i in BUSY_FIELDS]
        except (IndexError, ValueError):
            return None
        total += sum(counts)
        found += 1
    return total / ticks_per_second if found == len(wanted) and found else None


def next_cap(cap: int, idle_cores: float, cpus: int) -> int:
    """The thread cap after a sample that found `idle_cores` of `cpus` free (the others' load subtracted): the idle
    cores rounded, at least 1, at most `cpus`, but `cap` unchanged while they stay within HYSTERESIS of it."""
    if abs(idle_cores - cap) <= HYSTERESIS:
        return cap
    return max(1, min(cpus, int(idle_cores + 0.5)))


def process_seconds(pid: int, ticks_per_second: float) -> float | None:
    """The CPU time (user and system) process `pid` has used, by /proc/<pid>/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks_per_second  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


class LoadMonitor:
    """The others' load on this process's CPUs, from successive samples of /proc/stat and the process CPU time.
    `helpers` gives the process ids whose CPU time counts as this process's own (its compile workers)."""

    def __init__(self, cpus: Iterable[int], ticks_per_second: float, path: str = STAT_PATH,
                 helpers: Callable[[], Iterable[int]] = worker_pids) -> None:
        self.cpus, self.ticks, self.path, self.helpers = sorted(cpus), ticks_per_second, path, helpers
        self.others = 0.0
        self._last: tuple[float, float, float] | None = None
        self._helper_seconds: dict[int, float] = {}

    def sample(self, stat_text: str | None = None, own: float | None = None, now: float | None = None) -> bool:
        """Take a sample (or the given one) and fold the others' load since the last into the average; False when
        /proc/stat cannot be read."""
        if stat_text is None:
            try:
                with open(self.path) as f:
                    stat_text = f.read()
            except OSError:
                return False
        busy = busy_seconds(stat_text, self.cpus, self.ticks)
        if busy is None:
            return False
        own = time.process_time() if own is None else own
        now = time.monotonic() if now is None else now
        helped = self._helped()
        if self._last is not None:
            busy0, own0, then = self._last
            if now > then:
                load = max(0.0, (busy - busy0) - (own - own0) - helped) / (now - then)
                self.others = SMOOTHING * min(load, len(self.cpus)) + (1 - SMOOTHING) * self.others
        self._last = (busy, own, now)
        return True

    def restart(self) -> None:
        """Forget the average and the last sample: the next sample only starts a window."""
        self.others, self._last = 0.0, None

    def _helped(self) -> float:
        """The CPU time the helper processes used since the last sample (those alive at both)."""
        seconds = {}
        for pid in self.helpers():
            value = process_seconds(pid, self.ticks)
            if value is not None:
                seconds[pid] = value
        spent = sum(value - self._helper_seconds[pid] for pid, value in seconds.items() if pid in self._helper_seconds)
        self._helper_seconds = seconds
        return max(spent, 0.0)


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _watch(monitor: LoadMonitor) -> None:
    """The daemon thread: sample, move the cap, bump `version` when it moves (and lift it for good when
    /proc/stat can no longer be read, rather than keep a stale one)."""
    global _cap, version
    cpus = len(monitor.cpus)
    while True:
        time.sleep(SAMPLE_SECONDS)
        with _lock:
            if not monitor.sample():
                _cap, version = None, version + 1
                return
            moved = next_cap(_cap if _cap is not None else cpus, cpus - monitor.others, cpus)
            if moved != _cap:
                _cap, version = moved, version + 1


def forget_own_work() -> None:
    """Start the measure afresh, the cap at the CPU count: called when this process has compiled, whose compile
    workers and linker ran as child processes that /proc/stat counts as others' load (after a cold compile the cap
    read 1 for the next few tenths of a second on a free machine, and short calls ran on one thread). A load that
    is really others' lowers the cap again within two samples."""
    global _cap, version
    with _lock:
        if _monitor is None:
            return
        _monitor.restart()
        if _cap != len(_monitor.cpus):
            _cap, version = len(_monitor.cpus), version + 1


def cap(environ: Mapping[str, str] = os.environ) -> int | None:
    """The most threads a parallel call should use now (None: no cap known, use the configured count). The first
    call starts the monitor."""
    global _started
    if not _started:
        with _lock:
            if not _started:
                _started = True
                _start(environ)
    return _cap


def _start(environ: Mapping[str, str]) -> None:
    """The monitor and its thread, unless turned off or without /proc/stat."""
    global _monitor, _cap
    if environ.get(ADAPT_ENV, "").strip() == "0" or not os.path.exists(STAT_PATH):
        return
    try:
        ticks = float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return
    monitor = LoadMonitor(_cpus(), ticks)
    if monitor.sample():
        _monitor, _cap = monitor, len(monitor.cpus)  # so that the first sample on a free machine moves nothing
        threading.Thread(target=_watch, args=(monitor,), name="braze-cpu-load", daemon=True).start()


def _forget() -> None:
    """In a forked child: the parent's monitor thread is not there; the child starts its own when it needs one."""
    global _lock, _started, _cap, _monitor, version
    _lock, _started, _cap, _monitor, version = threading.Lock(), False, None, None, version + 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


__all__ = ["ADAPT_ENV", "HYSTERESIS", "LONG_CALL_SECONDS", "LoadMonitor", "busy_seconds", "cap", "forget_own_work",
           "next_cap", "version"]
