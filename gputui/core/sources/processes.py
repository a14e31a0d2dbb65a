"""The host process source: who owns each GPU process, and what it is doing.

NVML gives PIDs; this module turns them into :class:`ProcessFacts` (user,
command line, CPU %, RSS, start time, parent, status, cgroup, orphaned).

Cost is the point of the design: a poll at 16 GPUs x 1000 processes must stay
under 10 ms, so on Linux it reads ``/proc`` directly instead of going
through psutil objects:

- every poll, ``/proc/PID/stat`` gives state, parent, process group, session,
  CPU ticks and start time, and ``/proc/PID/statm`` the RSS (the same counters
  psutil uses) — or, for a face that shows none of these per second (the
  exporter, :meth:`HostProcessSource.refresh_every`), every few seconds, while a
  pidfd per process tells on every poll whether it is still the same process;
- except for a process that has not run since its last stat line: generating that
  line is most of a poll's kernel time, so the process's CPU clock (all its threads,
  in ns: ``procfs.cpu_ns``, a fifth of the cost) is read first, and while it stands
  still and its parent lives (a pidfd per parent, ``procfs.ParentWatch``) the line
  cannot have changed — CPU ticks, state, name and process group change only by
  running, the parent only by the parent's exit. Its RSS can (the kernel reclaims
  pages of a sleeping process): it is re-read from statm every ``RSS_REFRESH``
  seconds, as for every process whose stat figure stands still (stat and statm are
  read with pread on descriptors pinned per process identity);
- once per process identity ``(pid, start time)`` — re-read only if the
  process exec()s something else (its ``comm`` changes) — ``/proc/PID/status``
  (real uid, innermost namespace PID), ``/proc/PID/cmdline``, the executable
  (``/proc/PID/exe``'s base name, or ``comm`` when it cannot be read: never argv[0],
  which the process chooses) and ``/proc/PID/cgroup``; user names are cached per uid.

``create_time`` is computed exactly as psutil computes it (start ticks /
CLK_TCK + boot time), with the boot time read once per source so that a
process keeps one identity while gputui runs even if the wall clock is stepped.
psutil is used only where /proc is not available.

A PID that cannot be read is kept, never dropped, with ``visible=False`` and a
reason:

- ``"vanished"``: it exited between NVML's listing and this read;
- ``"other-namespace"``: this /proc shows another PID namespace than the host's
  (gputui runs in a container without ``--pid=host``), so NVML's host PIDs do
  not name processes here. The namespace of /proc is that of its PID 1
  (``/proc/1/ns/pid``, or our own when PID 1 cannot be inspected); the host's
  initial namespace has the fixed inode 0xEFFFFFFC (PROC_PID_INIT_INO). In such
  a namespace a PID that *does* exist here could be a different process with
  the same number; where this container has NVIDIA device files, a PID counts
  as the GPU process only if it has ``/dev/nvidia*`` open;
- ``"hidden"``: /proc is mounted with ``hidepid`` and the process belongs to
  another user.

Orphans. The kernel does not record a process's original parent, so
"orphaned" is inferred, and inferred conservatively. A process is orphaned when
all of these hold:

1. its parent is a reaper — PID 1, the init of any PID namespace (a container's
   PID 1, seen from the host), or a known child-subreaper/init program
   (``systemd --user``, tini, dumb-init, ...);
2. it is not itself a namespace init (a container's main process is nobody's
   orphan) and not a session leader (services, ``setsid`` jobs and container
   processes started by runc are session leaders, started detached on purpose);
3. the session or process group it belonged to has lost its leader — the shell
   or launcher that started it is gone.

So a container's init (parent: containerd-shim or conmon, a subreaper that is
*not* a reaper in this sense) is not orphaned; a process exec'd into a container
is not either; ``nohup train.py &`` after its shell exited is; a DataLoader worker
whose training process died is.

Over 600 lines on purpose: one cache of per-identity state (pinned stat descriptors, pidfds,
parsed lines, CPU baselines) that every step of a read touches, kept in one class so that a
descriptor can never outlive the identity it belongs to.
"""

from __future__ import annotations

import os
import pwd
import select
import time
from collections.abc import Callable, Iterable
from typing import Any

from gputui.core.model import ProcessFacts
from gputui.core.sources.procfs import (
    _CPUCLOCK_SCHED,
    INIT_PID_NS_INODE,
    ParentWatch,
    _clock_ns,
    boot_time,
    cpu_ns,
    exe_base_name,
    fd_budget,
    hidepid,
    holds_gpu,
    listdir,
    ns_inode,
    proc_shows_host_pids,
    psutil_exe,
    read_all,
    read_small,
    unwatch_pidfd,
)

__all__ = ["INIT_PID_NS_INODE", "HostProcessSource", "exe_base_name", "ns_inode", "proc_shows_host_pids"]

#: Programs that adopt orphans as init or child-subreaper (comm names, 15 chars max).
SUBREAPERS = frozenset({"systemd", "init", "tini", "docker-init", "dumb-init", "catatonit", "s6-svscan"})

#: How often (s) an unchanged process's orphan verdict is re-checked (a session leader can exit).
ORPHAN_RECHECK = 5.0
#: Below this many seconds between two reads, CPU % keeps its last value (tick resolution).
MIN_CPU_INTERVAL = 0.1
#: statm (exact RSS) is re-read at least this often (s) even when stat's approximate RSS did not move.
RSS_REFRESH = 5.0
#: Cache entries of PIDs not asked about for this long are dropped.
CACHE_TTL = 60.0

#: ``HostProcessSource._fact``'s "read the CPU clock yourself"
_UNREAD = object()

_STATUS = {
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
    "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked",
}


class _Static:
    """Facts that do not change during one process identity (pid, start time), plus its running state.

    A plain slotted class rather than a dataclass: one is made per process, and it is cheap to import.
    """

    # what the steady state (HostProcessSource.facts) reads and writes first: one or two cache lines of each
    __slots__ = ("cpu_ns", "stat_fd", "last_raw", "stat_raw", "orphan_ppid", "fact", "orphan_at", "rss_at", "quiet",
                 "cpu_zero", "cpu_at", "seen", "stat_at",
                 "starttime", "comm", "create_time", "uid", "user", "command", "exe", "cgroup", "ns_init", "gpu_fd",
                 "orphaned", "cpu_ticks", "cpu_percent", "rss", "rss_approx", "last", "stat_fields", "pidfd",
                 "exited", "statm_fd")

    def __init__(self, starttime: int, comm: bytes, create_time: float | None, uid: int | None, user: str | None,
                 command: str | None, exe: str, cgroup: str | None, ns_init: bool) -> None:
        self.starttime = starttime
        self.comm = comm
        self.create_time = create_time
        self.uid = uid
        self.user = user
        self.command = command
        self.exe = exe
        self.cgroup = cgroup
        self.ns_init = ns_init
        #: in a foreign PID namespace: does it hold /dev/nvidia* open (None: not checked / unknown)
        self.gpu_fd: bool | None = None
        self.orphan_ppid = -1
        self.orphaned = False
        self.orphan_at = 0.0
        self.cpu_ticks: int | None = None
        self.cpu_at = 0.0
        self.cpu_percent: float | None = None
        self.seen = 0.0
        self.rss: int | None = None
        self.rss_approx = -1
        #: an open descriptor on /proc/PID/stat, re-read with pread: it stays bound to this very
        #: process (a reused PID reads as ESRCH through it) and saves an open/close per poll
        self.stat_fd: int | None = None
        #: an open descriptor on /proc/PID/statm, pinned like ``stat_fd`` (see HostProcessSource._rss)
        self.statm_fd: int | None = None
        self.rss_at = 0.0
        self.last: tuple[tuple[object, ...], ProcessFacts] | None = None
        #: ``last``'s facts; whether ``cpu_ticks == stat_fields[5]``, and ``cpu_percent == 0.0``: the steady
        #: state's tests, kept by ``HostProcessSource._fact`` so that it reads neither tuples nor numbers
        self.fact: ProcessFacts | None = None
        self.quiet = self.cpu_zero = False
        #: the /proc/PID/stat line ``last`` was built from (see HostProcessSource._fact's steady path)
        self.last_raw = b""
        #: the process's CPU clock (ns) read just before ``last_raw`` (see HostProcessSource._fact)
        self.cpu_ns: int | None = None
        #: the last /proc/PID/stat line read and its parsed fields: a sleeping process's line does not
        #: change between polls, so it is parsed once
        self.stat_raw = b""
        self.stat_fields: tuple[bytes, str, int, int, int, int, int, int] | None = None
        #: when /proc/PID/stat was last read (see HostProcessSource.refresh_every)
        self.stat_at = float("-inf")
        #: a pidfd of this very process while its stat figures may be reused; it polls readable
        #: once the process has exited
        self.pidfd: int | None = None
        #: its pidfd said it exited (a zombie, or gone): read on every poll from then on
        self.exited = False


class HostProcessSource:
    """A :class:`~gputui.core.sources.ProcessSource` over /proc (psutil where there is no /proc)."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._clock = clock
        self._static: dict[int, _Static] = {}
        #: descriptors pinned on /proc/PID/stat, and how many we allow ourselves
        self._pinned = 0
        self._fd_budget = fd_budget()
        self._users: dict[int, str] = {}
        self._ppids: dict[int, int] = {}  # parent PID -> the one int object its children's orphan_ppid hold
        self._last_purge = 0.0
        #: how long a process's stat figures are reused (0: read every poll; see refresh_every)
        self._refresh = 0.0
        #: a select.poll over the pidfds of the processes whose figures are reused, and pidfd -> PID
        self._watch: Any = None  # select.poll (its type is not public)
        self._watched: dict[int, int] = {}
        self._linux = os.path.isfile(f"{proc}/self/stat")
        self._ticks = os.sysconf("SC_CLK_TCK") if self._linux else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if self._linux else 4096
        self._btime = boot_time(proc) if self._linux else None
        self.host_pids = proc_shows_host_pids(proc) if self._linux else True
        self._hidden = hidepid(proc) if self._linux else False
        #: only where this (foreign) namespace can see NVIDIA device files does the fd check mean anything
        self._check_fds = (not self.host_pids) and any(
            n.startswith("nvidia") for n in listdir("/dev"))
        #: no per-process check besides /proc/PID/stat decides visibility (see _fact's steady path)
        self._steady_ok = not (not self.host_pids and self._check_fds)
        #: pidfds of the GPU processes' parents: while a process's CPU clock stands still and its parent
        #: lives, its stat line cannot have changed (see _fact); only the real /proc's PIDs are the kernel's
        self._parents = ParentWatch()
        self._parents.usable = self._parents.usable and self._linux and self.host_pids and proc == "/proc"
        #: parents that cannot exit while gputui reads: init, none (0: outside this namespace), gputui itself
        self._immortal = frozenset({0, 1, os.getpid()})

    # -- the protocol -----------------------------------------------------------------

    def refresh_every(self, seconds: float) -> bool:
        """Reuse each process's /proc/PID/stat figures (CPU %, state, parent, RSS) for up to ``seconds``.

        Identity is still checked on every poll, with one ``poll()`` over a pidfd per process: a
        process that exits (a zombie, or gone, its PID free for reuse) is read again in that very
        poll, and on every poll after. What waits for the next read is only what a living process
        changes: CPU % (then the mean over ``seconds``), state (D, T), parent, RSS (then re-read from
        statm only when stat's approximate figure moves) and, after an exec(), its command line. For a
        face that shows none of these per second (the exporter).
        Returns False where pidfds are not available (Linux < 5.3): then every poll reads every process.
        """
        for st in self._static.values():
            self._unwatch(st)
        self._refresh = 0.0
        if seconds <= 0:
            return True
        # pidfds name the kernel's processes: only the real /proc's figures can be vouched for by them
        if not (self._linux and self.host_pids and self._proc == "/proc" and hasattr(os, "pidfd_open")):
            return False
        try:
            fd = os.pidfd_open(os.getpid())
        except OSError:
            return False
        os.close(fd)
        self._watch = select.poll()
        self._refresh = seconds
        return True

    @property
    def refresh(self) -> float:
        """Seconds a living process's stat figures are reused (0: read on every poll)."""
        return self._refresh

    def facts(self, pids: Iterable[int]) -> dict[int, ProcessFacts]:
        """Facts for every PID asked for; a PID that cannot be read comes back with visible=False."""
        if not self._linux:
            return self._facts_psutil(pids)
        now = self._clock()
        if self._watched:
            for fd, _ in self._watch.poll(0):  # the processes that exited since the last poll
                st = self._static.get(self._watched.get(fd, -1))
                if st is not None and st.pidfd == fd:
                    self._unwatch(st)
                    st.exited = True
        for _ in self._parents.exited():  # their children were re-parented: they are read in full below
            self._pinned -= 1
        out: dict[int, ProcessFacts] = {}
        parents: dict[int, bool] = {}
        static_get = self._static.get
        # The steady state of _fact (an idle process: CPU clock unchanged, parent alive, nothing due),
        # inlined here: it is most processes on most polls, and each function call it saves is a
        # tenth of what the process costs. Every other case goes through _fact with the clock read.
        clock_ns = _clock_ns
        clocks = self._parents.usable and not self._refresh and clock_ns is not None
        steady_ok = self._steady_ok
        watched_parents, immortal = self._parents.fds, self._immortal
        for pid in pids:
            pid = int(pid)
            clock: int | None = None
            if clocks and clock_ns is not None:
                try:
                    clock = clock_ns(((~pid) << 3) | _CPUCLOCK_SCHED)  # procfs.cpu_ns, without its call
                except OSError:
                    clock = None
                st = static_get(pid)
                if st is not None and clock is not None and clock == st.cpu_ns and st.stat_fd is not None \
                        and (st.last_raw is st.stat_raw or st.last_raw == st.stat_raw) \
                        and (st.orphan_ppid in watched_parents or st.orphan_ppid in immortal) \
                        and steady_ok and st.fact is not None and now - st.orphan_at < ORPHAN_RECHECK \
                        and now - st.rss_at < RSS_REFRESH and st.quiet \
                        and (st.cpu_zero or now - st.cpu_at < MIN_CPU_INTERVAL):
                    # _steady_due said nothing is due: _steady, inlined
                    if now - st.cpu_at >= MIN_CPU_INTERVAL:
                        st.cpu_at = now  # no tick since the baseline: 0 % again, the baseline moves on
                    st.seen = st.stat_at = now
                    out[pid] = st.fact
                    continue
            out[pid] = self._fact(pid, now, parents, clock if clocks else _UNREAD)
        if now - self._last_purge > CACHE_TTL / 4:
            self._purge(now)
        return out

    # -- Linux --------------------------------------------------------------------------

    def _fact(self, pid: int, now: float, parents: dict[int, bool], read_clock: int | None | object = _UNREAD
              ) -> ProcessFacts:
        """One process's facts, read in the order the hot path needs (pinned stat fd, then /proc files,
        then the cached static facts). Long on purpose: it runs for every GPU process on every poll and
        is measured by benchmarks/; split into calls it would cost a function call per field.
        ``read_clock``: the process's CPU clock as the caller just read it (``facts`` does, for its
        inlined steady state), or ``_UNREAD``."""
        pinned = self._static.get(pid)
        if pinned is not None and pinned.pidfd is not None and now - pinned.stat_at < self._refresh \
                and pinned.last is not None:
            pinned.seen = now  # alive, and still this process (its pidfd has not polled readable)
            return pinned.last[1]
        raw = None
        # Read before the stat line, so that a process running in between shows as changed next time.
        if read_clock is _UNREAD:
            clock = cpu_ns(pid) if self._parents.usable and not self._refresh else None
        else:
            clock = read_clock  # type: ignore[assignment]  # an int or None, read by facts()
        if pinned is not None and pinned.stat_fd is not None:
            kept = pinned
            # Steady state: (1) the process has not run since the stat line its facts were built from
            # (its CPU clock, all threads in ns, stands still: its CPU ticks, state, name and process group
            # change only by running) and its parent lives (a parent's exit re-parents it without its
            # running); or (2) the very same stat line again. With nothing due (_steady_due), what the full
            # path below would compute is the last facts: handed back without parsing a line, in (1)
            # without the kernel generating one. In (1) with something due (an orphan re-check, statm),
            # the full path runs on the last line, which is this moment's.
            if clock is not None and clock == kept.cpu_ns and kept.last_raw == kept.stat_raw \
                    and (kept.orphan_ppid in self._parents.fds or kept.orphan_ppid in self._immortal):
                if not self._steady_due(kept, now):
                    return self._steady(pid, kept, now)
                raw = kept.stat_raw
            else:
                try:
                    raw = os.pread(kept.stat_fd, 4096, 0)  # type: ignore[arg-type]  # checked above
                except OSError:  # that process is gone; the PID may already be someone else's
                    self._drop(pid)
                else:
                    if raw == kept.last_raw and not self._steady_due(kept, now):
                        kept.cpu_ns = clock
                        return self._steady(pid, kept, now)
        base = f"{self._proc}/{pid}"
        if raw is None:
            try:
                fd = os.open(f"{base}/stat", os.O_RDONLY)
            except OSError:
                return self._invisible(pid)
            try:
                raw = os.read(fd, 4096)
            except OSError:
                os.close(fd)
                return self._invisible(pid)
            if self._pinned < self._fd_budget:
                self._pinned += 1
            else:
                os.close(fd)
                fd = -1
        else:
            fd = -1
        known = self._static.get(pid)
        if known is not None and known.stat_fields is not None and known.stat_raw == raw:
            comm, state, ppid, pgrp, session, ticks, starttime, approx_rss = known.stat_fields
        else:
            try:
                lpar = raw.index(b"(")
                rpar = raw.rindex(b")")
                comm = raw[lpar + 1: rpar]
                f = raw[rpar + 2:].split(None, 22)  # up to rss (field 24); the rest is not read
                state = f[0].decode()
                ppid, pgrp, session = int(f[1]), int(f[2]), int(f[3])
                ticks = int(f[11]) + int(f[12])
                starttime = int(f[19])
                approx_rss = int(f[21])
            except (ValueError, IndexError):
                return self._invisible(pid)

        st = known
        if st is None or st.starttime != starttime or st.comm != comm:
            new = self._read_static(pid, base, starttime, comm, st)
            if st is not None and new is not st:
                self._drop(pid)
            if new is None:
                if fd >= 0:
                    os.close(fd)
                    self._pinned -= 1
                return self._invisible(pid)
            st = new
            self._static[pid] = st
        if st.stat_raw != raw:
            st.stat_raw = raw
            st.stat_fields = (comm, state, ppid, pgrp, session, ticks, starttime, approx_rss)
        if fd >= 0:
            if st.stat_fd is None:
                st.stat_fd = fd
            else:
                os.close(fd)
                self._pinned -= 1
        st.seen = st.stat_at = now
        if self._refresh and st.pidfd is None and not st.exited and st.stat_fd is not None:
            self._watch_pid(pid, st)

        # RSS from statm, not stat: since Linux 6.2 stat's rss is a per-CPU approximation (off by up
        # to a batch per CPU), statm's is the exact figure psutil, top and ps show. statm is re-read
        # only when stat's figure moved or RSS_REFRESH passed: an unchanged process costs one file.
        # With figures reused (refresh_every: a face that shows no RSS), only when stat's figure moved.
        if st.rss is None or approx_rss != st.rss_approx or (
                not self._refresh and now - st.rss_at >= RSS_REFRESH):
            try:
                st.rss = self._rss(base, st)
            except (OSError, ValueError, IndexError):
                st.rss = approx_rss * self._page
            st.rss_approx, st.rss_at = approx_rss, now
        rss = st.rss

        if not self.host_pids and self._check_fds:
            if st.gpu_fd is None:
                st.gpu_fd = holds_gpu(base)
            if st.gpu_fd is False:
                # Same number, different process: NVML's PID lives in the host's namespace.
                return ProcessFacts(pid=pid, visible=False, invisible_reason="other-namespace")

        # CPU %: ticks used since the previous read of this identity.
        if st.cpu_ticks is not None:
            dt = now - st.cpu_at
            if dt >= MIN_CPU_INTERVAL:
                st.cpu_percent = round(100.0 * (ticks - st.cpu_ticks) / self._ticks / dt, 1)
                st.cpu_ticks, st.cpu_at = ticks, now
        else:
            st.cpu_ticks, st.cpu_at = ticks, now

        if ppid != st.orphan_ppid or now - st.orphan_at >= ORPHAN_RECHECK:
            st.orphaned = self._orphaned(pid, ppid, pgrp, session, st, parents)
            # one int object per parent PID, shared by its children: the steady state hashes it every poll
            st.orphan_ppid, st.orphan_at = self._ppids.setdefault(ppid, ppid), now
        st.quiet, st.cpu_zero = st.cpu_ticks == ticks, st.cpu_percent == 0.0

        # Unchanged since the last poll (an idle holder): the same frozen object will do.
        key = (ppid, state, rss, st.cpu_percent, st.orphaned)
        st.last_raw, st.cpu_ns = raw, clock
        if clock is not None and ppid not in self._immortal and ppid not in self._parents.fds \
                and self._pinned < self._fd_budget \
                and self._parents.watch(ppid):
            self._pinned += 1
        if st.last is not None and st.last[0] == key:
            st.fact = st.last[1]
            return st.last[1]
        fact = ProcessFacts(
            pid=pid,
            visible=True,
            user=st.user,
            uid=st.uid,
            command=st.command,
            exe=st.exe,
            cpu_percent=st.cpu_percent,
            host_memory=rss,
            create_time=st.create_time,
            ppid=ppid,
            status=_STATUS.get(state, state),
            cgroup=st.cgroup,
            orphaned=st.orphaned,
        )
        st.last = (key, fact)
        st.fact = fact
        return fact

    def _rss(self, base: str, st: _Static) -> int:
        """The exact RSS from /proc/PID/statm, through a descriptor pinned with the process's stat one (a
        pread instead of open, read, close: every idle process re-reads it every RSS_REFRESH seconds)."""
        fd = st.statm_fd
        if fd is None:
            # only while the budget keeps room for a stat descriptor of every known process: those matter more
            if st.stat_fd is None or self._pinned + len(self._static) >= self._fd_budget:
                return int(read_small(f"{base}/statm").split()[1]) * self._page
            fd = os.open(f"{base}/statm", os.O_RDONLY)
            try:  # the pinned stat descriptor still reads: the PID named this very process when opened
                os.pread(st.stat_fd, 1, 0)
            except OSError:
                os.close(fd)
                raise
            st.statm_fd = fd
            self._pinned += 1
        return int(os.pread(fd, 64, 0).split()[1]) * self._page  # size and resident: at most 41 bytes

    def _steady_due(self, kept: _Static, now: float) -> bool:
        """Whether a steady process (see _fact) still needs the full path: a CPU figure to move off 0,
        an orphan re-check or a statm re-read due, or no last facts to hand back."""
        fields = kept.stat_fields
        return not (self._steady_ok and kept.last is not None and now - kept.orphan_at < ORPHAN_RECHECK
                    and (self._refresh or now - kept.rss_at < RSS_REFRESH) and fields is not None
                    and kept.cpu_ticks == fields[5]
                    and (kept.cpu_percent == 0.0 or now - kept.cpu_at < MIN_CPU_INTERVAL))

    def _steady(self, pid: int, kept: _Static, now: float) -> ProcessFacts:
        """The last facts of a process in a steady state (see _fact), its clocks moved on."""
        if now - kept.cpu_at >= MIN_CPU_INTERVAL:
            kept.cpu_at = now  # no tick since the baseline: 0 % again, the baseline moves on
        kept.seen = kept.stat_at = now
        if self._refresh and kept.pidfd is None and not kept.exited:
            self._watch_pid(pid, kept)
        assert kept.last is not None  # the caller checked
        return kept.last[1]

    def _drop(self, pid: int) -> None:
        """Forget a process identity and close its pinned descriptors."""
        st = self._static.pop(pid, None)
        if st is not None:
            self._unwatch(st)
            for fd in (st.stat_fd, st.statm_fd):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                    self._pinned -= 1
            st.stat_fd = st.statm_fd = None

    def _watch_pid(self, pid: int, st: _Static) -> None:
        """Take a pidfd of the process ``st`` describes, so that its figures can be reused."""
        if self._pinned >= self._fd_budget:
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            # The pinned stat descriptor reads only while its own process lives: if it still reads
            # now, the PID named that process when the pidfd was taken, so the pidfd is its own.
            os.pread(st.stat_fd, 1, 0)  # type: ignore[arg-type]  # the caller checked stat_fd
        except OSError:
            os.close(pidfd)
            return
        self._watch.register(pidfd, select.POLLIN)
        self._watched[pidfd] = pid
        st.pidfd = pidfd
        self._pinned += 1

    def _unwatch(self, st: _Static) -> None:
        fd = st.pidfd
        if fd is None:
            return
        st.pidfd = None
        self._watched.pop(fd, None)
        unwatch_pidfd(self._watch, fd)
        self._pinned -= 1

    def close(self) -> None:
        for pid in list(self._static):
            self._drop(pid)
        self._forget_parents(set())

    def _invisible(self, pid: int) -> ProcessFacts:
        self._drop(pid)
        if not self.host_pids:
            reason = "other-namespace"
        elif self._hidden:
            reason = "hidden"
        else:
            reason = "vanished"
        return ProcessFacts(pid=pid, visible=False, invisible_reason=reason)

    def _read_static(self, pid: int, base: str, starttime: int, comm: bytes, old: _Static | None) -> _Static | None:
        uid: int | None = None
        ns_init = False
        try:
            status = read_all(f"{base}/status")
        except OSError:
            return None
        for line in status.split(b"\n"):
            if line.startswith(b"Uid:"):
                parts = line.split()
                if len(parts) > 1:
                    uid = int(parts[1])
            elif line.startswith(b"NSpid:"):
                parts = line.split()
                ns_init = len(parts) > 2 and parts[-1] == b"1"
        try:
            cmdline = read_all(f"{base}/cmdline")
        except OSError:
            cmdline = b""
        args = [a for a in cmdline.split(b"\0")]
        while args and not args[-1]:
            args.pop()
        if args:
            command = " ".join(a.decode(errors="replace") for a in args)
        else:  # zombies and kernel threads have no command line; ps shows [comm]
            command = f"[{comm.decode(errors='replace')}]"
        try:
            cgroup = read_all(f"{base}/cgroup").decode(errors="replace")
        except OSError:
            cgroup = None
        st = _Static(
            starttime=starttime,
            comm=comm,
            create_time=starttime / self._ticks + self._btime if self._btime is not None else None,
            uid=uid,
            user=self._user(uid),
            command=command,
            exe=exe_base_name(base, comm),
            cgroup=cgroup,
            ns_init=ns_init,
        )
        if old is not None and old.starttime == starttime:
            # the same process after exec(): keep its CPU baseline
            st.cpu_ticks, st.cpu_at, st.cpu_percent = old.cpu_ticks, old.cpu_at, old.cpu_percent
        return st

    def _user(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:  # a uid without a name here (often a container's user): psutil shows the number
                name = str(uid)
            self._users[uid] = name
        return name

    def _orphaned(self, pid: int, ppid: int, pgrp: int, session: int, st: _Static,
                  parents: dict[int, bool]) -> bool:
        if st.ns_init or session == pid:
            return False
        if not self._is_reaper(ppid, parents):
            return False
        session_gone = session > 0 and not os.path.exists(f"{self._proc}/{session}")
        group_gone = pgrp > 0 and pgrp != pid and not os.path.exists(f"{self._proc}/{pgrp}")
        return session_gone or group_gone

    def _is_reaper(self, ppid: int, parents: dict[int, bool]) -> bool:
        if ppid <= 0:  # the parent is outside this namespace: nothing to say
            return False
        if ppid == 1:
            return True
        known = parents.get(ppid)
        if known is not None:
            return known
        reaper = False
        try:
            status = read_all(f"{self._proc}/{ppid}/status")
        except OSError:
            status = b""
        text = b"\n" + status  # every line behind a newline: its two lines found, not every line split
        if (at := text.find(b"\nName:")) >= 0:
            parts = text[at + 1:].split(b"\n", 1)[0].split(None, 1)
            reaper = len(parts) > 1 and parts[1].strip().decode(errors="replace") in SUBREAPERS
        if (at := text.find(b"\nNSpid:")) >= 0:
            parts = text[at + 1:].split(b"\n", 1)[0].split()
            reaper = reaper or (len(parts) > 1 and parts[-1] == b"1")
        parents[ppid] = reaper
        return reaper

    def _purge(self, now: float) -> None:
        self._last_purge = now
        stale = [pid for pid, st in self._static.items() if now - st.seen > CACHE_TTL]
        for pid in stale:
            self._drop(pid)
        keep = {st.orphan_ppid for st in self._static.values()}
        self._forget_parents(keep)
        self._ppids = {ppid: ppid for ppid in keep}  # the parents of processes still known

    def _forget_parents(self, keep: set[int]) -> None:
        for ppid in [p for p in self._parents.fds if p not in keep]:
            if self._parents.forget(ppid):
                self._pinned -= 1

    # -- elsewhere: psutil ----------------------------------------------------------------

    def _facts_psutil(self, pids: Iterable[int]) -> dict[int, ProcessFacts]:
        import psutil

        out: dict[int, ProcessFacts] = {}
        for pid in pids:
            try:
                p = psutil.Process(pid)
                with p.oneshot():
                    uids = p.uids()
                    out[pid] = ProcessFacts(
                        pid=pid, visible=True, user=p.username(), uid=uids.real,
                        command=" ".join(p.cmdline()) or f"[{p.name()}]", exe=psutil_exe(p),
                        cpu_percent=None, host_memory=p.memory_info().rss, create_time=p.create_time(),
                        ppid=p.ppid(), status=p.status(),
                    )
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                out[pid] = ProcessFacts(pid=pid, visible=False, invisible_reason="vanished")
            except psutil.AccessDenied:
                out[pid] = ProcessFacts(pid=pid, visible=True)
        return out
