"""The viewer's ``Truth`` for a run on the embedded world: what the
simulator knows, for the researcher reading a session (never for a
method)."""

from recovr_jax.envs.world import world_source
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.run import ask_scores
from recovr_jax.study import viewer


def of_run(config, built) -> viewer.Truth | None:
  """``viewer.Truth`` of the run ``config`` on ``built`` (``runner.build``;
  None when its data is not the embedded world): the gallery's true
  values, the user replayed (``ask_scores.replayed``: the same user,
  seeded by session and turn, given the list it saw and the question
  shown with it) and the world's lexicon reading a reply."""
  source = built.source
  if not isinstance(source, world_source.WorldSource):
    return None
  truth = source.ask_truth(built, source.user(built.env, config.user_seed))
  size = len(truth.attribute_names)
  words = lexicon.for_attributes(size)
  by_name = lambda values: generator.value_names(values, size)

  def named(row, turn):
    said = truth.user(*ask_scores.replayed(truth, row, turn))
    if said.text != row['turns'][turn].get('feedback'):
      return None  # not the recorded words: not what this turn's user named
    return by_name(said.mentioned)

  return viewer.Truth(
      attributes=lambda i: by_name(dict(enumerate(truth.attributes[i]))),
      named=named, read=lambda text: by_name(words.parse(text)))
