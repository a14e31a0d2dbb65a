"""Containers in a snapshot (interim version; replaced by the containers work)."""
from __future__ import annotations
from gputui.core.model import Container, ContainerRecord, Gpu

def build_containers(records, gpus, history, settings, now) -> tuple[Container, ...]:
    out = []
    for r in records:
        pids = tuple(p.pid for g in gpus for p in g.processes if p.container and p.container.id == r.id)
        mem = sum(p.gpu_memory or 0 for g in gpus for p in g.processes if p.container and p.container.id == r.id)
        out.append(Container(id=r.id, name=r.name, image=r.image, state=r.state, gpus=r.gpus,
                             grant_source=r.grant_source, cuda_visible_devices=r.cuda_visible_devices,
                             gpu_memory=mem, pids=pids, compose_project=r.compose_project,
                             compose_service=r.compose_service, runtime=r.runtime))
    return tuple(out)
