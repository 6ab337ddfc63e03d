"""The embedded world as a run's environment and its user (its reasoners:
``envs.world.world_source.world_vocabulary`` and ``reasoning.registry``)."""

import jax
import numpy as np

from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.models import training
from recovr_jax import profiling
from recovr_jax.protocol import environment


def world_environment(world, text_encoder, video_params, composer_params,
                      cache_dir=None, captioner=None) -> environment.Environment:
  """The environment of the embedded world with the shipped encoders.

  ``captioner``: the captioning model whose captions Progress Memory holds
  (``envs.world.models.captioner.Captioner``); ``None`` gives the system the world's
  ground-truth captions: the oracle ablation.
  """
  memory = training.gallery_memory(world, video_params, cache_dir,
                                   captioner=captioner)
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

  return environment.Environment(
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

  def many(calls):  # respond of each call, in one batch where it can
    return user.respond_many([
        (session, turn, target, shown, attributes[target], attributes[shown],
         question) for session, turn, target, shown, question in calls])
  def named_many(calls):  # what each reply names, its words unwritten
    return user.named_many([
        (session, turn, target, shown, attributes[target], attributes[shown],
         question) for session, turn, target, shown, question in calls])
  respond.many = many
  respond.named_many = named_many
  return respond
