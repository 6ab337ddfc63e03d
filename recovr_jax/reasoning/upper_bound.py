"""``upper_bound``: the rules reasoning over the simulated user's own
meaning of its words (``Vocabulary.meanings``): every value the user names
is read, right, whatever the words. An upper bound on reading, for the
world only, and an oracle ablation (the reader sees the simulator's truth,
which no method may): never a default, named in every run's report and
tables as the upper bound it is (docs/reading.md).
"""

from recovr_jax.reasoning import registry
from recovr_jax.reasoning import rules

NAME = 'upper_bound'
# What the report and the tables say of a run read by it.
LABEL = ('reader upper_bound: the simulated user\'s own meaning of its '
         'words (an upper bound on reading, an oracle ablation; not a '
         'method\'s reading)')


class _UpperBound(registry.Backend):
  """The rules reasoning with the simulator's meanings as its reader."""
  NAME = NAME
  JITTED = True

  def offered(self, vocab):
    return vocab.meanings is not None

  def make(self, config, vocab, encode_text=None, **kwargs):
    del config, encode_text, kwargs
    return rules.RulesReasoner(vocab.rules().lexicon, reader=vocab.meanings(),
                               name=NAME)


BACKEND = _UpperBound()
