"""The embedded world as a run's environment, its user and its reasoners."""

import json
import pathlib

import jax
import numpy as np

from recovr_jax import profiling
from recovr_jax.protocol import host
from recovr_jax.reasoning import rules
from recovr_jax.world import encoders
from recovr_jax.world import lexicon
from recovr_jax.world import reasoner_training
from recovr_jax.world import training


def world_environment(world, text_encoder, video_params, composer_params,
                      cache_dir=None, captioner=None) -> host.Environment:
  """The environment of the embedded world with the shipped encoders.

  ``captioner``: the captioning model whose captions Progress Memory holds
  (``world.captioner.Captioner``); ``None`` gives the system the world's
  ground-truth captions: the oracle ablation.
  """
  memory = training.gallery_memory(world, video_params, text_encoder,
                                   cache_dir, captioner=captioner)
  composer = encoders.Composer()
  compose_fn = jax.jit(lambda r, e: composer.apply(composer_params, r, e))

  def compose(reference, edit):
    # Rows padded to a multiple of 32: the sessions still searching change
    # in number every turn, and each new row count would compile anew.
    with profiling.part('composing'):
      reference = np.asarray(reference, np.float32)
      edit = np.asarray(edit, np.float32)
      rows = reference.shape[0]
      pad = ((0, -rows % 32), (0, 0))
      return np.asarray(compose_fn(np.pad(reference, pad),
                                   np.pad(edit, pad)))[:rows]

  return host.Environment(
      gallery=memory.video, captions=memory.captions,
      attributes=world.gallery_attributes,
      reference=np.asarray(world.test.reference),
      target=np.asarray(world.test.target), modification=world.test.edit,
      encode_text=text_encoder, compose=compose, composer=composer,
      composer_params=composer_params, video_ids=world.gallery_ids)


def attribute_user(user, attributes):
  """The host driver's user function for a ``simulated_user.SimulatedUser``
  that sees the world's attribute labels ``[N, A]``."""
  def respond(session, turn, target, shown, question):
    return user.respond(session, turn, target, shown, attributes[target],
                        attributes[shown], question=question)
  return respond


def make_reasoner(backend: str, checkpoint: str | None = None,
                  chat_options: dict | None = None, world_config=None,
                  encode_text=None, grounded_options: dict | None = None,
                  **kwargs):
  """The world's reasoner of a backend name (``BACKENDS``).

  ``grounded``: the rules reasoning reading the user through the grounding
  reader (``world.reading``: the lexicon, the training phrasings, WordNet
  and MiniLM ``encode_text`` for the rest, its thresholds fitted on the
  train split; ``grounded_options`` override ``reading.GROUNDED_OPTIONS``)
  with the Reflector's sigma as docs/reading.md maps the user's decisions,
  read by a frame classifier fitted on the train split.

  ``smollm2`` / ``smollm2_world`` (``reasoning.chat_lm.make`` with
  ``chat_options``) draw their few-shot examples from the training split.

  ``grounded_smollm2``: ``grounded``, except for feedback holding words
  that neither the lexicon, the training phrasings nor the user's frames
  read: ``smollm2_world``'s Intent Decomposer answers it, and the State
  Reflector is ``grounded``'s rules over a reading in which that reply's
  values stand for every attribute the lexicon did not read
  (``reasoning.routed``).

  ``rules`` reads and writes the world's lexicon. ``flax_lm`` loads
  ``checkpoint`` (default: the shipped world reasoner) with the rules
  backend as its fallback; a checkpoint trained by
  ``experiments.train_reasoner`` gets the lexicon's spelling fixer in front of
  the model, as in its training.
  """
  fallback = rules.RulesReasoner(lexicon)
  if backend == 'rules':
    if world_config is not None and world_config.describe_layout:
      return rules.RulesReasoner(lexicon.for_attributes(
          len(world_config.attributes)))
    return fallback
  if backend == 'grounded':
    if encode_text is None:
      raise ValueError('--reasoner=grounded needs the world\'s text encoder '
                       '(encode_text)')
    from recovr_jax.world import generator as world_lib  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import reading  # pylint: disable=g-import-not-at-top
    world = world_lib.make_world(world_config or world_lib.WorldConfig())
    reading.check_grounded_options(grounded_options)
    reader, fit = reading.grounding_reader(
        world, encode_text,
        **{**reading.GROUNDED_OPTIONS, **(grounded_options or {})})
    frames = (reading.frame_classifier(world, reader)
              if reading.GROUNDED_SIGMA == 'frames' else None)
    reasoner = rules.RulesReasoner(lexicon, reader=reader,
                                   sigma=reading.GROUNDED_SIGMA,
                                   name='grounded', frames=frames)
    reasoner.fit = {k: v for k, v in fit.items() if k != 'curve'}
    return reasoner
  if backend == 'flax_lm':
    from recovr_jax.reasoning import flax_lm  # pylint: disable=g-import-not-at-top
    directory = pathlib.Path(checkpoint or
                             reasoner_training.DEFAULT_REASONER_DIR)
    marker = directory / reasoner_training.MARKER
    if marker.is_file() and json.loads(marker.read_text()).get(
        'spelling_fixer'):
      kwargs.setdefault('preprocess', reasoner_training.preprocess)
    return flax_lm.FlaxLMReasoner(str(directory), fallback=fallback, **kwargs)
  if backend in ('smollm2', 'smollm2_world'):
    from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import generator as world_lib  # pylint: disable=g-import-not-at-top
    examples = reasoner_training.few_shot_examples(
        world_lib.make_world(world_config or world_lib.WorldConfig()),
        per_module=8)
    # The Reflector's items are the world's literals (DESIGN section 10).
    literals = {name: world_lib.VALUES[name] for name in world_lib.ATTRIBUTES}
    # The lexicon's spelling fixer in front of the model when the adapter
    # was trained with it (the zero-shot model: always).
    adapter = (chat_options or {}).get('adapter') or chat_lm.DEFAULT_ADAPTER_DIR
    fixer = backend == 'smollm2' or chat_lm.adapter_meta(adapter)[
        'prompt'].get('spelling_fixer', True)
    return chat_lm.make(backend, fallback, checkpoint, examples=examples,
                        preprocess=(reasoner_training.preprocess if fixer
                                    else None),
                        reflect_literals=literals, **(chat_options or {}))
  if backend == 'grounded_smollm2':
    from recovr_jax.reasoning import routed  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import generator as world_lib  # pylint: disable=g-import-not-at-top
    from recovr_jax.world import reading  # pylint: disable=g-import-not-at-top
    grounded = make_reasoner('grounded', world_config=world_config,
                             encode_text=encode_text,
                             grounded_options=grounded_options)
    model = make_reasoner('smollm2_world', checkpoint,
                          chat_options=chat_options,
                          world_config=world_config, **kwargs)
    reader = grounded.reader
    frames = reading.frame_words(
        world_lib.make_world(world_config or world_lib.WorldConfig()), reader)
    return routed.RoutedReasoner(
        grounded, model,
        lambda text: bool(reading.unread_words(reader, frames, text)),
        read_reply=reading.model_reading, lexical=reader.lexical,
        name='grounded_smollm2')
  raise ValueError(f'unknown reasoner {backend!r}; valid choices: '
                   f'{", ".join(BACKENDS)}')


BACKENDS = ('rules', 'grounded', 'flax_lm', 'smollm2', 'smollm2_world',
            'grounded_smollm2')


def check_backends(backends) -> None:
  """Raises ``ValueError`` naming the first of ``backends`` that is not
  one of ``BACKENDS`` or is listed twice."""
  for i, b in enumerate(backends):
    if b not in BACKENDS:
      raise ValueError(f'--backends: unknown backend {b!r}; valid: '
                       f'{", ".join(BACKENDS)}')
    if b in backends[:i]:
      raise ValueError(f'--backends lists {b!r} twice')
