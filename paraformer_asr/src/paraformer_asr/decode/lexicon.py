"""Lexicon-constrained search: only sentences of known words, through an automaton over the model's own units.

On a closed vocabulary a Paraformer whose token count is one off within a word spells a word that does not exist
('wiight', 'fissh'). Constraining its factorised search to the words of the training transcripts lets the decoder's
posteriors choose, among the sentences of known words that have exactly N units, the most likely one: since every
segmentation of a word into units is a path of the automaton, a count one off can still spell the right word when
another segmentation of it has that many units.

The automaton reads the surface string of each unit (``Tokenizer.pieces``: a character, or a sentencepiece piece whose
``▁`` marker is a word separator, read as a space). States (S of them):

    DEAD   (0)  an invalid sequence; every unit leads back to DEAD
    START  (1)  nothing emitted yet
    ROOT   (2)  just after a word separator
    trie nodes  (3..) one per node of a character trie of the words (the trie's root is ROOT, or START)

A space goes from START to ROOT and from a word-end node to ROOT (not from ROOT: no empty word); a letter goes to the
trie child (from START and ROOT: the child of the trie's root), else to DEAD; special ids (pad, bos, eos, unk, blank:
no surface string) go to DEAD. Accepting states: the word-end nodes. Dense tensors, so that a search step scores every
beam x unit with a gather:

    next_state [S, V] long   the state unit u leads to from state s (DEAD for an invalid unit)
    accepting [S] bool       a complete sentence of known words ends in the state

Memory: S x V x 8 bytes (30 words over 64 units: ~200 states, 100 KB; 10 000 words over 1000 units: some 50 000
states, 400 MB; a larger lexicon wants a sparse automaton).
"""

from __future__ import annotations

from typing import Iterable

import torch

from paraformer_asr.data.tokenizer import WORD_START, Tokenizer

DEAD, START, ROOT = 0, 1, 2
SEPARATOR = " "


def lexicon_words(transcripts: Iterable[str]) -> list[str]:
    """The distinct whitespace-separated words of ``transcripts``, sorted."""
    return sorted({word for text in transcripts for word in text.split()})


def unit_surfaces(tokenizer: Tokenizer) -> list[str]:
    """The surface string of every id, ``▁`` read as a space; "" for the special ids."""
    return [piece.replace(WORD_START, SEPARATOR) for piece in tokenizer.pieces(range(tokenizer.vocab_size))]


class LexiconAutomaton:
    """The sentences of a word list as an automaton over unit ids, in dense tensors (module docstring). Build it with
    :meth:`build`; ``words`` are the words it accepts sentences of."""

    def __init__(self, next_state: torch.Tensor, accepting: torch.Tensor, words: tuple[str, ...] = ()):
        self.next_state = next_state  # [S, V] long
        self.accepting = accepting  # [S] bool
        self.words = words

    @classmethod
    def build(cls, words: Iterable[str], tokenizer: Tokenizer) -> LexiconAutomaton:
        """The automaton of the sentences of ``words`` over ``tokenizer``'s units. ValueError for a word that is empty
        or holds whitespace."""
        words = tuple(sorted(set(words)))
        children: list[dict[str, int]] = [{}, {}, {}]  # DEAD, START, ROOT; START and ROOT share the trie's root
        word_end = [False, False, False]
        for word in words:
            if not word or any(c.isspace() for c in word):
                raise ValueError(f"a lexicon word must be non-empty without whitespace, got {word!r}")
            node = ROOT
            for char in word:
                child = children[node].get(char)
                if child is None:
                    child = len(children)
                    children[node][char] = child
                    children.append({})
                    word_end.append(False)
                node = child
            word_end[node] = True
        children[START] = children[ROOT]
        surfaces = unit_surfaces(tokenizer)
        by_first: dict[str, list[int]] = {}  # first character -> the units starting with it
        for unit, surface in enumerate(surfaces):
            if surface:
                by_first.setdefault(surface[0], []).append(unit)

        def walk(state: int, surface: str) -> int:
            for char in surface:
                if char == SEPARATOR:
                    state = ROOT if state == START or word_end[state] else DEAD
                else:
                    state = children[state].get(char, DEAD)
                if state == DEAD:
                    return DEAD
            return state

        next_state = torch.full((len(children), tokenizer.vocab_size), DEAD, dtype=torch.long)  # [S, V]
        for state in range(START, len(children)):
            firsts = list(children[state]) + ([SEPARATOR] if state == START or word_end[state] else [])
            for unit in (u for first in firsts for u in by_first.get(first, [])):
                next_state[state, unit] = walk(state, surfaces[unit])
        return cls(next_state, torch.tensor(word_end), words)

    @property
    def num_states(self) -> int:
        return self.next_state.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.next_state.shape[1]

    @property
    def device(self) -> torch.device:
        return self.next_state.device

    def to(self, device: torch.device | str) -> LexiconAutomaton:
        """This automaton with its tensors on ``device`` (itself when they are there already)."""
        device = torch.device(device)
        if self.device == device:
            return self
        return LexiconAutomaton(self.next_state.to(device), self.accepting.to(device), self.words)

    def finishable(self, longest: int) -> torch.Tensor:
        """[S, longest + 1] bool: whether state s reaches an accepting state in exactly l more units (column l).
        Column 0 is ``accepting``; column l is any unit leading to a state of column l - 1 (DEAD never)."""
        columns = [self.accepting]
        for _ in range(longest):
            columns.append(columns[-1][self.next_state].any(dim=1) & self.live)  # [S]
        return torch.stack(columns, dim=1)

    @property
    def live(self) -> torch.Tensor:
        """[S] bool: every state but DEAD."""
        return torch.arange(self.num_states, device=self.device) != DEAD

    def accepts(self, units: Iterable[int]) -> bool:
        """Whether the unit sequence spells a sentence of known words (a reference walk, one unit at a time)."""
        state = START
        for unit in units:
            state = int(self.next_state[state, unit])
        return bool(self.accepting[state])


class LexiconScorer:
    """The state scorer (decode/beam.py, ``StateScorer``) of a lexicon automaton in the Paraformer's factorised
    search: 0 for a unit after which the hypothesis can still be a sentence of known words with exactly its row's
    count of units, -inf otherwise (a unit leading to DEAD; at a row's last position, one that does not complete a
    word; earlier, one into a state with no path of the remaining length to a word end: so that no beam, a beam of 1
    included, runs into a dead end while a sentence of the count exists). ``lengths`` [R] long: the token count of
    each row's utterance (R = B * beam). A state is the automaton state of each row: [R] long."""

    def __init__(self, automaton: LexiconAutomaton, lengths: torch.Tensor):
        self.automaton = automaton.to(lengths.device)
        self.lengths = lengths
        longest = int(lengths.max()) if lengths.numel() else 0
        self.finishable = self.automaton.finishable(longest)  # [S, longest + 1]

    def initial_state(self, rows: int) -> torch.Tensor:
        return torch.full((rows,), START, dtype=torch.long, device=self.lengths.device)

    def __call__(self, state: torch.Tensor, position: int) -> torch.Tensor:
        """state [R] -> [R, V]: 0 or -inf for every unit at ``position``."""
        reached = self.automaton.next_state[state]  # [R, V]
        remaining = (self.lengths - position - 1).clamp(min=0).unsqueeze(1)  # [R, 1] units after this one
        allowed = self.finishable[reached, remaining.expand_as(reached)]  # [R, V]
        return torch.zeros(reached.shape, device=state.device).masked_fill(~allowed, float("-inf"))

    def advance(self, state: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.automaton.next_state[state, tokens]


class SummedScorer:
    """Two state scorers whose states are [R] each, as one: state [R, 2], terms summed (e.g. a lexicon with
    hotwords)."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def initial_state(self, rows: int) -> torch.Tensor:
        return torch.stack([self.first.initial_state(rows), self.second.initial_state(rows)], dim=1)  # [R, 2]

    def __call__(self, state: torch.Tensor, position: int) -> torch.Tensor:
        return self.first(state[:, 0], position) + self.second(state[:, 1], position)  # [R, V]

    def advance(self, state: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.first.advance(state[:, 0], tokens), self.second.advance(state[:, 1], tokens)], dim=1)
