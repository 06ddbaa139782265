"""What every engine shares, whatever runs its model (here, behind a server, or none at all).

- ``passes``: a pass and its readouts (each names the engine method that serves it)
- ``protocol``: the ``Engine`` protocol, ``EngineLimits`` (what an engine cannot give) and ``WeightsEngine``
- ``base``: the flow every engine of a model shares (readout dispatch, stats cache, provenance, sample prompts)
- ``stats``: ``TokenStats``, what a plain pass returns; ``stats_cache``: their cache on disk
- ``stored``: the engines that hold token statistics and no model (a stats cache read alone, saved TokenStats)
- ``batching``: token-budget batches
"""
