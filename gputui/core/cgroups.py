"""/proc/PID/cgroup -> container id (interim: Docker cgroupfs only; replaced by the containers work)."""
from __future__ import annotations
import re
from dataclasses import dataclass

@dataclass(frozen=True)
class CgroupMatch:
    runtime: str
    id: str
    pod: str | None = None
    namespace: str | None = None
    pod_uid: str | None = None

_DOCKER = re.compile(r"/docker/([0-9a-f]{64})")

def parse_cgroup(text: str) -> CgroupMatch | None:
    m = _DOCKER.search(text)
    return CgroupMatch("docker", m.group(1)) if m else None
