"""The progress bar of a build: nothing at all when disabled, and the bytes, tokens and documents it was told when
enabled."""

import sys

from mia_fast.frequency.progress import Progress


def test_a_disabled_bar_shows_and_counts_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "tqdm.auto", raising=False)
    bar = Progress(100, enabled=False)
    bar.advance(50, tokens=10, documents=2)
    bar.close()
    assert bar.bar is None and bar.tokens == 0 and "tqdm.auto" not in sys.modules


def test_an_enabled_bar_moves_by_the_bytes_read(capsys):
    bar = Progress(100, enabled=True)
    bar.advance(30, tokens=1000, documents=2)
    bar.advance(70, documents=1)
    assert (bar.bar.n, bar.tokens, bar.documents) == (100, 1000, 3)
    bar.close()
    assert "3 docs" in capsys.readouterr().err
