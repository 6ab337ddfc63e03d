"""The tiny world the driver tests share: a 300-video gallery of random
text vectors, its host environment and prepared jitted one, and the host
and jitted drivers run side by side on it."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax.core import vectors
from recovr_jax.drivers import jit_driver
from recovr_jax.drivers import jit_runner
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.face import traced_face
from recovr_jax.envs.world.models import encoders
from recovr_jax.envs.world.user import simulated_user
from recovr_jax.envs.world import world_environment
from recovr_jax import methods
from recovr_jax.drivers import host_driver
from recovr_jax.protocol import environment
from recovr_jax.protocol import plan
from recovr_jax.protocol import ranking
from recovr_jax.protocol import traced
from recovr_jax.reasoning import asking
from recovr_jax.reasoning import rules

DIM = 32
COMBOS = generator.all_combos()
# The jitted mode runs question-free methods: the host runs them so too.
NO_ASK = methods.base.Settings(ask=asking.AskPolicy(mode='never'))


def fake_encode(texts):
  """A deterministic stand-in text encoder: a random unit vector per text."""
  out = np.zeros((len(texts), DIM), np.float32)
  for i, text in enumerate(texts):
    v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIM)
    out[i] = v / np.linalg.norm(v)
  return out


def tiny_environment(composer):
  world = generator.make_world(generator.WorldConfig(
      num_test_triplets=24, num_train_triplets=20, gallery_size=300))
  attrs = world.gallery_attributes
  # Videos sit near the text of their full description, so sessions find
  # their targets after a few turns and stopping is exercised.
  gallery = fake_encode([lexicon.canonical_description(
      {a: int(v) for a, v in enumerate(row)}) for row in attrs])
  gallery += 0.3 * np.random.default_rng(0).normal(size=gallery.shape)
  gallery = (gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
             ).astype(np.float32)
  if composer == 'sum':
    model, params = 'sum', None
    compose = lambda r, e: np.asarray(vectors.sum_composer(r, e))
  else:
    model = encoders.Composer(hidden=64)
    params = model.init(jax.random.key(0), jnp.zeros((1, DIM)),
                        jnp.zeros((1, DIM)))
    apply = jax.jit(model.apply)
    compose = lambda r, e: np.asarray(apply(params, jnp.asarray(r),
                                            jnp.asarray(e)))
  return world, environment.Environment(
      gallery=gallery, captions=world.gallery_captions, attributes=attrs,
      reference=world.test.reference, target=world.test.target,
      modification=world.test.edit, encode_text=fake_encode,
      compose=compose, composer=model, composer_params=params)


_ENVS = {}


def run_host(env, method, sessions, user, base, reasoner=None):
  """The host driver with the world's user view and the rules reasoner."""
  ctx = plan.Context(gallery=env.gallery, captions=env.captions,
                     encode_text=env.encode_text, compose=env.compose,
                     reasoner=reasoner or rules.RulesReasoner(lexicon))
  return host_driver.run_batch(env, method, sessions,
                        world_environment.attribute_user(user, env.attributes), ctx,
                        base)


def env_for(composer):
  if composer not in _ENVS:
    world, env = tiny_environment(composer)
    _ENVS[composer] = (world, env, traced_face.prepare(env))
  return _ENVS[composer]


def jit_config(method, base, user_config, composer,
               reading=traced.Reading('rules')):
  """The jitted driver's config of ``method`` on the world's face
  (``reading``: the reasoner's reading the face reproduces)."""
  return jit_driver.traced_config(
      lambda form, num_turns: traced_face.world_face(form, num_turns,
                                                     user_config, reading),
      method, base, reading, composer)


def run_both(env, jit_env, method, user_config, chunk_size=7, seed=5,
             num_turns=4):
  """``(host result, jitted trace, sim config)`` of 24 sessions with the
  same (jax) draws."""
  base = ranking.LoopConfig(num_turns=num_turns, list_length=20,
                            num_ids=len(env.gallery))
  sessions = np.arange(24)
  host_result = run_host(env, method, sessions,
                         simulated_user.SimulatedUser(user_config, seed=seed),
                         base)
  config = jit_config(method, base, user_config, jit_env.composer)
  trace = jit_runner.run(jit_env, config, sessions, seed=seed,
                         chunk_size=chunk_size)
  np.testing.assert_array_equal(trace.displayed, host_result.displayed)
  return host_result, trace, config
