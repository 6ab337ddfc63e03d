"""No reader was written with the test split in view.

The test phrasings (benchmark v3's, ``user_language.test_phrasings``) are
read once per change of a reader (docs/reading.md). These tests fail when
a word only the test split uses appears in a reader's code or in any file
shipped beside a reasoner's weights (text, JSON, the tokenizer's
vocabulary, the strings of msgpack and safetensors files), or when the
WordNet stemmer has a suffix rule that only test words need; a planted
word in each kind of place is shown to fail it.
"""

import json
import pathlib
import re

from absl.testing import absltest

from recovr_jax.envs.world.user import user_language
from recovr_jax.reasoning import wordnet

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'recovr_jax'
# What a reader can load: its code (the reasoners, the lexicon they read
# with, the fits of the grounded reader and the reasoner's training), and
# every file shipped beside a reasoner's weights, whatever its extension
# (JSON, text, Markdown, the tokenizer's vocabulary, the weights' msgpack
# and safetensors, whose strings are read).
READER_CODE = (sorted((PACKAGE / 'reasoning').rglob('*.py')) +
               [PACKAGE / 'envs/world/benchmark/lexicon.py',
                PACKAGE / 'envs/world/models/reader_fit.py',
                PACKAGE / 'envs/world/models/reasoner_training.py'])
READER_DATA = sorted(
    p for d in ('reasoner', 'smollm2_world')
    for p in (PACKAGE / 'checkpoints' / d).rglob('*') if p.is_file())
# Ordinary English that code and its comments use as prose ("offsets run
# across them", "lower case", "a span of words", "a train triplet", the
# reasoner training's ``_near``), each checked below to be
# in no string a reader matches: the test split happens to use them too.
PROSE = frozenset({'across', 'between', 'dot', 'lower', 'near', 'off',
                   'plain', 'round', 'span', 'standard', 'triplet', 'view'})


def _words(phrase) -> set:
  if isinstance(phrase, tuple):  # a shape's (singular, plural)
    phrase = ' '.join(phrase)
  return set(re.findall(r'[a-z]+', phrase.lower()))


def _split_words():
  """``(words only the test split uses, words of the lexicon, train and
  dev)``."""
  seen = set()
  for name in user_language._NAMES:  # pylint: disable=protected-access
    for phrases in user_language.bank(name, 'dev').values():
      for phrase in phrases:
        seen |= _words(phrase)
  test = set()
  for _, _, phrase in user_language.test_phrasings():
    test |= _words(phrase)
  return test - seen, seen


def _strings(path: pathlib.Path) -> list:
  """The text a file holds: a text file's own; the strings of a msgpack
  file (keys and values, walked); a safetensors file's header; a
  tokenizer's vocabulary and merges (``_vocabulary``); ``checksums.json``
  nothing (digests)."""
  if path.name == 'checksums.json':
    return []
  if path.suffix == '.msgpack':
    import msgpack  # pylint: disable=g-import-not-at-top  (flax's)
    out = []

    def walk(x):
      if isinstance(x, dict):
        for k, v in x.items():
          walk(k)
          walk(v)
      elif isinstance(x, (list, tuple)):
        for v in x:
          walk(v)
      elif isinstance(x, str):
        out.append(x)
      elif isinstance(x, msgpack.ExtType):
        pass  # an array's bytes
    walk(msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False))
    return out
  if path.suffix == '.safetensors':
    data = path.read_bytes()
    size = int.from_bytes(data[:8], 'little')
    return [data[8:8 + size].decode('utf-8')]
  return [path.read_text(encoding='utf-8')]


def _vocabulary(path: pathlib.Path) -> set:
  """A trained tokenizer's whole-word tokens (its vocabulary's, the
  byte-level space marker dropped): a piece of a longer word is not a word
  of its own."""
  model = json.loads(path.read_text())['model']
  return {t.lstrip('\u0120').lower() for t in model['vocab']}


def leaks(paths, only_test, seen) -> dict:
  """Per file of ``paths``, the words only the test split uses that it
  holds (a tokenizer vocabulary's token that begins a word of train or dev
  is a piece of that word, not a leak)."""
  found = {}
  for path in paths:
    if path.name == 'tokenizer.json':
      words = _vocabulary(path)
      words = {w for w in words if not any(
          s.startswith(w) and s != w for s in seen)}
    else:
      words = set()
      for text in _strings(path):
        words |= set(re.findall(r'[a-z]+', text.lower()))
    hits = sorted((words & only_test) - PROSE)
    if hits:
      found[str(path.relative_to(ROOT) if path.is_relative_to(ROOT)
                else path.name)] = hits
  return found


class TestSplitLeakTest(absltest.TestCase):

  def test_no_test_only_word_in_a_readers_code_or_data(self):
    only_test, seen = _split_words()
    self.assertGreater(len(only_test), 100)
    kinds = {p.suffix for p in READER_DATA}
    self.assertContainsSubset({'.json', '.md', '.msgpack', '.safetensors'},
                              kinds)
    self.assertEqual(leaks(READER_CODE + READER_DATA, only_test, seen), {})

  def test_a_planted_word_is_found_in_each_place(self):
    only_test, seen = _split_words()
    planted = sorted(only_test - PROSE)[0]
    folder = pathlib.Path(self.create_tempdir().full_path)
    import msgpack  # pylint: disable=g-import-not-at-top
    code = folder / 'reader.py'
    code.write_text((PACKAGE / 'reasoning/rules.py').read_text()
                    + f'\n_SYNONYMS = {{{planted!r}: 3}}\n')
    data = folder / 'recovr_reasoner.json'
    data.write_text(json.dumps({'examples': [f'make it {planted}']}))
    weights = folder / 'flax_model.msgpack'
    weights.write_bytes(msgpack.packb(
        {'params': {'wte': b'\0' * 8}, 'vocab': {planted: 7}}))
    tokenizer = folder / 'tokenizer.json'
    vocab = json.loads((PACKAGE / 'checkpoints/reasoner/tokenizer.json')
                       .read_text())
    vocab['model']['vocab']['\u0120' + planted] = len(vocab['model']['vocab'])
    tokenizer.write_text(json.dumps(vocab))
    for path in (code, data, weights, tokenizer):
      self.assertEqual(leaks([path], only_test, seen), {path.name: [planted]},
                       path.name)
    # Unplanted, the same kinds of file are clean.
    self.assertEqual(leaks([PACKAGE / 'reasoning/rules.py',
                            PACKAGE / 'checkpoints/reasoner/tokenizer.json',
                            PACKAGE / 'checkpoints/reasoner/flax_model.msgpack'],
                           only_test, seen), {})

  def test_the_prose_words_are_in_no_readers_word_list(self):
    # A short string literal is what a rule, stem or synonym is made of
    # (a message naming a flag, such as 'max_span must be >= 1', is not).
    strings = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")
    for path in READER_CODE:
      for a, b in strings.findall(path.read_text()):
        text = a or b
        if '_' in text or len(text.split()) > 3:
          continue
        self.assertEmpty(_words(text) & PROSE, f'{path.name}: {text!r}')

  def test_every_suffix_rule_serves_a_word_outside_the_test_split(self):
    _, seen = _split_words()
    for suffix, _ in wordnet._SUFFIXES:  # pylint: disable=protected-access
      self.assertTrue(any(w.endswith(suffix) and len(w) > len(suffix)
                          for w in seen), suffix)


if __name__ == '__main__':
  absltest.main()
