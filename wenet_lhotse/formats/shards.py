"""Old import path: the shard reader and writer now live in :mod:`.shard_reader` and :mod:`.shard_writer`."""  # noqa: E501
from wenet_lhotse.formats.shard_reader import *  # noqa: F401,F403
from wenet_lhotse.formats.shard_writer import write_wenet_shards  # noqa: F401
