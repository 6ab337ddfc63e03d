"""Loading transformers Flax checkpoints without a random initialisation.

``FlaxPreTrainedModel.from_pretrained`` first initialises every weight at
random, op by op (each initializer compiled on its own: 10 s for the
captioner and 4 s for MiniLM on a 2-core CPU), only to overwrite them all
with the checkpoint's. ``from_pretrained`` here lets that initialisation
compute shapes only (``jax.eval_shape``), which is all the loading reads,
and then checks that the checkpoint supplied every weight: a weight it
lacks stays a shape, and is an error naming it, never a silent random
value. The loaded weights are the same arrays either way (tested).

transformers 4's notice that its Flax classes are deprecated (printed on
every model made) is dropped here: the project pins ``transformers<5`` on
purpose, and the notice says nothing a user can act on (docs/real-data.md,
"After transformers 5").
"""

import logging

import jax

DEPRECATION = 'TensorFlow and JAX classes are deprecated'


class _NoDeprecationNotice(logging.Filter):

  def filter(self, record):
    return not str(record.msg).startswith(DEPRECATION)


for _name in ('transformers.modeling_flax_utils',
              'transformers.feature_extraction_utils',
              'transformers.tokenization_utils_base'):
  logging.getLogger(_name).addFilter(_NoDeprecationNotice())


def from_pretrained(cls, model_dir, what: str, **kwargs):
  """``cls.from_pretrained(model_dir, **kwargs)`` without the random
  initialisation; ``what`` names the checkpoint in errors.

  Raises:
    ValueError: the checkpoint lacks weights the model has (named).
  """
  if not hasattr(cls, 'init_weights'):  # an Auto class: the concrete one
    from transformers import AutoConfig  # pylint: disable=g-import-not-at-top
    cls = cls._model_mapping[type(AutoConfig.from_pretrained(model_dir))]  # pylint: disable=protected-access
  own = 'init_weights' in vars(cls)
  original = cls.init_weights

  def shapes_only(self, rng, input_shape, params=None):
    return jax.eval_shape(lambda r: original(self, r, input_shape, params),
                          rng)

  cls.init_weights = shapes_only
  try:
    model = cls.from_pretrained(model_dir, **kwargs)
  finally:
    if own:
      cls.init_weights = original
    else:
      del cls.init_weights
  missing = [jax.tree_util.keystr(path) for path, leaf in
             jax.tree_util.tree_flatten_with_path(model.params)[0]
             if isinstance(leaf, jax.ShapeDtypeStruct)]
  if missing:
    raise ValueError(f'{what} {str(model_dir)!r} lacks {len(missing)} '
                     f'weight(s) the model has, e.g. {", ".join(missing[:3])}')
  return model
