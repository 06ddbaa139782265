"""From texts to what the methods read: tokenize (start token, windows), batching, models, the
forward engine, and its outputs (TokenStats, hidden states) for each pass."""
