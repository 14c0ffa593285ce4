"""Old import path: source specs, opening, tags and mux now live in :mod:`wenet_lhotse.sources`."""
from wenet_lhotse.sources import *  # noqa: F401,F403
