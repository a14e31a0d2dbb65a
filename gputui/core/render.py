"""Plain-text rendering of a snapshot (interim)."""
def render_text(snap):
    return "\n".join(f"{g.index} {g.name} {g.utilization_gpu}%" for g in snap.gpus) + "\n"
