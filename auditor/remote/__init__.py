"""Remote checkpoints: ``hf://org/name[@rev]``, ``ms://org/name[@rev]`` or a bare ``org/name``, read
headers only.

``refs.py`` parses the MODEL forms (no network, no third-party import); ``mirror.py`` resolves the
commit, reads config/indexes/description whole and bytes ``[0, 8+N)`` of every shard into a cache
directory keyed by the commit (``cache.py``), which ``source.open_model`` then reads as a local
checkpoint. ``hf.py`` and ``modelscope.py`` are the two hubs (resolution, listing, URLs, errors),
``plan.py`` chooses the files, ``ranges.py`` reads byte ranges, ``http.py`` is the client (retries,
redirects, auth scoping).
"""
