"""The local forward: a model run here, from token ids to what the methods read (TokenStats, hidden states,
samples, gradient norms) for each pass.

- ``engine``: ``StatsEngine``, a model run here: batched forward to TokenStats and the other readouts
- ``forward_path``: which forward an engine runs (packed or the model's own), decided once
- ``choices``: the forwards, precisions and per-device batch budgets, as tables the CLI reads without torch
- ``device``: what differs by device (device and dtype, copies to a GPU, per-device defaults, kernels that run)
- ``packed``: the pad-free packed decoder; ``packed_layers``: its layers built from a model's modules;
  ``attention``: packed attention (flash varlen, segment reference, attention split by log-sum-exp); ``rotary``:
  length-dependent rotary frequencies given to each text as alone; ``families``: one file per model family
- ``sampling``: sampled continuations, batch-independent draws, job planning; ``decoding``: the step decoders
- ``models``: loading a model (hub, directory, GGUF) and what is known of it; ``model_checks``: its checkpoint fills
  it and its embedding holds every id its tokenizer gives
- ``device_map``: a device map as given (``--device-map``), read without torch; ``spread``: a model whose layers a
  device map spreads over devices (checked before loading, its offload folder, where its ids and head go)
"""
