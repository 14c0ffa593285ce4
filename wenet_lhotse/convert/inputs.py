"""Old import path: detecting and opening inputs now live in :mod:`wenet_lhotse.sources`."""
from wenet_lhotse.sources import *  # noqa: F401,F403
