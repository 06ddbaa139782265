"""A model behind a vLLM or OpenAI-style server, as one more engine.

- ``server``: ``ServerEngine``, the engine; ``model``: what is known of the served model before a request (its
  tokenizer here, its limits); ``answers``: reading the server's answers; ``client``: HTTP, retries, checked JSON;
  ``url``: the one URL parser and masking
"""
