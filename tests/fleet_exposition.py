"""Static Prometheus targets for the fleet tests: exposition text on a loopback HTTP server.

``gputui_text(host)`` writes what ``gputui exporter`` serves, following the metric
contract of the exporter (README "Many servers"): ``gputui_host_info``, per-GPU
gauges with ``gpu`` and ``uuid``, process series with owner and container (never a
command line), container grants and findings, stale counts, imbalance and alerts.
``dcgm_text()`` is a recorded dcgm-exporter page (``tests/data/dcgm-exporter.txt``).

``StaticTarget(text)`` serves ``/metrics`` on 127.0.0.1; ``.text`` can be replaced
while it runs, ``.stop()`` closes the port (Prometheus then records ``up`` 0).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIB = 1024**3
DATA = Path(__file__).parent / "data"


@dataclass
class Proc:
    pid: int
    user: str
    exe: str
    memory: int
    container: str = ""
    image: str = ""


@dataclass
class Card:
    index: int
    uuid: str
    util: float  # 0..1
    used: int
    total: int = 80 * GIB
    temp: int = 40
    name: str = "NVIDIA H100 80GB HBM3"
    procs: list[Proc] = field(default_factory=list)


@dataclass
class Host:
    hostname: str
    cards: list[Card]
    grants: list[tuple[str, str, int]] = field(default_factory=list)  # (container, uuid, gpu)
    findings: list[tuple[str, str]] = field(default_factory=list)  # (container, kind)
    alerts: list[tuple[str, str, str]] = field(default_factory=list)  # (gpu or "", kind, severity)
    imbalance: bool = False
    stale: dict[tuple[int, str], int] = field(default_factory=dict)


def _esc(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: dict[str, object], value: object) -> str:
    inner = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value}" if inner else f"{name} {value}"


def gputui_text(host: Host) -> str:
    out = ["# TYPE gputui_host_info gauge",
           _line("gputui_host_info", {"hostname": host.hostname, "driver_version": "550.127.05",
                                      "cuda_version": "12.4", "gputui_version": "0.1.0"}, 1)]
    gauges = {
        "gputui_gpu_info": lambda c: 1,
        "gputui_gpu_utilization_ratio": lambda c: c.util,
        "gputui_gpu_memory_used_bytes": lambda c: c.used,
        "gputui_gpu_memory_total_bytes": lambda c: c.total,
        "gputui_gpu_temperature_celsius": lambda c: c.temp,
        "gputui_gpu_lost": lambda c: 0,
    }
    for name, fn in gauges.items():
        out.append(f"# TYPE {name} gauge")
        for c in host.cards:
            labels: dict[str, object] = {"gpu": c.index, "uuid": c.uuid}
            if name == "gputui_gpu_info":
                labels.update(name=c.name, pci_bus_id=f"00000000:{c.index + 1:02X}:00.0")
            out.append(_line(name, labels, fn(c)))
    out.append("# TYPE gputui_process_gpu_memory_bytes gauge")
    for c in host.cards:
        for p in c.procs:
            out.append(_line("gputui_process_gpu_memory_bytes", {
                "gpu": c.index, "uuid": c.uuid, "pid": p.pid, "user": p.user, "exe": p.exe,
                "container": p.container, "image": p.image, "compose_project": "", "compose_service": ""},
                p.memory))
    out.append("# TYPE gputui_container_gpu_granted gauge")
    for container, uuid, gpu in host.grants:
        out.append(_line("gputui_container_gpu_granted",
                         {"container": container, "uuid": uuid, "gpu": gpu, "via": "device_request"}, 1))
    out.append("# TYPE gputui_container_finding gauge")
    for container, kind in host.findings:
        out.append(_line("gputui_container_finding", {"container": container, "kind": kind}, 1))
    out.append("# TYPE gputui_stale_processes gauge")
    for (gpu, kind), n in host.stale.items():
        uuid = next(c.uuid for c in host.cards if c.index == gpu)
        out.append(_line("gputui_stale_processes", {"gpu": gpu, "uuid": uuid, "kind": kind}, n))
    out.append("# TYPE gputui_imbalance_flagged gauge")
    out.append(_line("gputui_imbalance_flagged", {}, 1 if host.imbalance else 0))
    out.append("# TYPE gputui_alert_active gauge")
    for gpu, kind, severity in host.alerts:
        out.append(_line("gputui_alert_active", {"gpu": gpu, "kind": kind, "severity": severity}, 1))
    out.append("# TYPE gputui_last_poll_timestamp_seconds gauge")
    out.append(_line("gputui_last_poll_timestamp_seconds", {}, 1.7e9))
    return "\n".join(out) + "\n"


def dcgm_text() -> str:
    return (DATA / "dcgm-exporter.txt").read_text()


class StaticTarget:
    """``/metrics`` on 127.0.0.1 serving ``self.text``; anything else is 404."""

    def __init__(self, text: str) -> None:
        self.text = text
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = target.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
