"""Texts and models that methods and experiments make from others: neighbour texts (``neighbors``: a masked LM's,
or word-drop) and a model fine-tuned in place (``finetune``: the controlled experiment, FSD, the probe's proxy).
Sampled continuations are decoded by the local forward (``mia_fast.pipeline.sampling``) or by the server."""
