"""Replicas of public scoring loops, kept as parity and speed baselines. Not used by the engine.

``public_loop_scores``, the Min-K%++ ``run.py``: one text at a time, ``model(ids, labels=ids)``,
softmax and log_softmax over ``logits[0, :-1]``, ``int(len * ratio)`` tokens per k, numpy sort and
mean: exactly as the public code does it (including its NaN for texts too short for a k).

``public_conrecall_scores``, Con-ReCall's ``run.py`` (github.com/WangCheng0116/CON-RECALL):
``get_ll`` and ``get_conditional_ll``, one text at a time, and its ReCaLL and Con-ReCall formulas.

``public_neighbor_scores``, MIMIR's neighbourhood attack (github.com/iamgroot42/mimir,
``mimir/models.py`` ``get_ll`` and ``mimir/attacks/neighborhood.py``), one text at a time.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F


@torch.inference_mode()
def public_loop_scores(
    model, tokenizer, texts: Sequence[str], ks: Sequence[float], upcast_logits: bool = False
) -> dict[str, list[float]]:
    """Scores ``texts`` like the public code: columns loss, zlib, mink_k, minkpp_k (our naming).

    ``upcast_logits`` runs the statistics on fp64 copies of the same logits: an fp64 ground truth
    of what the fp32 loop computes.
    """
    device = next(model.parameters()).device
    scores: dict[str, list[float]] = {"loss": [], "zlib": []}
    for k in ks:
        scores[f"mink_{float(k)!r}"] = []
        scores[f"minkpp_{float(k)!r}"] = []
    for text in texts:
        input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        outputs = model(input_ids, labels=input_ids)
        loss, logits = outputs[:2]
        if upcast_logits:
            logits = logits.double()
            loss = F.cross_entropy(logits[0, :-1], input_ids[0, 1:])
        ll = -loss.item()
        scores["loss"].append(ll)
        scores["zlib"].append(ll / len(zlib.compress(bytes(text, "utf-8"))))

        input_ids = input_ids[0][1:].unsqueeze(-1)
        probs = F.softmax(logits[0, :-1], dim=-1)
        log_probs = F.log_softmax(logits[0, :-1], dim=-1)
        token_log_probs = log_probs.gather(dim=-1, index=input_ids).squeeze(-1)
        mu = (probs * log_probs).sum(-1)
        sigma = (probs * torch.square(log_probs)).sum(-1) - torch.square(mu)
        for ratio in ks:
            k_length = int(len(token_log_probs) * ratio)
            topk = np.sort(token_log_probs.cpu())[:k_length]
            scores[f"mink_{float(ratio)!r}"].append(np.mean(topk).item())
        mink_plus = (token_log_probs - mu) / sigma.sqrt()
        for ratio in ks:
            k_length = int(len(mink_plus) * ratio)
            topk = np.sort(mink_plus.cpu())[:k_length]
            scores[f"minkpp_{float(ratio)!r}"].append(np.mean(topk).item())
    return scores


@torch.inference_mode()
def public_conrecall_scores(
    model, tokenizer, texts: Sequence[str], nonmember_prefix: str, member_prefix: str, gamma: float,
    score_first_token: bool = True,
) -> dict[str, list[float]]:
    """Columns recall and conrecall as the public code computes them: ``ll_nonmember / ll`` and
    ``(ll_nonmember - gamma * ll_member) / ll``, each ll minus the mean loss of ``model(..., labels)``.

    The conditional passes there also score the text's first token (predicted from the prefix),
    which the unconditional pass cannot; ``score_first_token=False`` leaves it out, so all three
    average over the same tokens (the engine's choice).
    """
    device = next(model.parameters()).device

    def conditional_ll(prefix: str, ids: torch.Tensor) -> float:
        prefix_ids = tokenizer(prefix, return_tensors="pt").input_ids.to(device)
        concat_ids = torch.cat((prefix_ids, ids), dim=1)
        labels = concat_ids.clone()
        labels[:, : prefix_ids.size(1) + (0 if score_first_token else 1)] = -100
        return -model(concat_ids, labels=labels).loss.item()

    scores: dict[str, list[float]] = {"recall": [], "conrecall": []}
    for text in texts:
        ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
        ll = -model(ids, labels=ids).loss.item()
        ll_nonmember, ll_member = conditional_ll(nonmember_prefix, ids), conditional_ll(member_prefix, ids)
        scores["recall"].append(ll_nonmember / ll)
        scores["conrecall"].append((ll_nonmember - gamma * ll_member) / ll)
    return scores


@torch.inference_mode()
def public_neighbor_scores(model, tokenizer, texts: Sequence[str], neighbors: Sequence[Sequence[str]]) -> dict[str, list[float]]:
    """MIMIR's statistic, lower = member: ``neighbor`` = loss − mean(neighbour losses) as the paper
    defines it, ``neighbor_mimir_min`` = min(loss − neighbour losses) as MIMIR's ``run.py`` keeps it;
    each loss the mean NLL of the tokens after the first (MIMIR's ``get_ll``)."""
    device = next(model.parameters()).device

    def get_ll(text: str) -> float:
        input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        logits = model(input_ids).logits
        log_probs = F.log_softmax(logits[0, :-1], dim=-1)
        all_prob = log_probs.gather(dim=-1, index=input_ids[0][1:].unsqueeze(-1)).squeeze(-1).cpu().numpy()
        return -np.mean(all_prob)

    scores: dict[str, list[float]] = {"neighbor": [], "neighbor_mimir_min": []}
    for text, listed in zip(texts, neighbors):
        loss = get_ll(text)
        neighbor_losses = np.array([get_ll(n) for n in listed])
        scores["neighbor"].append(float(loss - neighbor_losses.mean()))
        scores["neighbor_mimir_min"].append(float(np.min(loss - neighbor_losses)))
    return scores
