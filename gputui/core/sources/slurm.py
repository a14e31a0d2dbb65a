"""Slurm: the jobs on this node, their GPUs (GRES) and which PIDs belong to which job.

Detection costs one ``stat`` off Slurm: without a ``slurm.conf`` (``$SLURM_CONF`` or
``/etc/slurm/slurm.conf``) nothing here runs, and ``squeue`` is never started (without a
config it would look for the controller in DNS). With one, Slurm is on when the
``slurmd`` its ``SlurmdPidFile`` names is alive; the node is the name slurmd runs as
(``slurmd -N``), else ``$SLURMD_NODENAME``, else the short host name.

A reading runs one ``squeue --json -w <node>`` (job facts, from slurmctld) and one
``scontrol listpids`` (PID -> job, from the local slurmd), each with a timeout and an
output limit; either failing becomes a sentence, never an exception. A process's job is
read from its cgroup path first (:func:`job_from_cgroup`), ``listpids`` is the fallback.
``CUDA_VISIBLE_DEVICES`` is never read: under ``ConstrainDevices`` it numbers the GPUs
the job can see, not the machine's. A job's GPUs are its GRES indices
(``gres_detail``: ``gpu:1(IDX:1)``), mapped through ``gres.conf``'s ``File=`` devices to
``/dev/nvidiaN`` minors (the identity when gres.conf names no files).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping

from gputui.core.jobs_model import SchedulerJob
from gputui.core.record import field, record
from gputui.core.safe_text import clean

DEFAULT_CONF = "/etc/slurm/slurm.conf"
CONF_LIMIT = 1 << 20
OUTPUT_LIMIT = 32 << 20
#: /dev/nvidiaN's character major
NVIDIA_MAJOR = 195
MAX_GRES_INDEX = 1023
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_JOB_ID = re.compile(r"^[0-9]{1,12}$")
_STEP = re.compile(r"^[A-Za-z0-9_]{1,32}$")
_CGROUP_JOB = re.compile(r"/(?:slurm[^/]*|[^/]*slurmstepd\.scope)(?:/uid_[0-9]+)?/job_([0-9]{1,12})"
                         r"(?:/step_([A-Za-z0-9_]{1,32}))?(?:/|$)")
_GRES = re.compile(r"^gpu(?::[^:()]{1,64})?:[0-9]{1,5}(?:\(S:[^)]*\))?\(IDX:([0-9,\-]{1,200})\)")


class SlurmError(Exception):
    """A Slurm command failed; ``str(exc)`` is one sentence."""


@record
class SlurmNode:
    """This node as Slurm knows it, found by :func:`find_slurm`."""

    name: str
    conf_path: str
    slurmd_pid: int
    #: slurm.conf's settings, keys lower-cased
    conf: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: GRES index -> /dev/nvidiaN minor, from gres.conf's File= devices; empty: the identity
    gres_minors: tuple[int, ...] = ()
    #: gres.conf's GPU device files for this node, as written (for doctor)
    gres_files: tuple[str, ...] = ()

    def minor_of(self, gres_index: int) -> int:
        if self.gres_minors:
            return self.gres_minors[gres_index] if gres_index < len(self.gres_minors) else -1
        return gres_index


@record
class SlurmReading:
    """One reading: the jobs slurmctld told of, and the PIDs slurmd told of."""

    #: whether slurmctld answered (squeue)
    available: bool
    error: str | None = None
    jobs: tuple[SchedulerJob, ...] = ()
    #: PID -> (job id, step) from scontrol listpids
    pids: dict[int, tuple[str, str | None]] = field(default_factory=dict, hash=False, compare=False)
    #: scontrol listpids failed: why
    pids_error: str | None = None


# -- detection -------------------------------------------------------------------------------


def read_conf(path: str) -> dict[str, str]:
    """``Key=Value`` settings of a slurm.conf (keys lower-cased; Node/Partition lines skipped)."""
    values: dict[str, str] = {}
    for line in _read_text(path, CONF_LIMIT).splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" not in line or line.lower().startswith(("nodename", "partitionname", "nodeset", "downnodes")):
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key and len(key) <= 64:
            values[key] = value.strip()[:1024]
    return values


def find_slurm(environ: Mapping[str, str] | None = None) -> SlurmNode | None:
    """This node, when a slurm.conf exists and its slurmd runs; None otherwise (one stat off Slurm)."""
    env = os.environ if environ is None else environ
    path = env.get("SLURM_CONF") or DEFAULT_CONF
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        conf = read_conf(path)
    except (OSError, UnicodeDecodeError):
        return None
    host = os.uname().nodename.split(".")[0]
    pidfile = conf.get("slurmdpidfile", "/run/slurmd.pid").replace("%n", host).replace("%h", host)
    pid = _slurmd_pid(pidfile)
    if pid is None:
        return None
    name = _node_name(pid) or env.get("SLURMD_NODENAME") or host
    if not _NAME.match(name):
        return None
    gres_path = os.path.join(os.path.dirname(path), "gres.conf")
    files = gres_files(gres_path, name)
    return SlurmNode(name=name, conf_path=path, slurmd_pid=pid, conf=conf, gres_minors=_minors(files),
                     gres_files=files)


def _read_text(path: str, limit: int) -> str:
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit // 1024} KiB")
    return data.decode("utf-8", "replace")


def _slurmd_pid(pidfile: str) -> int | None:
    try:
        text = _read_text(pidfile, 64).strip()
        pid = int(text)
        if not 0 < pid < 1 << 22:
            return None
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = fh.read(64).strip()
    except (OSError, ValueError):
        return None
    return pid if comm == b"slurmd" else None


def _node_name(pid: int) -> str | None:
    """The ``-N name`` slurmd was started with, if any."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read(8192).split(b"\0")
    except OSError:
        return None
    for i, arg in enumerate(args):
        if arg == b"-N" and i + 1 < len(args):
            return args[i + 1].decode("utf-8", "replace")
        if arg.startswith(b"-N") and len(arg) > 2:
            return arg[2:].decode("utf-8", "replace")
    return None


def expand_hostlist(text: str, limit: int = 4096) -> list[str]:
    """``a[1-3,5],b`` -> ``a1 a2 a3 a5 b`` (one bracket group per name, at most ``limit`` names)."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[\]]+)(?:\[([^\]]*)\])?([^,\[\]]*)", text):
        head, group, tail = m.group(1), m.group(2), m.group(3)
        if group is None:
            out.append(head + tail)
        else:
            for part in group.split(","):
                lo, _, hi = part.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    continue
                stop = int(hi) if hi else int(lo)
                for n in range(int(lo), min(stop, int(lo) + limit) + 1):
                    out.append(f"{head}{str(n).zfill(len(lo))}{tail}")
        if len(out) >= limit:
            break
    return out[:limit]


def gres_files(path: str, node: str) -> tuple[str, ...]:
    """gres.conf's ``Name=gpu File=...`` devices for ``node`` (lines naming other nodes skipped)."""
    try:
        text = _read_text(path, CONF_LIMIT)
    except (OSError, UnicodeDecodeError):
        return ()
    files: list[str] = []
    for line in text.splitlines():
        words = dict(w.partition("=")[::2] for w in line.split("#", 1)[0].split() if "=" in w)
        words = {k.lower(): v for k, v in words.items()}
        if words.get("name") != "gpu" or "file" not in words:
            continue
        if "nodename" in words and node not in expand_hostlist(words["nodename"]):
            continue
        files += expand_hostlist(words["file"], limit=MAX_GRES_INDEX + 1)
    return tuple(files[:MAX_GRES_INDEX + 1])


def gres_minor(path: str) -> int | None:
    """The minor of an NVIDIA character device (major 195), None for anything else."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != NVIDIA_MAJOR:
        return None
    return os.minor(st.st_rdev)


def _minors(files: tuple[str, ...]) -> tuple[int, ...]:
    """The minors of gres.conf's device files, in GRES index order; () unless every one is /dev/nvidiaN-like."""
    minors = [gres_minor(f) for f in files]
    return () if None in minors else tuple(m for m in minors if m is not None)


# -- parsing (pure) --------------------------------------------------------------------------


def job_from_cgroup(text: str | None) -> tuple[str, str | None] | None:
    """(job id, step) from a /proc/PID/cgroup text written by Slurm's cgroup plugins (v1 or v2)."""
    if not text or "job_" not in text:
        return None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _CGROUP_JOB.search(path)
        if m:
            return m.group(1), m.group(2)
    return None


def parse_indices(text: str) -> tuple[int, ...]:
    """``0-1,3`` -> (0, 1, 3), each within 0..MAX_GRES_INDEX; a bad part is skipped."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        a, b = int(lo), int(hi) if hi else int(lo)
        if a <= b <= MAX_GRES_INDEX:
            out += range(a, b + 1)
    return tuple(sorted(set(out)))


def parse_gres_detail(items: object, position: int = 0) -> tuple[int, ...]:
    """GPU GRES indices from squeue's ``gres_detail`` (one string per node; ``position`` is this node's)."""
    if not isinstance(items, list) or not items:
        return ()
    entry = items[position] if position < len(items) else items[0]
    if not isinstance(entry, str) or len(entry) > 4096:
        return ()
    found: list[int] = []
    for chunk in re.split(r",(?=[A-Za-z])", entry):
        m = _GRES.match(chunk.strip())
        if m:
            found += parse_indices(m.group(1))
    return tuple(sorted(set(found)))


def _text(value: object, limit: int = 128) -> str | None:
    return clean(value)[:limit] if isinstance(value, str) and value else None


def _epoch(value: object) -> int | None:
    if isinstance(value, dict):  # later Slurm: {"set": true, "infinite": false, "number": N}
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 40:
        return None
    return value


def parse_squeue(text: str, node: str) -> tuple[SchedulerJob, ...]:
    """Jobs from ``squeue --json`` output (bad entries skipped); raises SlurmError when it is not squeue JSON."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise SlurmError("squeue did not answer with JSON.") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SlurmError("squeue's answer has no job list.")
    out: list[SchedulerJob] = []
    for j in jobs[:10_000]:
        if not isinstance(j, dict):
            continue
        jid = j.get("job_id")
        if isinstance(jid, bool) or not isinstance(jid, int | str) or not _JOB_ID.match(str(jid)):
            continue
        state = j.get("job_state")
        if isinstance(state, list):  # later Slurm gives a list of flags
            state = state[0] if state else None
        nodes = expand_hostlist(j["nodes"]) if isinstance(j.get("nodes"), str) else []
        if node not in nodes:  # 22.05's squeue --json ignores -w: keep this node's jobs only
            continue
        position = nodes.index(node)
        limit = j.get("time_limit")
        end = _epoch(j.get("end_time"))
        if limit is None or (isinstance(limit, dict) and limit.get("infinite")):
            end = None  # no time limit: squeue puts the end a year away
        out.append(SchedulerJob(
            id=str(jid),
            user=_text(j.get("user_name"), 64),
            name=_text(j.get("name")),
            state=_text(state, 32),
            end_time=end,
            gres_indices=parse_gres_detail(j.get("gres_detail"), position),
        ))
    return tuple(out)


def parse_listpids(text: str) -> dict[int, tuple[str, str | None]]:
    """``scontrol listpids`` rows -> {pid: (job id, step)}."""
    out: dict[int, tuple[str, str | None]] = {}
    for line in text.splitlines()[:200_000]:
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit() or not _JOB_ID.match(parts[1]):
            continue
        pid = int(parts[0])
        if 0 < pid < 1 << 22:
            out[pid] = (parts[1], parts[2] if _STEP.match(parts[2]) else None)
    return out


# -- the source ------------------------------------------------------------------------------

Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]


def _first_line(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return clean(line.strip())[:200]
    return ""


class SlurmSource:
    """Reads this node's jobs. ``read`` blocks (run it off the UI thread); it never raises."""

    def __init__(self, node: SlurmNode, timeout: float = 5.0, runner: Runner = subprocess.run) -> None:
        self.node = node
        self.timeout = timeout
        self._run = runner

    def command(self, name: str) -> str | None:
        return shutil.which(name)

    def call(self, argv: list[str]) -> bytes:
        exe = self.command(argv[0])
        if exe is None:
            raise SlurmError(f"{argv[0]} is not installed.")
        env = dict(os.environ)
        env.pop("SQUEUE_FORMAT", None)
        env.pop("SQUEUE_FORMAT2", None)
        env["SLURM_CONF"] = self.node.conf_path
        try:
            done = self._run([exe, *argv[1:]], capture_output=True, timeout=self.timeout, env=env,
                             stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {self.timeout:g} s.") from None
        except OSError as exc:
            raise SlurmError(f"{argv[0]} could not be run: {exc.strerror or exc}.") from None
        if len(done.stdout) > OUTPUT_LIMIT:
            raise SlurmError(f"{argv[0]} answered with more than {OUTPUT_LIMIT >> 20} MiB.")
        if done.returncode != 0:
            why = _first_line(done.stderr) or f"exit status {done.returncode}"
            raise SlurmError(f"{argv[0]} failed: {why}.")
        return bytes(done.stdout)

    def read(self, on_pids: Callable[[dict[int, tuple[str, str | None]]], object] | None = None) -> SlurmReading:
        """listpids (slurmd, local), handed to ``on_pids`` at once, then squeue (slurmctld, may hang)."""
        pids: dict[int, tuple[str, str | None]] = {}
        pids_error = None
        try:
            pids = parse_listpids(self.call(["scontrol", "listpids"]).decode("utf-8", "replace"))
        except SlurmError as exc:
            if "No job steps exist" not in str(exc):  # slurmd's answer when no job runs here
                pids_error = str(exc)
        if on_pids is not None:
            on_pids(pids)
        try:
            out = self.call(["squeue", "--json", "-w", self.node.name])
            jobs = parse_squeue(out.decode("utf-8", "replace"), self.node.name)
        except SlurmError as exc:
            return SlurmReading(False, f"slurmctld is not answering: {exc}", pids=pids, pids_error=pids_error)
        return SlurmReading(True, None, jobs=jobs, pids=pids, pids_error=pids_error)

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        """``scancel`` a job (with ``--signal`` when given). Raises SlurmError with one sentence."""
        if not _JOB_ID.match(job_id):
            raise SlurmError(f"{job_id!r} is not a Slurm job id.")
        argv = ["scancel"]
        if signal is not None:
            if signal not in ("TERM", "INT", "KILL"):
                raise SlurmError(f"{signal!r} is not a signal gputui sends to a job.")
            argv += ["--full", f"--signal={signal}"]
        self.call([*argv, job_id])

    def close(self) -> None:
        pass

