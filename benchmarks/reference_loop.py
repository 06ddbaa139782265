"""Replicas of public scoring loops, kept as parity and speed baselines. Not used by the engine.

``public_loop_scores``, the Min-K%++ ``run.py``: one text at a time, ``model(ids, labels=ids)``,
softmax and log_softmax over ``logits[0, :-1]``, ``int(len * ratio)`` tokens per k, numpy sort and
mean: exactly as the public code does it (including its NaN for texts too short for a k).

``public_gapk_scores``, Gap-K%'s ``wikimia.py`` (github.com/meaoww/gap-k), one text at a time as above.

``public_surp_scores``, SURP's ``attacks/surp.py`` (github.com/computationalprivacy/mia_llms_benchmark).

``public_conrecall_scores``, Con-ReCall's ``run.py`` (github.com/WangCheng0116/CON-RECALL):
``get_ll`` and ``get_conditional_ll``, one text at a time, and its ReCaLL and Con-ReCall formulas.

``public_neighbor_scores``, MIMIR's neighbourhood attack (github.com/iamgroot42/mimir,
``mimir/models.py`` ``get_ll`` and ``mimir/attacks/neighborhood.py``), one text at a time.

``public_pac_scores``, PAC's ``attack.py`` and ``src/prob.py`` (github.com/yyy01/PAC), given the augmented
copies (the public code draws them from one global random stream).

``public_gradnorm_scores``, MIMIR's ``mimir/attacks/gradnorm.py``, one text at a time.

``public_samia_scores``, SaMIA's ``src/eval_samia.py`` (github.com/nlp-titech/samia), given the sampled
continuations: the public code decodes prompt and continuation together and cuts a nominal number of words.

``public_ngram_coverage_scores``, the n-gram coverage attack (github.com/shallinan1/NGramCoverageAttack), given the
sampled continuations.

``public_ezmia_scores``, EZ-MIA (github.com/aidotse/LeakPro, PR #461), and ``public_wbc_scores``, WBC
(github.com/Nikkei/fast-mia, branch ``feature/WBC``): a target and a reference model sharing a tokenizer.

``public_fsd_scores``, FSD's deviations (github.com/ml-stat-Sustech/Fine-tuned-Score-Deviation), given the target
and its fine-tuned copy.

``public_camia_scores``, CAMIA (github.com/changhongyan123/context_aware_mia): its features of each text and of
the text repeated, and their p-values among known non-members.
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
    model, tokenizer, texts: Sequence[str], ks: Sequence[float], *, upcast_logits: bool = False
) -> dict[str, list[float]]:
    """Scores ``texts`` like the public code: columns loss, zlib, mink_k, minkpp_k (our naming).

    The logits are fp32, as transformers < 4.45 returned them whatever the model's dtype (its Llama upcast them
    in the forward; the public code ran on those): a bf16 or fp16 model's logits are upcast here, which changes
    nothing for an fp32 model. ``upcast_logits`` runs the statistics on fp64 copies of the same logits: an fp64
    ground truth of what the fp32 loop computes.
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
        logits = logits.float()
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
def public_gapk_scores(
    model, tokenizer, texts: Sequence[str], ks: Sequence[float], window: int = 3
) -> dict[str, list[float]]:
    """Gap-K%'s ``wikimia.py`` (github.com/meaoww/gap-k): one text at a time, fp32 softmax and log_softmax, the gap
    to the argmax's log-prob over sqrt(clamp(sigma, 1e-8)), ``window_lowmean`` at each k: columns ``gapk_{k}``."""

    def window_lowmean(x: np.ndarray, window: int, ratio: float) -> float:
        x = np.asarray(x, dtype=np.float64)
        if x.size == 0:
            return 0.0
        if x.size < window:
            smoothed = x
        else:
            kernel = np.ones(window, dtype=np.float64) / window
            smoothed = np.convolve(x, kernel, mode="valid")
        k = max(1, int(len(smoothed) * ratio))
        return float(np.mean(np.sort(smoothed)[:k]))

    device = next(model.parameters()).device
    scores: dict[str, list[float]] = {f"gapk_{float(k)!r}": [] for k in ks}
    for text in texts:
        input_ids_full = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        logits = model(input_ids_full, labels=input_ids_full)[1]
        logits_tv = logits[0, :-1].to(torch.float32)
        input_ids_shifted = input_ids_full[0, 1:].unsqueeze(-1)
        probs = F.softmax(logits_tv, dim=-1)
        log_probs = F.log_softmax(logits_tv, dim=-1)
        token_log_probs = log_probs.gather(dim=-1, index=input_ids_shifted).squeeze(-1)
        mu = (probs * log_probs).sum(-1)
        sigma = torch.clamp((probs * torch.square(log_probs)).sum(-1) - torch.square(mu), min=1e-8)
        top1_id = torch.argmax(logits_tv, dim=-1)
        top1_logp = log_probs.gather(dim=-1, index=top1_id.unsqueeze(-1)).squeeze(-1)
        gap_norm = ((token_log_probs - top1_logp) / sigma.sqrt()).cpu().numpy().astype(np.float64)
        for k in ks:
            scores[f"gapk_{float(k)!r}"].append(window_lowmean(gap_norm, window, k))
    return scores


@torch.inference_mode()
def public_surp_scores(
    model, tokenizer, texts: Sequence[str], k_percent: float = 20, max_entropy: float = 2.0
) -> list[float]:
    """SURP of the SoK benchmark (github.com/computationalprivacy/mia_llms_benchmark, ``attacks/surp.py``), one text
    at a time (its batches are right-padded and masked: the same per text)."""
    device = next(model.parameters()).device
    scores = []
    for text in texts:
        token_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0).to(device)
        shift_logits = model(token_ids).logits[..., :-1, :]
        shift_targets = token_ids[..., 1:]
        token_logp = -F.cross_entropy(
            shift_logits.contiguous().view(-1, shift_logits.shape[-1]),
            shift_targets.contiguous().view(-1),
            reduction="none",
        ).view_as(shift_targets)
        entropy = (-F.softmax(shift_logits, dim=2) * F.log_softmax(shift_logits, dim=2)).sum(dim=2)
        mink_len = int(k_percent / 100 * shift_targets.shape[1])
        mink_idx = torch.topk(token_logp[0], mink_len, largest=False).indices.cpu().numpy()
        entropy_idx = (entropy[0] < max_entropy).nonzero(as_tuple=True)[0].cpu().numpy()
        intersection = np.intersect1d(mink_idx, entropy_idx)
        scores.append(token_logp[0][intersection].mean().item())
    return np.nan_to_num(np.array(scores), nan=-100).tolist()


@torch.inference_mode()
def public_conrecall_scores(
    model,
    tokenizer,
    texts: Sequence[str],
    nonmember_prefix: str,
    member_prefix: str,
    gamma: float,
    *,
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
        logits = model(input_ids).logits.float()  # as transformers < 4.45 returned them; numpy has no bf16
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


def public_samia_scores(texts: Sequence[str], outputs: Sequence[Sequence[str]], *, use_zlib: bool) -> list[float]:
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


def public_ngram_coverage_scores(
    texts: Sequence[str],
    samples: Sequence[Sequence[str]],
    tokenizer,
    proportion_from_end: float = 0.5,
    min_ngram: int = 3,
    *,
    creativity: bool = False,
) -> list[float]:
    """The N-gram coverage attack (github.com/shallinan1/NGramCoverageAttack), given the sampled continuations:
    the suffix cut as ``generate.py``'s ``process_prompts`` (``--num_proportion_from_end``) and
    ``src/experiments/utils.py``'s ``remove_last_n_words`` do with the target's ``tokenizer``; each continuation's
    coverage from ``compute_ngram_coverage.py``'s ``find_exact_match`` and ``Hypothesis`` (its ``datasets`` filter
    over the one source document is the substring test), or, with ``creativity``, ``compute_creativity_index.py``'s
    ``compute_modified_creativity_index`` over n-grams 2 to 12 (``gen_length``); then the maximum over the
    continuations, as ``compute_roc_metrics.py``'s ``Max_*`` strategies."""
    from nltk.tokenize.casual import casual_tokenize
    from sacremoses import MosesDetokenizer
    from unidecode import unidecode

    md = MosesDetokenizer(lang="en")

    def remove_last_n_words(sentence, n):
        tokenized = tokenizer(sentence, return_offsets_mapping=True, add_special_tokens=False)
        word_boundaries = []
        in_whitespace = False
        for i in range(len(sentence)):
            is_whitespace = sentence[i] in [" ", "\n", "\r", "\t"]
            if in_whitespace and not is_whitespace:
                word_boundaries.append(i)
            in_whitespace = is_whitespace
        if not (sentence and sentence[0] in [" ", "\n", "\r", "\t"]):
            word_boundaries.insert(0, 0)
        n = min(n, len(word_boundaries) - 1)
        last_words_start = word_boundaries[-n] if n > 0 else len(sentence)
        split_index = 0
        for i, (_start, end) in enumerate(tokenized["offset_mapping"]):
            if end <= last_words_start:
                split_index = i + 1
        return tokenizer.decode(tokenized["input_ids"][:split_index]), tokenizer.decode(
            tokenized["input_ids"][split_index:]
        )

    def find_exact_match(tokens, source):
        spans = []  # (start_index, end_index) of the Hypothesis' spans
        first_pointer, second_pointer = 0, min_ngram
        while second_pointer <= len(tokens):
            span_text = md.detokenize(tokens[first_pointer:second_pointer])
            if span_text in source:
                matched_span = (first_pointer, second_pointer)
                if not spans:
                    spans.append(matched_span)
                else:
                    last_span = spans[-1]
                    if matched_span[0] <= last_span[0] and last_span[1] <= matched_span[1]:
                        spans = spans[:-1] + [matched_span]
                    else:
                        spans.append(matched_span)
                second_pointer += 1
            else:
                if second_pointer - first_pointer > min_ngram:
                    first_pointer += 1
                elif second_pointer - first_pointer == min_ngram:
                    first_pointer += 1
                    second_pointer += 1
                else:
                    raise ValueError
        return spans

    def get_ngram_coverage(text, spans, min_gram):
        tokens = casual_tokenize(unidecode(text))
        flags = [False for _ in tokens]
        for start, end in spans:
            span_length = end - start
            if span_length >= min_gram:
                flags[start:end] = [True] * span_length
        if len([f for f in flags if f]) == 0:
            return 0
        return len([f for f in flags if f]) / len(flags)

    scores = []
    for text, generations in zip(texts, samples):
        text_length = len(text.split())
        remove_length = max(1, min(int(text_length * proportion_from_end), text_length - 1))
        _, snippet_no_prompt = remove_last_n_words(text, remove_length)
        source = unidecode(snippet_no_prompt)
        values = []
        for generation in generations:
            tokens = casual_tokenize(unidecode(generation))
            spans = [] if len(tokens) < min_ngram else find_exact_match(tokens, source)
            if creativity:
                values.append(sum(get_ngram_coverage(generation, spans, n) for n in range(2, 13)))
            else:
                values.append(get_ngram_coverage(generation, spans, 1))
        scores.append(float(np.max(values)))
    return scores


@torch.inference_mode()
def public_ezmia_scores(target_model, reference_model, tokenizer, texts: Sequence[str]) -> list[float]:
    """EZ-MIA as LeakPro computes it (github.com/aidotse/LeakPro, PR #461): ``CausalLMModel.token_evidence`` of
    ``leakpro/signals/token_evidence.py`` one sequence at a time (both models fed the same ids), the right-padded
    evidence of ``TokenEvidence.concatenate``, then ``AttackEZMIA.run_attack``, ``ez_scores`` (default
    ``aggregation="ratio"``) and ``rank_top`` of ``leakpro/attacks/mia_attacks/llm/ez_mia.py`` and
    ``abstract_llm_mia.py``."""

    def token_evidence(model, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        input_ids = torch.tensor([ids])
        out = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        logits = out.logits if hasattr(out, "logits") else out
        logits = logits[:, :-1, :].float()
        targets = input_ids[:, 1:]
        logp = F.log_softmax(logits, dim=-1)
        logprob = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        argmax = logits.argmax(dim=-1)
        return logprob[0].numpy().astype(np.float32), argmax[0].numpy(), targets[0].numpy()

    def padded(rows: list[np.ndarray], *, fill, dtype) -> np.ndarray:
        out = np.full((len(rows), max(len(r) for r in rows)), fill, dtype=dtype)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    def rank_top(scores: np.ndarray, force_top: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        forced = np.asarray(force_top, dtype=bool) | np.isposinf(scores)
        bottom = np.isneginf(scores) & ~forced
        if np.isnan(scores[~forced]).any():
            raise ValueError("rank_top: nan score in a row that is not forced to the top")
        out = scores.copy()
        ordinary = out[~forced & ~bottom]
        if bottom.any():
            out[bottom] = (ordinary.min() if ordinary.size else 0.0) - 1.0
        if not forced.any():
            return out
        base = out[~forced].max() if (~forced).any() else 0.0
        tb = np.asarray(tiebreak, dtype=np.float64)[forced]
        tb = np.where(np.isfinite(tb), tb, 0.0)
        _, inverse = np.unique(tb, return_inverse=True)
        n_unique = inverse.max() + 1 if inverse.size else 0
        ranks = (inverse + 1) / n_unique if n_unique else inverse.astype(np.float64)
        out[forced] = base + 1.0 + ranks
        return out

    ids = [tokenizer(text)["input_ids"] for text in texts]
    target = [token_evidence(target_model, i) for i in ids]
    reference = [token_evidence(reference_model, i) for i in ids]
    target_logprob = padded([t[0] for t in target], fill=0.0, dtype=np.float32)
    target_argmax = padded([t[1] for t in target], fill=-1, dtype=np.int64)
    target_ids = padded([t[2] for t in target], fill=-1, dtype=np.int64)
    mask = padded([np.ones(len(t[0]), bool) for t in target], fill=False, dtype=bool)
    reference_logprob = padded([r[0] for r in reference], fill=0.0, dtype=np.float32)

    delta = target_logprob - reference_logprob
    error = (target_argmax != target_ids) & mask
    sel = np.where(error, delta, 0.0)
    P = np.clip(sel, 0.0, None).sum(axis=1)  # noqa: N806
    N = np.abs(np.clip(sel, None, 0.0)).sum(axis=1)  # noqa: N806
    n_err = error.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = P / N
    force_top = (N == 0) | (n_err == 0)
    return rank_top(raw, force_top=force_top, tiebreak=P).tolist()


@torch.inference_mode()
def public_wbc_scores(
    target_model, reference_model, tokenizer, texts: Sequence[str], window_sizes: Sequence[int] = (1, 5, 10, 20)
) -> list[float]:
    """WBC as Nikkei's fast-mia computes it (github.com/Nikkei/fast-mia, branch ``feature/WBC``, ``src/methods/wbc.py``
    ``WBCMethod.run`` and ``_compute_window_score``), one text at a time; the log-prob of each prompt token after the
    first (``BaseMethod._extract_token_log_probs`` of vLLM's prompt log-probs) from the model's fp32 log_softmax."""

    def token_log_probs(model, text: str) -> list[float]:
        input_ids = torch.tensor(tokenizer.encode(text)).unsqueeze(0)
        log_probs = F.log_softmax(model(input_ids).logits[0, :-1].float(), dim=-1)
        return log_probs.gather(dim=-1, index=input_ids[0][1:].unsqueeze(-1)).squeeze(-1).tolist()

    def compute_window_score(target_losses: np.ndarray, ref_losses: np.ndarray, window_size: int) -> float:
        min_length = min(len(target_losses), len(ref_losses))
        if min_length == 0:
            return 0.0
        effective_window_size = min(window_size, min_length)
        target_trimmed = target_losses[:min_length]
        ref_trimmed = ref_losses[:min_length]
        kernel = np.ones(effective_window_size)
        target_sums = np.convolve(target_trimmed, kernel, mode="valid")
        ref_sums = np.convolve(ref_trimmed, kernel, mode="valid")
        return float(np.mean(ref_sums > target_sums))

    scores = []
    for text in texts:
        target_losses = -np.array(token_log_probs(target_model, text))
        ref_losses = -np.array(token_log_probs(reference_model, text))
        window_scores = [compute_window_score(target_losses, ref_losses, w) for w in window_sizes]
        scores.append(float(np.mean(window_scores)) if window_scores else 0.0)
    return scores


def public_fsd_scores(model, finetuned, tokenizer, texts: Sequence[str], ratio: float = 0.2) -> dict[str, list[float]]:
    """FSD's ``eval.py`` (github.com/ml-stat-Sustech/Fine-tuned-Score-Deviation), given the target ``model`` and the
    ``finetuned`` one: ``inference`` (``calculatePerplexity`` on the text and on its lowercase copy) one text at a time
    under each model, then, per metric, the fine-tuned model's value minus the target's, as ``eval`` keeps it. Its
    metrics are oriented lower = member: ``ppl``, ``ppl/lowercase_ppl``, ``ppl/zlib``, ``Min_20.0% Prob``. One
    addition: ``loss``, the deviation of ``calculatePerplexity``'s loss (its third value, which ``inference`` computes
    and drops), FSD over the log-perplexity."""

    def calculate_perplexity(sentence, model, tokenizer, gpu):
        input_ids = torch.tensor(tokenizer.encode(sentence)).unsqueeze(0)
        input_ids = input_ids.to(gpu)
        with torch.no_grad():
            outputs = model(input_ids, labels=input_ids)
        loss, logits = outputs[:2]
        probabilities = torch.nn.functional.log_softmax(logits, dim=-1)
        all_prob = []
        input_ids_processed = input_ids[0][1:]
        for i, token_id in enumerate(input_ids_processed):
            probability = probabilities[0, i, token_id].item()
            all_prob.append(probability)
        return torch.exp(loss).item(), all_prob, loss.item()

    def inference(model, tokenizer, sentence):
        pred = {}
        p1, all_prob, p1_likelihood = calculate_perplexity(sentence, model, tokenizer, gpu=model.device)
        p_lower, _, p_lower_likelihood = calculate_perplexity(sentence.lower(), model, tokenizer, gpu=model.device)
        pred["ppl"] = p1
        pred["ppl/lowercase_ppl"] = -(np.log(p_lower) / np.log(p1)).item()
        zlib_entropy = len(zlib.compress(bytes(sentence, "utf-8")))
        pred["ppl/zlib"] = np.log(p1) / zlib_entropy
        k_length = int(len(all_prob) * ratio)
        topk_prob = np.sort(all_prob)[:k_length]
        pred[f"Min_{ratio * 100}% Prob"] = -np.mean(topk_prob).item()
        pred["loss"] = p1_likelihood
        return pred

    output_all = [inference(model, tokenizer, text) for text in texts]
    output_pretrained = [inference(finetuned, tokenizer, text) for text in texts]
    assert len(output_all) == len(output_pretrained), "The length of the two lists must be equal"
    return {
        metric: [float(output_pretrained[i][metric] - output_all[i][metric]) for i in range(len(output_all))]
        for metric in output_all[0]
    }


@torch.inference_mode()
def public_camia_scores(
    model,
    tokenizer,
    texts: Sequence[str],
    nonmembers: Sequence[str],
    signs: dict[str, int],
    *,
    prepend_start: bool = False,
) -> dict[str, np.ndarray]:
    """CAMIA's default path (github.com/changhongyan123/context_aware_mia): the two passes of
    ``run_ours_construct_mia_data.py`` (``get_probability_history``, ``num_repeatitions = 5``) through
    ``mimir/models_without_debugging.py``'s ``get_probabilities_with_tokens``, one text at a time; the copies of
    ``util_features.py``'s ``load_data_from_model_history``; its ``collect_all_features`` on the text and on each
    copy; the feature set of ``run_ours_train_lr.py`` (``find_t`` filtered out; ``overall_diff_1_``/``_2_``;
    slope and approximate entropy of the repeated pass; ``count_above_pre``) and its "Average":
    ``percentileofscore(non-members, value) / 100`` per feature, then ``-mean``.

    Returns ``camia`` and every feature (the public code's names, ``{group}_{row}``) of ``texts``, each an array.
    Where the public code reads labels, this takes what it cannot know: ``signs`` (a group name without its
    ``overall_diff_`` prefix to +1, or -1 to negate it), in place of the flip of each group whose member mean is
    above its non-member mean, and, since the members are not known, no members-only retry of the copy search.
    ``prepend_start`` puts the model's start token before each text's ids, as a tokenizer that adds one does.
    """
    import scipy.stats

    device = next(model.parameters()).device
    max_length = getattr(model.config, "max_position_embeddings", None) or 1024
    stride = max_length // 2
    start_token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id

    def get_probabilities_with_tokens(text):
        labels = tokenizer(text, return_tensors="pt").input_ids
        if prepend_start:
            labels = torch.cat([torch.tensor([[start_token]]), labels], dim=1)
        target_token_log_prob = []
        for i in range(0, labels.size(1), stride):
            begin_loc = max(i + stride - max_length, 0)
            end_loc = min(i + stride, labels.size(1))
            trg_len = end_loc - i
            input_ids = labels[:, begin_loc:end_loc].to(device)
            target_ids = input_ids.clone()
            target_ids[:, :-trg_len] = -100
            logits = model(input_ids, labels=target_ids).logits.cpu()
            shift_logits = logits[..., :-1, :].contiguous()
            log_probabilities = torch.nn.functional.log_softmax(shift_logits, dim=-1)
            labels_processed = target_ids[..., 1:].cpu().contiguous()[0]
            for j, token_id in enumerate(labels_processed):
                if token_id != -100:
                    target_token_log_prob.append(log_probabilities[0, j, token_id].item())
        assert len(target_token_log_prob) == labels.size(1) - 1
        return target_token_log_prob, labels

    def find_sublist_indices(a, b):
        a, b = np.array(a), np.array(b)
        len_a, len_b = len(a), len(b)
        indices = []
        while len(indices) <= 1:
            for i in range(len_a - len_b + 1):
                if np.mean(a[i : i + len_b] == b) == 1:
                    indices.append(i)
            b = b[1:]
            len_b = len(b)
        return indices

    def lempel_ziv_complexity(x, bins):
        x = np.asarray(x)
        bins_edges = np.linspace(min(x), 0, 100)
        x = np.digitize(x, bins=bins_edges, right=True)
        bins = np.linspace(np.min(x), np.max(x), bins + 1)[1:]
        sequence = np.searchsorted(bins, x, side="left")
        sub_strings = set()
        n = len(sequence)
        ind, inc = 0, 1
        while ind + inc <= n:
            sub_str = tuple(sequence[ind : ind + inc])
            if sub_str in sub_strings:
                inc += 1
            else:
                sub_strings.add(sub_str)
                ind += inc
                inc = 1
        return len(sub_strings) / n

    def approximate_entropy(x, m, r):
        x = np.asarray(x)
        N = x.size
        r *= np.std(x)
        if N <= m + 1:
            return 0

        def _phi(m):
            x_re = np.array([x[i : i + m] for i in range(N - m + 1)])
            C = np.sum(np.max(np.abs(x_re[:, np.newaxis] - x_re[np.newaxis, :]), axis=2) <= r, axis=0) / (N - m + 1)
            return np.sum(np.log(C)) / (N - m + 1.0)

        return np.abs(_phi(m) - _phi(m + 1))

    def find_t(probabilities, tau, alpha):
        T = len(probabilities)
        all_alpha = np.mean(np.array(probabilities) > tau)
        return np.where(np.cumsum(np.array(probabilities[::-1]) > tau) / T > alpha * all_alpha)[0][0]

    def get_loss(x, start_time=0, end_time=-1):
        return np.array([np.mean(x[i][start_time:end_time]) for i in range(len(x))])

    def get_ppl(x, start_time=0, end_time=-1):
        return np.array([np.exp(-(np.mean(x[i][start_time:end_time]))) for i in range(len(x))])

    def get_count_above(x, threshold, start_time=0, end_time=-1):
        return np.array([np.mean(np.array(x[i][start_time:end_time]) >= threshold) for i in range(len(x))])

    def count_above_mean(x):
        m = np.mean(x)
        return np.where(x > m)[0].size

    def get_count_mean(x, start_time=0, end_time=-1):
        return np.array([count_above_mean(x[i][start_time:end_time]) for i in range(len(x))])

    def get_lz_complexity(x, bins, start_time=0, end_time=200):
        return np.array([lempel_ziv_complexity(x[i][start_time:end_time], bins) for i in range(len(x))])

    def get_token_diversity(labels, start_time=0, end_time=-1):
        return np.array(
            [len(set(labels[i][start_time:end_time])) / len(labels[i][start_time:end_time]) for i in range(len(labels))]
        )

    def get_slope(x, start_time=0, end_time=-1):
        return np.array(
            [np.polyfit(range(len(x[i][start_time:end_time])), x[i][start_time:end_time], 1)[0] for i in range(len(x))]
        )

    def collect_all_features(x, labels):
        loss_features = np.array([get_loss(x, start_time=0, end_time=end_time) for end_time in [-1, 200, 300]])
        ppl_features = np.array([get_ppl(x, start_time=0, end_time=end_time) for end_time in [-1, 200, 300]])
        count_above_features = np.array(
            [get_count_above(x, threshold, start_time=0, end_time=200) for threshold in [-1, -2, -3]]
        )
        lz_complexity_features = np.array([get_lz_complexity(x, bins) for bins in [3, 4, 5]])
        find_t_features = np.array(
            [[find_t(x[i], tau, beta) for i in range(len(x))] for tau in [-1] for beta in [0.4, 0.5, 0.6]]
        )
        token_diversity_features = np.array(
            [get_token_diversity(labels, start_time=0, end_time=end_time) for end_time in [-1, 200, 300]]
        )
        count_mean_features = np.array(
            [get_count_mean(x, start_time=0, end_time=end_time) for end_time in [-1, 200, 300]]
        )
        return {
            "loss": loss_features,
            "ppl": ppl_features,
            "count_above": count_above_features,
            "lz_complexity": lz_complexity_features,
            "find_t": find_t_features,
            "token_diversity": token_diversity_features,
            "count_mean": count_mean_features,
            "calibrated_loss": loss_features / token_diversity_features,
            "calibrated_ppl": ppl_features / token_diversity_features,
        }

    # get_probability_history: the text, then the text and five copies of it, each after a space.
    num_repeatitions = 5
    all_texts = list(nonmembers) + list(texts)
    x_all, label_all, x_copied_all, all_preds_copies = [], [], [], []
    for substr in all_texts:
        tk_probs, labels = get_probabilities_with_tokens(substr)
        all_str = substr
        for _ in range(num_repeatitions):
            all_str = all_str + " " + substr
        tk_probs_repeated, labels_repeated = get_probabilities_with_tokens(all_str)
        # load_data_from_model_history
        x_all.append(tk_probs)
        label_all.append(labels[0].numpy())
        target_labels = labels.numpy()[0][2:]
        length = len(target_labels)
        all_si = find_sublist_indices(labels_repeated[0].numpy(), target_labels)
        x_copied_all.append(np.array([tk_probs_repeated[si - 1 : si + length - 1] for si in all_si[:-2]]))
        all_preds_copies.append(tk_probs_repeated)
    num_sample = len(all_texts)

    # run_ours_train_lr.py
    extracted_features_raw_single = collect_all_features(x_all, label_all)
    extracted_features_copied = [
        collect_all_features([x_copied_all[j][i] for j in range(num_sample)], label_all)
        for i in range(min(len(x_copied_all[0]), 9))
    ]
    m, r = 8, 0.8
    x_approximate_entropy = np.array(
        [
            np.array([approximate_entropy(all_preds_copies[idx][:cut_off], m, r) for idx in range(num_sample)])
            for cut_off in [600, 800, 1000]
        ]
    )
    x_slope_signal = np.array([get_slope(all_preds_copies, end_time=end_time).T for end_time in [600, 800, 1000]]).T
    extracted_features_single = {}
    for keys in extracted_features_copied[0]:
        if keys in ["find_t"]:
            continue
        extracted_features_single[keys] = extracted_features_raw_single[keys]
        if keys not in ["token_diversity"]:
            extracted_features_single[f"overall_diff_1_{keys}"] = (
                extracted_features_copied[0][keys] - extracted_features_copied[1][keys]
            )
            extracted_features_single[f"overall_diff_2_{keys}"] = (
                extracted_features_copied[0][keys] - extracted_features_copied[2][keys]
            )
    extracted_features_single["slope"] = x_slope_signal.T
    extracted_features_single["approximate_entropy"] = x_approximate_entropy
    signals = []
    for cut_off in [1000000000, 200, 300]:
        x_pre_mean = [
            [np.mean(x_all[sample_idx][:t]) for t in range(1, min(cut_off, len(x_all[sample_idx])))]
            for sample_idx in range(num_sample)
        ]
        x_cur = [
            [x_all[sample_idx][t] for t in range(1, min(cut_off, len(x_all[sample_idx])))]
            for sample_idx in range(num_sample)
        ]
        signals.append(np.array([np.mean(np.array(x) > np.array(x_pre)) for x, x_pre in zip(x_cur, x_pre_mean)]))
    extracted_features_single["count_above_pre"] = np.array(signals)

    raw = {
        f"{keys}_{j}": values[j][len(nonmembers) :]
        for keys, values in extracted_features_single.items()
        for j in range(3)
    }
    for keys in extracted_features_single:
        sign = signs[keys.removeprefix("overall_diff_1_").removeprefix("overall_diff_2_")]
        extracted_features_single[keys] = sign * extracted_features_single[keys]

    pop_idx = np.arange(len(nonmembers))
    target_idx = np.arange(len(nonmembers), num_sample)
    p_value_list = []
    for keys in extracted_features_single:
        target_test = extracted_features_single[keys].T[target_idx]
        pop_signal = extracted_features_single[keys].T[pop_idx]
        for j in range(pop_signal.shape[1]):
            p_value_list.append(scipy.stats.percentileofscore(pop_signal[:, j], target_test[:, j]) / 100)
    p_values = np.array(p_value_list)
    return {"camia": -p_values.mean(axis=0), **raw}
