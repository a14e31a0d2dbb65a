"""Alert judge (interim version; replaced by the alerts work)."""
class AlertJudge:
    def __init__(self, settings):
        self.settings = settings
    def update(self, history, snapshot):
        return ()
