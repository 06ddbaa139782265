"""The progress bar of a frequency-table build."""

from __future__ import annotations

import time


class Progress:
    """A tqdm bar over input bytes (so it shows MB/s) with tokens/s and documents beside it; nothing,
    not even the tqdm import, when disabled."""

    def __init__(self, total_bytes: int, *, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm  # noqa: PLC0415 (0.14 s at start-up; a --quiet build needs none)

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, dynamic_ncols=True)
        self.started = time.perf_counter()
        self.tokens = self.documents = 0

    def advance(self, nbytes: int, tokens: int = 0, documents: int = 0) -> None:
        if self.bar is None:
            return
        self.tokens += tokens
        self.documents += documents
        rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{rate / 1e6:.2f}M tok/s, {self.documents} docs", refresh=False)
        self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
