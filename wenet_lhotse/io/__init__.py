"""Transport, apart from WeNet's formats: local files, object storage, HTTP, the limits
and retries of network reads, ``pipe:`` commands, atomic output files and their
temporary names, what may be opened at all (:mod:`.access`), Lhotse's IO backend for
URLs, and the one process pool (:mod:`.pool`) with its bounded submit loop
(:mod:`.parallel`). Nothing here knows what a WeNet list or tar
member is; :mod:`wenet_lhotse.formats` is built on it."""
