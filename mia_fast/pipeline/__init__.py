"""From texts to what the methods read: tokens, models, the forward engines and their outputs (TokenStats, hidden
states, samples, gradient norms) for each pass.

- ``passes``: a pass and its readouts (each names the engine method that serves it); the ``Engine`` protocol
- ``engine_base``: the flow every engine of a model shares (readout dispatch, stats cache, provenance, sample prompts)
- ``engine``: ``StatsEngine``, a model run here: batched forward to TokenStats and the other readouts
- ``server``: ``ServerEngine``, a model behind a vLLM/OpenAI server; ``served_model``: what is known of it before a
  request; ``server_answers``: reading its answers; ``server_client``: HTTP, retries, checked JSON;
  ``server_url``: the one URL parser and masking
- ``forward_path``: which forward an engine runs (packed or the model's own), decided once
- ``device``: what differs by device (device and dtype, copies to a GPU, per-device defaults, kernels that run)
- ``packed``: the pad-free packed decoder; ``packed_layers``: its layers built from a model's modules;
  ``attention``: packed attention (flash varlen, segment reference, attention split by log-sum-exp); ``rotary``:
  length-dependent rotary frequencies given to each text as alone
- ``sampling``: sampled continuations, batch-independent draws, job planning; ``decoding``: the step decoders
- ``tokenize``: texts into ids, start token, sliding windows, rows; ``batching``: token-budget batches
- ``models``: loading a model (hub, directory, GGUF) and what is known of it; ``model_checks``: its checkpoint fills
  it and its embedding holds every id its tokenizer gives
- ``stats``: ``TokenStats``; ``stats_cache``: the on-disk cache of TokenStats and the stats-only engines
- ``finetune``: fine-tuning a model in place (the experiments, FSD, the probe's proxy)
- ``neighbors``: neighbour texts (a masked LM's, or word-drop)
"""
