"""Stale-process judge (interim version; replaced by the stale-process work)."""
def judge_stale(process, history, settings, containers_by_id, records):
    return ()
