"""Old import path: the resumable sampler's pieces now live in :mod:`.readers`, :mod:`.shar_audio`, :mod:`.mux` and :mod:`.sampler`."""  # noqa: E501
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux  # noqa: F401
from wenet_lhotse.loader.readers import JsonlReader, ListReader, PositionedReader, shar_reader  # noqa: F401,E501
from wenet_lhotse.loader.sampler import ResumableBucketingSampler  # noqa: F401
from wenet_lhotse.loader.shar_audio import SharAudioAttacher  # noqa: F401
