"""Plain-loop reference implementations used to check the vectorised code (test helper)."""

from __future__ import annotations

import itertools
import math

import torch


def loop_token_spans(alphas: torch.Tensor, num_tokens: torch.Tensor, min_weight: float) -> tuple[list, list]:
    """Token start/end positions (encoder frames, continuous) walking frame by frame (see decode/timestamps.py).

    alphas [B, T], num_tokens [B] -> per utterance: list of starts, list of ends.
    """
    all_starts, all_ends = [], []
    for b in range(alphas.shape[0]):
        count = int(num_tokens[b])
        begins, fires = [None] * count, [None] * count
        first, last = [None] * count, [None] * count
        running, last_positive = 0.0, -1
        for t in range(alphas.shape[1]):
            alpha = float(alphas[b, t])
            before, running = running, running + alpha
            if alpha > 0:
                last_positive = t
            for k in range(count):
                if begins[k] is None and running > k:
                    begins[k] = t + (k - before) / alpha
                if fires[k] is None and running >= k + 1:
                    fires[k] = t + (k + 1 - before) / alpha
                weight = min(running, k + 1) - max(before, k)  # this frame's share of token k
                if weight > 0 and weight >= min_weight:
                    first[k] = t if first[k] is None else first[k]
                    last[k] = t
        starts, ends = [], []
        for k in range(count):
            fire = fires[k] if fires[k] is not None else last_positive + 1
            begin = begins[k] if begins[k] is not None else float(alphas.shape[1])
            if last[k] is None:
                starts.append(begin)
                ends.append(fire)
            else:
                starts.append(max(begin, first[k]))
                ends.append(min(fire, last[k] + 1))
        all_starts.append(starts)
        all_ends.append(ends)
    return all_starts, all_ends


def loop_edit_table(reference, hypothesis) -> list[list[int]]:
    """The Levenshtein table, one cell at a time (substitution, insertion, deletion cost 1)."""
    rows, cols = len(reference), len(hypothesis)
    cost = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        for j in range(cols + 1):
            if i == 0 or j == 0:
                cost[i][j] = i + j
            else:
                cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1,
                                 cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]))
    return cost


def loop_matched_pairs(reference, hypothesis) -> list[tuple[int, int]]:
    """Matched pairs of one minimum-edit alignment, ties: match, substitution, deletion, insertion."""
    cost = loop_edit_table(reference, hypothesis)
    pairs, i, j = [], len(reference), len(hypothesis)
    while i > 0 and j > 0:
        same = reference[i - 1] == hypothesis[j - 1]
        if cost[i][j] == cost[i - 1][j - 1] + (not same):
            if same:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def loop_speech_runs(profile_db, threshold_db, reach_frames, min_pause_frames, min_speech_frames, smooth_frames=3,
                     digital_silence_db=-80.0):
    """Speech runs of a dB profile, frame by frame: each frame's value smoothed as the mean of the frames above
    ``digital_silence_db`` among the ``smooth_frames`` centred on it; its floor the larger of the smallest smoothed
    value among the ``reach_frames`` ending at it and the smallest among the ``reach_frames`` starting at it; a
    frame above digital silence is speech above floor + threshold, runs closer than ``min_pause_frames`` are
    joined, shorter joined runs dropped. -> [(first, end)]."""
    values = [float(v) for v in profile_db]
    half = smooth_frames // 2
    smoothed = []
    for index in range(len(values)):
        near = [v for v in values[max(0, index - half):index + half + 1] if v > digital_silence_db]
        smoothed.append(sum(near) / len(near) if near else math.inf)
    speech = []
    for index, value in enumerate(values):
        before = min(smoothed[max(0, index - reach_frames + 1):index + 1])
        after = min(smoothed[index:index + reach_frames])
        speech.append(value > digital_silence_db and value > max(before, after) + threshold_db)
    runs = []
    for index, is_speech in enumerate(speech):
        if not is_speech:
            continue
        if runs and index - runs[-1][1] < min_pause_frames:
            runs[-1][1] = index + 1
        elif runs and runs[-1][1] == index:
            runs[-1][1] = index + 1
        else:
            runs.append([index, index + 1])
    return [(first, end) for first, end in runs if end - first >= min_speech_frames]


def loop_extended_ends(starts: list[float], ends: list[float], speech: list[bool], hop_ms: float, window_ms: float,
                       duration_ms: float) -> list[float]:
    """One utterance's token ends walked frame by frame (decode/timestamps.py, extend_ends_through_speech): from
    the input frame at each end, step on while the frames are speech; the end of the last speech frame, capped by
    the next token's start (the last token: the duration), becomes the end when it is later."""
    out = []
    for k, end in enumerate(ends):
        frame = min(max(int((end - window_ms / 2) // hop_ms), 0), len(speech) - 1)
        if not speech[frame]:
            out.append(end)
            continue
        while frame + 1 < len(speech) and speech[frame + 1]:
            frame += 1
        run_end = (frame + 0.5) * hop_ms + window_ms / 2
        limit = starts[k + 1] if k + 1 < len(starts) else duration_ms
        out.append(max(end, min(run_end, limit)))
    return out


def loop_greedy_frame_tokens(log_probs: torch.Tensor, length: int, blank: int) -> list[int]:
    """The greedy CTC path merged, frame by frame, for one utterance: log_probs [T, V] (``length`` valid frames) ->
    the index of the token each frame belongs to, -1 for blank and padding frames."""
    out, count, previous = [], -1, blank
    for t in range(log_probs.shape[0]):
        label = int(log_probs[t].argmax()) if t < length else blank
        if label != blank and label != previous:
            count += 1
        out.append(count if label != blank else -1)
        previous = label
    return out


def loop_ctc_log_likelihood(log_probs: torch.Tensor, tokens: list[int], blank: int) -> float:
    """The CTC forward algorithm written out for one sequence: log_probs [T, V] -> log P(tokens), -inf when no
    alignment exists (a blank among the tokens included)."""
    if blank in tokens:
        return float("-inf")
    labels = [blank]
    for token in tokens:
        labels += [token, blank]
    alpha = [float("-inf")] * len(labels)
    alpha[0] = float(log_probs[0, blank])
    if len(labels) > 1:
        alpha[1] = float(log_probs[0, labels[1]])
    for t in range(1, log_probs.shape[0]):
        previous = alpha
        alpha = []
        for s, label in enumerate(labels):
            terms = [previous[s]] + ([previous[s - 1]] if s >= 1 else [])
            if s >= 2 and label != blank and label != labels[s - 2]:
                terms.append(previous[s - 2])
            top = max(terms)
            total = top if top == float("-inf") else top + math.log(sum(math.exp(x - top) for x in terms))
            alpha.append(total + float(log_probs[t, label]))
    ends = alpha[-2:] if len(labels) > 1 else alpha[-1:]
    top = max(ends)
    return top if top == float("-inf") else top + math.log(sum(math.exp(x - top) for x in ends))


def loop_fsmn_memory(x: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """FsmnMemory token by token: x [B, N, D], mask [B, N], weight [D, k] -> x + sum_j weight[:, j] * x[n - k//2 + j]
    over valid neighbours, zero at padded tokens."""
    batch, length, _ = x.shape
    half = weight.shape[1] // 2
    out = torch.zeros_like(x)
    for b in range(batch):
        for n in range(length):
            if not mask[b, n]:
                continue
            out[b, n] = x[b, n]
            for j in range(weight.shape[1]):
                m = n - half + j
                if 0 <= m < length and mask[b, m]:
                    out[b, n] += weight[:, j] * x[b, m]
    return out


def exhaustive_ar_search(next_log_probs, max_length: int, eos_id: int, tokens: list[int],
                         length_penalty: float) -> list[tuple[float, list[int]]]:
    """Every hypothesis of an autoregressive model scored as its beam search scores it, best first: each sequence of
    0 .. ``max_length`` of ``tokens`` (the ids it may emit, eos apart), then eos; score = (sum of the
    ``next_log_probs(prefix) -> [V]`` of its tokens and of the eos) / (n + 1) ** ``length_penalty``, n its tokens.
    -> [(score, tokens)], the first best kept first among equal scores (shorter first, then in ``tokens`` order)."""
    scored = []
    for length in range(max_length + 1):
        for sequence in itertools.product(tokens, repeat=length):
            total = sum(float(next_log_probs(list(sequence[:k]))[token]) for k, token in enumerate(sequence))
            total += float(next_log_probs(list(sequence))[eos_id])
            scored.append((total / (length + 1) ** length_penalty, list(sequence)))
    return sorted(scored, key=lambda pair: -pair[0])


def loop_cif_autograd(hidden: torch.Tensor, alphas: torch.Tensor, num_tokens: torch.Tensor) -> list[torch.Tensor]:
    """paraformer_asr_tools/benchmarks/cif.py's ``loop_cif`` (integrate-and-fire one frame at a time, threshold 1)
    with every running sum kept as a tensor, so that autograd differentiates it in ``hidden`` and in ``alphas``
    (``loop_cif`` reads each alpha as a Python float: no gradient reaches the alphas).

    hidden [B, T, D], alphas [B, T], num_tokens [B] -> per utterance: its embeddings [n, D], n <= num_tokens[b]
    (a tail token is kept, divided by its mass, while fewer than num_tokens have fired).
    """
    out = []
    for b in range(hidden.shape[0]):
        wanted = int(num_tokens[b])
        embeddings = []
        acc = alphas.new_zeros(())  # the mass of the token being integrated
        current = hidden.new_zeros(hidden.shape[2])  # [D]
        for t in range(hidden.shape[1]):
            remaining = alphas[b, t]
            while len(embeddings) < wanted and bool(acc + remaining >= 1.0):
                part = 1.0 - acc
                embeddings.append(current + part * hidden[b, t])
                current, acc = torch.zeros_like(current), torch.zeros_like(acc)
                remaining = remaining - part
            if len(embeddings) < wanted:
                acc = acc + remaining
                current = current + remaining * hidden[b, t]
        if len(embeddings) < wanted and bool(acc > 0):
            embeddings.append(current / acc)
        out.append(torch.stack(embeddings) if embeddings else hidden.new_zeros(0, hidden.shape[2]))
    return out
