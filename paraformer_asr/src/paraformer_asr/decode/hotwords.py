"""Hotwords: decode-time biasing toward listed phrases (names, terms), through a trie over the model's own units.

A hotword list holds one phrase per line, ``phrase<TAB>weight`` or ``phrase`` alone (the default weight); blank
lines and lines starting with ``#`` are skipped (:func:`parse_hotwords`, :func:`read_hotwords`). Each phrase is split
into the checkpoint's units by its tokenizer, as ``Tokenizer.encode`` splits it (characters, or BPE / unigram pieces:
a phrase is encoded on its own, as a word after a space is), and the phrases make a trie (:class:`HotwordTrie`).

Biasing (WeNet's context graph, without failure arcs). A hypothesis sits in a trie node: its partial match. A unit
that advances the match earns the bonus of the node it reaches, the largest weight of the phrases through that node.
A unit that breaks the match gives back everything earned since the last phrase it kept, then starts a new match
from the root (with that unit, when a phrase starts with it). A completed phrase is kept when a word boundary follows
it: a unit that starts a new word (a ``▁`` piece, the space character), the end of the hypothesis (the
autoregressive model's eos, the Paraformer's last position), or any special id; a unit that goes on within the same
word ('statin' + 'on') breaks it like any partial match, unless it advances a longer phrase. So a finished
hypothesis holds exactly the bonuses of the phrases it wrote as whole words: a partial match helps a phrase survive
the beam, and neither it nor a listed word inside a longer one can be farmed.

The model's word on it (``margin``, optional). With a margin m a unit earns its bonus only where the model itself
finds it plausible: its log-prob at that step (the Paraformer's posterior at that position, the autoregressive
decoder's next-token distribution) within m of the step's best. An implausible unit acts as a break that starts no
new match: it gives back what is pending (a completed phrase before a boundary is still kept) and leaves the
hypothesis at the root. So a bonus can tip a close call toward a listed phrase but cannot put a listed phrase where
the acoustics and the decoder clearly say something else, nor keep the autoregressive search writing listed phrases
past the end of the speech. No margin: every unit may earn (WeNet's context graph as it is).

Dense tensors (S nodes, V units; node 0 is the root), so that a search step scores every beam x unit with gathers:

    next_node [S, V] long   the node unit u leads to from node s (a broken match: the root's row)
    parent [S] long         each node's parent (-1 for the root)
    unit_bonus [S] float    what reaching the node by advancing a match earns (0 at the root)
    pending [S] float       what a hypothesis in the node earned since the last phrase it kept (at a phrase end, the
                            phrase's bonus too: it is kept only when a word boundary follows)
    is_end [S] bool         a phrase ends at the node
    boundary [V] bool       the units that keep a completed phrase before them: they start a word or end the text

A completed phrase with no longer phrase through it is a node without children: its row is the root's, and what it
holds is kept or given back by the next unit. Memory: S x V x 8 bytes for ``next_node`` (1000 phrases of 8 characters
over 60 units: under 4 MB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import torch

from paraformer_asr.data.tokenizer import Tokenizer, begins_word
from paraformer_asr.errors import ConfigError

DEFAULT_HOTWORD_WEIGHT = 2.0  # bonus per unit of a listed phrase (a starting point, not a tuned value)
DEFAULT_HOTWORD_MARGIN = None  # a unit earns only within this many log-prob units of the step's best (None: always)


@dataclass(frozen=True)
class Hotword:
    """One listed phrase (whitespace runs made single spaces) and its bonus per unit; ``where`` names its line for
    error messages (not part of equality, so equal lists compare equal wherever they come from)."""

    phrase: str
    weight: float
    where: str = field(default="", compare=False)


def parse_hotwords(lines: Iterable[str], default_weight: float, source: str) -> tuple[Hotword, ...]:
    """Lines of a hotword list -> its entries in order. ``phrase<TAB>weight`` or ``phrase`` (``default_weight``);
    blank lines and ``#`` comments are skipped. ConfigError naming ``source`` and the line for a weight that is not a
    finite number > 0, or a tab with no phrase before it."""
    _check_weight(default_weight, f"{source}: the default hotword weight")
    entries = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}, line {number}"
        phrase, tab, weight_text = line.partition("\t")
        phrase = " ".join(phrase.split())
        if not phrase:
            raise ConfigError(f"{where}: no phrase before the tab ({line.strip()!r})")
        weight = default_weight
        if tab:
            try:
                weight = float(weight_text)
            except ValueError:
                raise ConfigError(f"{where}: the weight after the tab must be a number, got {weight_text.strip()!r} "
                                  f"(phrase<TAB>weight)") from None
            _check_weight(weight, f"{where}: the weight of {phrase!r}")
        entries.append(Hotword(phrase, weight, where))
    return tuple(entries)


def read_hotwords(path: str | Path, default_weight: float) -> tuple[Hotword, ...]:
    """A UTF-8 hotword file -> its entries (:func:`parse_hotwords`); ConfigError naming the file when it cannot be
    read, or its line for a bad entry."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read the hotword file {path}: {err} (one phrase per line, "
                          f"phrase<TAB>weight for a weight of its own)") from None
    return parse_hotwords(text.splitlines(), default_weight, f"hotword file {path}")


def merge_hotwords(*lists: Sequence[Hotword]) -> tuple[Hotword, ...]:
    """Entries of several lists, a phrase listed again taking its later weight; first-seen order."""
    merged: dict[str, Hotword] = {}
    for entries in lists:
        for entry in entries:
            merged[entry.phrase] = entry
    return tuple(merged.values())


def _check_weight(weight: float, what: str) -> None:
    if not (isinstance(weight, (int, float)) and weight > 0 and weight != float("inf")):
        raise ConfigError(f"{what} must be a finite number > 0, got {weight!r}")


class HotwordTrie:
    """The phrases of a hotword list as a trie over unit ids, in dense tensors (module docstring). Build it with
    :meth:`build` (phrases through a tokenizer) or :meth:`from_units` (unit ids directly). ``entries`` are the
    Hotword entries it was built from (equal lists, equal ``entries``)."""

    def __init__(self, next_node: torch.Tensor, parent: torch.Tensor, unit_bonus: torch.Tensor,
                 pending: torch.Tensor, is_end: torch.Tensor, boundary: torch.Tensor, entries: tuple[Hotword, ...] = (),
                 margin: float | None = None):
        self.next_node = next_node  # [S, V] long
        self.parent = parent  # [S] long
        self.unit_bonus = unit_bonus  # [S] float32
        self.pending = pending  # [S] float32
        self.is_end = is_end  # [S] bool
        self.boundary = boundary  # [V] bool
        self.entries = entries
        self.margin = margin  # a unit earns only within this many log-prob units of the step's best (None: always)

    @classmethod
    def build(cls, entries: Sequence[Hotword], tokenizer: Tokenizer, margin: float | None = None) -> HotwordTrie:
        """The trie of ``entries``, each phrase split into units by ``tokenizer.encode``, gated by ``margin`` (module
        docstring). ConfigError naming the entry's line when a phrase has characters the tokenizer cannot write
        (they would encode to ``<unk>``)."""
        phrases = []
        for entry in entries:
            unknown = tokenizer.unknown_characters([entry.phrase])
            if unknown:
                raise ConfigError(f"{entry.where or 'hotword'}: {entry.phrase!r} has characters the model's units "
                                  f"cannot write: {' '.join(repr(c) for c in unknown)}")
            phrases.append((tokenizer.encode(entry.phrase), entry.weight))
        return cls.from_units(phrases, tokenizer.vocab_size, word_boundaries(tokenizer), tuple(entries), margin)

    @classmethod
    def from_units(cls, phrases: Sequence[tuple[Sequence[int], float]], vocab_size: int,
                   boundary: torch.Tensor | None = None, entries: tuple[Hotword, ...] = (),
                   margin: float | None = None) -> HotwordTrie:
        """The trie of ``phrases``: (unit ids, weight) pairs, ids in [0, vocab_size). A node's unit bonus is the
        largest weight of the phrases through it. ``boundary`` [V] bool: the units that keep a completed phrase
        before them (None: every unit, so a phrase is kept as soon as it completes). ValueError for an empty phrase
        or an id out of range; ``margin`` gates the bonus by the model's log-probs (None: no gate)."""
        if margin is not None and not margin >= 0:
            raise ValueError(f"the hotword margin must be >= 0, got {margin}")
        boundary = torch.ones(vocab_size, dtype=torch.bool) if boundary is None else boundary.bool()
        children: list[dict[int, int]] = [{}]
        parent, bonus, is_end, unit_in = [-1], [0.0], [False], [-1]
        for units, weight in phrases:
            if len(units) == 0:
                raise ValueError("a hotword phrase needs at least one unit")
            node = 0
            for unit in units:
                if not 0 <= unit < vocab_size:
                    raise ValueError(f"unit id {unit} is outside the vocabulary [0, {vocab_size})")
                child = children[node].get(unit)
                if child is None:
                    child = len(parent)
                    children[node][unit] = child
                    children.append({})
                    parent.append(node)
                    bonus.append(0.0)
                    is_end.append(False)
                    unit_in.append(unit)
                bonus[child] = max(bonus[child], float(weight))
                node = child
            is_end[node] = True
        pending = [0.0] * len(parent)
        for node in range(1, len(parent)):  # parents come before their children
            kept_before = is_end[parent[node]] and bool(boundary[unit_in[node]])  # a new word after a phrase
            pending[node] = (0.0 if kept_before else pending[parent[node]]) + bonus[node]
        root_row = torch.zeros(vocab_size, dtype=torch.long)
        for unit, child in children[0].items():
            root_row[unit] = child
        next_node = root_row.repeat(len(parent), 1)  # [S, V]: a broken match restarts from the root
        edges = [(node, unit, child) for node, out in enumerate(children) for unit, child in out.items()]
        if edges:
            source, unit, child = torch.tensor(edges, dtype=torch.long).unbind(1)
            next_node[source, unit] = child
        return cls(next_node, torch.tensor(parent), torch.tensor(bonus), torch.tensor(pending),
                   torch.tensor(is_end), boundary, entries, margin)

    @property
    def num_nodes(self) -> int:
        return self.next_node.shape[0]

    @property
    def num_phrases(self) -> int:
        """The distinct phrases (unit sequences) the trie holds."""
        return int(self.is_end.sum())

    @property
    def vocab_size(self) -> int:
        return self.next_node.shape[1]

    @property
    def is_empty(self) -> bool:
        """No phrase: biasing changes nothing (the searches then run exactly as without it)."""
        return self.num_nodes == 1

    @property
    def max_unit_bonus(self) -> float:
        """The most one unit can earn: what the autoregressive search's stopping rule adds per step still to come."""
        return float(self.unit_bonus.max())

    @property
    def device(self) -> torch.device:
        return self.next_node.device

    def to(self, device: torch.device | str) -> HotwordTrie:
        """This trie with its tensors on ``device`` (itself when they are there already)."""
        device = torch.device(device)
        if self.device == device:
            return self
        return HotwordTrie(self.next_node.to(device), self.parent.to(device), self.unit_bonus.to(device),
                           self.pending.to(device), self.is_end.to(device), self.boundary.to(device), self.entries,
                           self.margin)

    def initial_state(self, rows: int) -> torch.Tensor:
        """Every hypothesis at the root: [rows] long."""
        return torch.zeros(rows, dtype=torch.long, device=self.device)

    def plausible(self, log_probs: torch.Tensor) -> torch.Tensor | None:
        """The model's log-probs of a step [..., V] -> [..., V] bool: the units within ``margin`` of the step's best,
        those that may earn a bonus; None without a margin (every unit may)."""
        if self.margin is None:
            return None
        return log_probs >= log_probs.max(dim=-1, keepdim=True).values - self.margin

    def step_bonus(self, state: torch.Tensor, ending: torch.Tensor | None = None,
                   plausible: torch.Tensor | None = None) -> torch.Tensor:
        """state [R] long (node of each hypothesis) -> [R, V] float32: the bonus of every next unit. It earns the
        unit bonus of the node it leads to, less what the state held pending when it does not advance the state's
        match (a break; the ids never in a phrase, eos among them, always break), unless the state completed a
        phrase and the unit is a word boundary (the phrase is kept). ``ending`` [R] bool: rows whose hypothesis ends
        with this unit also give back what is pending in the node reached, unless it completes a phrase.
        ``plausible`` [R, V] bool (:meth:`plausible`; None: all): an implausible unit earns nothing and breaks."""
        reached = self.next_node[state]  # [R, V]
        broken = self.parent[reached] != state.unsqueeze(1)  # [R, V]
        kept = self.is_end[state].unsqueeze(1) & self.boundary.unsqueeze(0)  # [R, V]
        given_back = self.pending[state].unsqueeze(1)  # [R, 1]
        bonus = self.unit_bonus[reached] - (broken & ~kept) * given_back
        if ending is not None:
            bonus = bonus - (ending.unsqueeze(1) & ~self.is_end[reached]) * self.pending[reached]
        if plausible is not None:  # implausible: a break to the root, no new match
            bonus = torch.where(plausible, bonus, -((~kept) * given_back))
        return bonus

    def advance(self, state: torch.Tensor, units: torch.Tensor, plausible: torch.Tensor | None = None) -> torch.Tensor:
        """state [R] long, units [R] long (the unit each hypothesis was extended with), ``plausible`` [R] bool (was
        that unit plausible; None: yes) -> the new state [R] (the root after an implausible unit)."""
        reached = self.next_node[state, units]
        return reached if plausible is None else reached * plausible


class HotwordScorer:
    """The state scorer (decode/beam.py, ``StateScorer``) of a hotword trie in the Paraformer's factorised search.
    ``lengths`` [R] long: the token count of each row's utterance (R = B * beam); at its last position a row also
    gives back what an unfinished match holds, so a finished hypothesis keeps only its completed phrases' bonuses.
    ``log_probs`` [B, N, V]: the posteriors searched, which the trie's margin reads (needed only with a margin)."""

    def __init__(self, trie: HotwordTrie, lengths: torch.Tensor, log_probs: torch.Tensor | None = None):
        self.trie = trie.to(lengths.device)
        self.lengths = lengths
        self.log_probs = log_probs
        self.plausible_now: torch.Tensor | None = None  # [R, V] at the position last scored

    def initial_state(self, rows: int) -> torch.Tensor:
        return self.trie.initial_state(rows)

    def __call__(self, state: torch.Tensor, position: int) -> torch.Tensor:
        """state [R] -> [R, V]: the bonus of every unit at ``position``."""
        plausible = None
        if self.trie.margin is not None:
            step = self.log_probs[:, position]  # [B, V]; every beam of an utterance reads its posterior
            plausible = self.trie.plausible(step).repeat_interleave(state.shape[0] // step.shape[0], dim=0)
        self.plausible_now = plausible  # [R, V] or None
        return self.trie.step_bonus(state, ending=self.lengths == position + 1, plausible=plausible)

    def advance(self, state: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        """state [R] of the hypotheses kept, units [R] -> the new state; a kept row belongs to the same utterance as
        the row it extends (the search keeps each utterance's beams in its own rows)."""
        plausible = None
        if self.plausible_now is not None:
            plausible = self.plausible_now.gather(1, units.unsqueeze(1)).squeeze(1)  # [R]
        return self.trie.advance(state, units, plausible)


def word_boundaries(tokenizer: Tokenizer) -> torch.Tensor:
    """[V] bool: the units after which a completed phrase stands as a whole word: the special ids (eos among them),
    the pieces that start a word (``▁``) and those that are only whitespace (the space character)."""
    return torch.tensor([not piece or begins_word(piece) for piece in tokenizer.pieces(range(tokenizer.vocab_size))])


def biasing(hotwords: HotwordTrie | None) -> bool:
    """Whether ``hotwords`` biases a search at all (None and an empty list do not)."""
    return hotwords is not None and not hotwords.is_empty
