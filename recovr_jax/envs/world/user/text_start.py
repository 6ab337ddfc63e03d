"""Sessions that start from text (interactive text-to-video retrieval, the
setting MERLIN, IVR and UMIVR were built for): no reference video, a first
query describing the target.

The first query names ``NAMED`` of the target's attributes, drawn per query
from a fixed seed, in the words the simulated user speaks (its own words and
phrasings under an own language, the lexicon's otherwise). Both numbers
were fixed before any result of this protocol was seen.
"""

import numpy as np

from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import user_language

NAMED = 3     # of the 7 attributes, as a short first query names a few
SEED = 20261202


def first_queries(attributes, targets, language: str = 'own',
                  phrasings: str = 'all', seed: int = SEED):
  """Each session's first query.

  Args:
    attributes: ``[N, A]`` int attribute values of the gallery.
    targets: ``[Q]`` the sessions' target ids.
    language: the simulated user's ``UserConfig.language``.
    phrasings: its ``UserConfig.phrasings``.
    seed: the draws' seed.

  Returns:
    ``(texts [Q], named [Q, A] bool)``: the queries and the attributes each
    names.
  """
  attributes = np.asarray(attributes)
  num = attributes.shape[1]  # 7, or 8 with the layout
  texts, named = [], np.zeros((len(targets), num), bool)
  for i, target in enumerate(np.asarray(targets)):
    rng = np.random.default_rng([seed, i])
    subset = sorted(rng.permutation(num)[:NAMED].tolist())
    named[i, subset] = True
    values = attributes[int(target)]
    texts.append(user_language.describe(
        rng, values, subset, user_language.widest_split(language, phrasings))
                 if language in ('own', 'own_v3') else
                 lexicon.describe(rng, values, subset))
  return tuple(texts), named
