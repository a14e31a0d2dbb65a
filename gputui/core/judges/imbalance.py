"""Imbalance judge (interim version; replaced by the imbalance work)."""
from gputui.core.model import Imbalance
class ImbalanceJudge:
    def __init__(self, settings):
        self.settings = settings
    def update(self, history, snapshot):
        return Imbalance()
