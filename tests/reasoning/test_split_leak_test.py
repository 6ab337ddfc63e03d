"""No reader was written with the test split in view.

The test phrasings (benchmark v3's, ``user_language.test_phrasings``) are
read once per change of a reader (docs/reading.md). These tests fail when
a word only the test split uses appears in a reader's code or shipped data,
or when the WordNet stemmer has a suffix rule that only test words need.
"""

import pathlib
import re

from absl.testing import absltest

from recovr_jax.envs.world.user import user_language
from recovr_jax.reasoning import wordnet

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'recovr_jax'
# A reader's code: the reasoners, the lexicon they read with, and the fits
# of the grounded reader. Its data: what ships beside a reasoner's weights
# (the tokenizers' vocabularies are the pretrained models' own).
READER_CODE = (sorted((PACKAGE / 'reasoning').glob('*.py')) +
               [PACKAGE / 'envs/world/benchmark/lexicon.py',
                PACKAGE / 'envs/world/models/reader_fit.py'])
READER_DATA = sorted(
    p for d in ('reasoner', 'smollm2_world')
    for p in (PACKAGE / 'checkpoints' / d).rglob('*')
    if p.suffix in ('.json', '.md', '.txt') and 'tokenizer' not in p.name
    and p.name not in ('vocab.json', 'merges.txt', 'checksums.json'))
# Ordinary English that code and its comments use as prose ("offsets run
# across them", "lower case", "a span of words"), each checked below to be
# in no string a reader matches: the test split happens to use them too.
PROSE = frozenset({'across', 'between', 'dot', 'lower', 'off', 'plain',
                   'round', 'span', 'standard', 'view'})


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


class TestSplitLeakTest(absltest.TestCase):

  def test_no_test_only_word_in_a_readers_code_or_data(self):
    only_test, _ = _split_words()
    self.assertGreater(len(only_test), 100)
    self.assertNotEmpty(READER_DATA)
    found = {}
    for path in READER_CODE + READER_DATA:
      words = set(re.findall(r'[a-z]+', path.read_text().lower()))
      hits = sorted((words & only_test) - PROSE)
      if hits:
        found[str(path.relative_to(ROOT))] = hits
    self.assertEqual(found, {})

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
