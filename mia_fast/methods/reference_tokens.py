"""What the token-level reference-model attacks (``ezmia``, ``wbc``) share: the target's and the reference model's
log-probabilities of the same tokens. Not a method itself.

Each model scores a text as its own tokenizer splits it (``REFERENCE_PASS``, as ``ref`` does). Tokens are paired by
the characters they cover, from each tokenizer's offset mapping (``TokenSpansReadout``): a target token pairs with
the reference token whose character span [start, end) in the text is the same. Where several tokens of one model
share a span (the byte pieces of one character), they pair in order with as many of the other's, and not at all when
the counts differ. So where the two tokenizers split a text alike (always, for one tokenizer) token t pairs with token
t, exactly. An attack reads paired tokens only: where some of the target's scored tokens found no pair, a warning
says how many did, and a text none of whose tokens did scores NaN; a block of texts none of whose tokens pairs is
refused. (The public codes of both attacks feed the two models the same ids, or, Nikkei's WBC, pair the two lists of
log-probs by position, truncated to the shorter.)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from mia_fast.engines.passes import PLAIN, REFERENCE, TOKEN_SPANS, Pass
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.methods.settings import MethodSettings

TARGET_SPANS = Pass(readout=TOKEN_SPANS)
REFERENCE_SPANS = Pass(model=REFERENCE, readout=TOKEN_SPANS)


def token_passes(settings: MethodSettings) -> tuple[Pass, ...]:
    """Both models' statistics and token spans (the spans cost a tokenization each, no forward)."""
    return (PLAIN, REFERENCE_PASS, TARGET_SPANS, REFERENCE_SPANS)


def align_spans(target: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of tokens covering the same characters, as (indices into ``target``, indices into ``reference``) in
    the target's order, from the int64 [tokens, 2] character spans of one text's tokens under each tokenizer."""
    if np.array_equal(target, reference):
        same = np.arange(len(target), dtype=np.int64)
        return same, same
    by_span: list[dict[tuple[int, int], list[int]]] = [{}, {}]
    for spans, groups in zip((target, reference), by_span):
        for position, span in enumerate(map(tuple, spans.tolist())):
            groups.setdefault(span, []).append(position)
    pairs = sorted(
        pair
        for span, mine in by_span[0].items()
        if len(mine) == len(theirs := by_span[1].get(span, []))
        for pair in zip(mine, theirs)
    )
    found = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return found[:, 0], found[:, 1]


@dataclass(frozen=True)
class PairedTokens:
    """The paired tokens of a block of texts: each pair's position in the target's TokenStats (``target``) and in the
    reference's (``reference``), text by text (text i's pairs are ``offsets[i]:offsets[i + 1]``)."""

    offsets: np.ndarray
    target: np.ndarray
    reference: np.ndarray


def paired_tokens(inputs: ScoringInputs, method: str) -> PairedTokens:
    """The tokens both models score in each text, paired (see the module docstring); warns where some of the target's
    scored tokens found no pair and refuses a block of which none did."""
    target, reference = inputs.stats, inputs.of(REFERENCE_PASS)
    target_spans, reference_spans = inputs.of(TARGET_SPANS), inputs.of(REFERENCE_SPANS)
    lengths = [len(spans) for spans in target_spans], [len(spans) for spans in reference_spans]
    if lengths[0] != target.lengths.tolist() or lengths[1] != reference.lengths.tolist():
        raise MiaFastError(f"{method}: the token spans do not match the tokens each model scored")
    mine, theirs = [], []
    for i in range(len(target)):
        t, r = align_spans(target_spans[i], reference_spans[i])
        mine.append(t + target.offsets[i])
        theirs.append(r + reference.offsets[i])
    pairs = np.array([len(t) for t in mine], dtype=np.int64)
    scored, paired = int(target.lengths.sum()), int(pairs.sum())
    if scored and not paired:
        raise MiaFastError(
            f"{method}: none of the target's {scored:,} scored tokens covers the same characters as a token of the "
            "reference model: their tokenizers split text too differently to align; use a reference model whose "
            "tokenizer splits text like the target's"
        )
    if paired < scored:
        unpaired_texts = int(((pairs == 0) & (target.lengths > 0)).sum())
        warnings.warn(
            MiaFastWarning(
                f"{method}: {paired:,} of the target's {scored:,} scored tokens ({100 * paired / scored:.1f}%) cover "
                f"the same characters as a reference model's token; {method} reads those only"
                + (f" ({unpaired_texts} text(s) with none score NaN)" if unpaired_texts else "")
            ),
            stacklevel=3,
        )
    offsets = np.concatenate([[0], np.cumsum(pairs)]).astype(np.int64)
    empty = np.zeros(0, np.int64)
    return PairedTokens(offsets, np.concatenate([empty, *mine]), np.concatenate([empty, *theirs]))
