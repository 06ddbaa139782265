"""Replicas of public scoring loops, kept as parity and speed baselines. Not used by the engine.

``public_loop_scores``, the Min-K%++ ``run.py``: one text at a time, ``model(ids, labels=ids)``,
softmax and log_softmax over ``logits[0, :-1]``, ``int(len * ratio)`` tokens per k, numpy sort and
mean: exactly as the public code does it (including its NaN for texts too short for a k).

``public_conrecall_scores``, Con-ReCall's ``run.py`` (github.com/WangCheng0116/CON-RECALL):
``get_ll`` and ``get_conditional_ll``, one text at a time, and its ReCaLL and Con-ReCall formulas.

``public_neighbor_scores``, MIMIR's neighbourhood attack (github.com/iamgroot42/mimir,
``mimir/models.py`` ``get_ll`` and ``mimir/attacks/neighborhood.py``), one text at a time.

``public_pac_scores``, PAC's ``attack.py`` and ``src/prob.py`` (github.com/yyy01/PAC), given the augmented
copies (the public code draws them from one global random stream).

``public_gradnorm_scores``, MIMIR's ``mimir/attacks/gradnorm.py``, one text at a time.

``public_samia_scores``, SaMIA's ``src/eval_samia.py`` (github.com/nlp-titech/samia), given the sampled
continuations: the public code decodes prompt and continuation together and cuts a nominal number of words.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

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
    model,
    tokenizer,
    texts: Sequence[str],
    nonmember_prefix: str,
    member_prefix: str,
    gamma: float,
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
def public_neighbor_scores(
    model, tokenizer, texts: Sequence[str], neighbors: Sequence[Sequence[str]]
) -> dict[str, list[float]]:
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


@torch.inference_mode()
def public_pac_scores(model, tokenizer, texts: Sequence[str], copies: Sequence[Sequence[str]]) -> list[float]:
    """PAC = PD(x) − mean PD(copies) (the public code's AUROC is on −PAC), PD from ``calculate_probs_others``."""
    device = next(model.parameters()).device

    def probs(text: str) -> list[float]:
        input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        probabilities = torch.nn.functional.log_softmax(model(input_ids, labels=input_ids)[1], dim=-1)
        return [probabilities[0, i, token_id].item() for i, token_id in enumerate(input_ids[0][1:])]

    def polarized_distance(prob_list: list[float], ratio_local: float = 0.3, ratio_far: float = 0.05) -> float:
        local_region_length = max(int(len(prob_list) * ratio_local), 1)
        far_region_length = max(int(len(prob_list) * ratio_far), 1)
        local_region = np.sort(prob_list)[:local_region_length]
        far_region = np.sort(prob_list)[::-1][:far_region_length]
        return np.mean(far_region) - np.mean(local_region)

    return [
        float(polarized_distance(probs(t)) - np.mean([polarized_distance(probs(c)) for c in listed]))
        for t, listed in zip(texts, copies)
    ]


def public_gradnorm_scores(model, tokenizer, texts: Sequence[str], p: float = np.inf) -> list[float]:
    """MIMIR's −mean over parameters of ‖grad‖_p of the mean NLL of the tokens after the first."""
    device = next(model.parameters()).device
    scores = []
    for text in texts:
        model.zero_grad()
        input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        log_probs = F.log_softmax(model(input_ids).logits[0, :-1], dim=-1)
        all_prob = log_probs.gather(dim=-1, index=input_ids[0][1:].unsqueeze(-1)).squeeze(-1)
        loss = -torch.mean(all_prob)
        loss.backward()
        grad_norms = [param.grad.detach().norm(p) for param in model.parameters() if param.grad is not None]
        scores.append(-torch.stack(grad_norms).mean().item())
        model.zero_grad()
    return scores


def public_samia_scores(texts: Sequence[str], outputs: Sequence[Sequence[str]], use_zlib: bool) -> list[float]:
    """Mean over samples of ROUGE-1 recall (times the sample's zlib size with ``use_zlib``); ``outputs``
    are prompt and continuation decoded together, as ``sampling.py`` saves them; ``text_length`` is
    taken as the text's word count."""

    def get_suffix(text: str, prefix_ratio: float, text_length: int) -> list:
        words = [word for word in text.split(" ") if word != ""]
        return words[round(text_length * prefix_ratio) :]

    def rouge_n(candidate: list, reference: list, n: int = 1) -> float:
        if not candidate or not reference:
            return 0
        overlap = Counter(zip(*[reference[i:] for i in range(n)])) & Counter(zip(*[candidate[i:] for i in range(n)]))
        return sum(overlap.values()) / len(reference)

    scores = []
    for text, samples in zip(texts, outputs):
        text_length = len(text.split())
        suffix_ref = get_suffix(text, 0.5, text_length)
        rouge_scores = []
        for output in samples:
            suffix_cand = get_suffix(output, 0.5, text_length)
            weight = len(zlib.compress(" ".join(suffix_cand).encode("utf-8"))) if use_zlib else 1
            rouge_scores.append(rouge_n(suffix_cand, suffix_ref, n=1) * weight)
        scores.append(float(np.mean(rouge_scores)))
    return scores
