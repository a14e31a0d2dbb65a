"""What an interrupted migration's journal and Docker say about its containers (pure; ``engine.py`` acts).

``--recover`` removes or takes over a container only when Docker shows it to be the journal's own copy
(:func:`is_successor`, :func:`own_copy`), and never creates one from the journal alone without naming
what it would reach on the host first (:func:`risky_summary`).
"""

from __future__ import annotations

import time
from typing import Any

from gputui.actions.migrate.body import name_of


def risky_summary(d: dict[str, Any]) -> str:
    """What a container made from the journal's body could reach on the host: the part a person reviews
    before ``--from-journal`` lets gputui create it (host paths, privileges, devices, host namespaces)."""
    body = d.get("original_body") or {}
    hc = body.get("HostConfig") or {}
    parts = [f"image {str(body.get('Image') or '?')[:80]}"]
    binds = [str(b).split(":", 1)[0] for b in hc.get("Binds") or []]
    binds += [str(m.get("Source")) for m in hc.get("Mounts") or [] if isinstance(m, dict) and m.get("Type") == "bind"]
    parts.append("host paths " + ", ".join(b[:60] for b in binds[:6]) if binds else "no host paths")
    if hc.get("Privileged"):
        parts.append("PRIVILEGED")
    if hc.get("CapAdd"):
        parts.append("capabilities " + ", ".join(str(c)[:24] for c in hc["CapAdd"][:6]))
    devices = [str(x.get("PathOnHost")) for x in hc.get("Devices") or [] if isinstance(x, dict)]
    if devices:
        parts.append("devices " + ", ".join(x[:40] for x in devices[:6]))
    for key in ("NetworkMode", "PidMode", "IpcMode", "UTSMode", "UsernsMode"):
        if str(hc.get(key) or "") == "host":
            parts.append(f"{key} host")
    if body.get("User"):
        parts.append(f"user {str(body['User'])[:32]}")
    return "; ".join(parts)


def docker_now() -> str:
    """Now, in the form of Docker's ``Created`` (UTC, comparable as text)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))


def own_copy(holder: dict[str, Any], d: dict[str, Any]) -> bool:
    """Is ``holder`` the copy an earlier --recover of this journal created?"""
    if d.get("recreated_id") and holder.get("Id") == d["recreated_id"]:
        return True
    started = str(d.get("recover_started") or "")
    body = d.get("original_body") or {}
    cfg = holder.get("Config") or {}
    # made from the original's image, or from the image its own files were committed into (whose labels
    # the copy then carries too)
    images = {i for i in (body.get("Image"), d.get("layer_image"), d.get("layer_image_id")) if i}
    labels, wanted = cfg.get("Labels") or {}, body.get("Labels") or {}
    extra = {k for k in labels if k not in wanted}
    return bool(started) and str(holder.get("Created") or "") >= started and cfg.get("Image") in images \
        and all(labels.get(k) == v for k, v in wanted.items()) \
        and all(k.startswith("io.gputui.migrate.") for k in extra) and cfg.get("Env") == body.get("Env")


def is_successor(new: dict[str, Any], d: dict[str, Any], name: str, orig_id: str,
                  old: dict[str, Any] | None) -> bool:
    """Does Docker show ``new`` to be the copy the journal's migration created?"""
    body = d.get("body") or {}
    cfg = new.get("Config") or {}
    labels = cfg.get("Labels") or {}
    if new.get("Id") == orig_id or name_of(new) != name or cfg.get("Image") != body.get("Image"):
        return False
    if any(labels.get(k) != v for k, v in (body.get("Labels") or {}).items()):
        return False
    if old is not None:
        theirs = (old.get("Config") or {}).get("Labels") or {}
        if any(labels.get(k) != v for k, v in theirs.items()) or str(new.get("Created") or "") < \
                str(old.get("Created") or ""):
            return False
    return True
