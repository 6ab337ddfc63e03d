"""Training and evaluation of the embedded world's encoders.

The video encoder is trained with a symmetric InfoNCE loss against the frozen
MiniLM embeddings of captions (locked-text tuning), on clips rendered on the
fly with fresh random positions, phases and noise, so it cannot memorise
renditions. The composer is trained with InfoNCE between composed queries and
the target videos' embeddings over train-split triplets.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recovr_jax.core import checks
from recovr_jax.core import list_metrics
from recovr_jax.core import retrieval
from recovr_jax.core import vectors
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.models import encoders
from recovr_jax import profiling


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Hyperparameters of ``experiments.train.train_world``."""
  seed: int = 0
  video_steps: int = 500
  video_batch: int = 128
  video_lr: float = 2e-3
  captions_per_combo: int = 1
  composer_steps: int = 1000
  composer_batch: int = 512
  composer_lr: float = 1e-3
  init_temperature: float = 0.07
  # Weight of the scene term: InfoNCE between clips of two combinations that
  # share a scene (layout, texture phase), so the embedding keeps what words
  # do not name and a composed query can find the right rendition. 0: off.
  scene_weight: float = 0.0


Progress = Callable[[str, int, int, dict], None]


def _schedule(lr, steps):
  return optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 20),
                                            max(2, steps), lr * 0.05)


def _info_nce(a, b, log_scale):
  """Symmetric InfoNCE of matching rows of ``a`` and ``b`` ``[B, D]``."""
  logits = jnp.exp(log_scale) * a @ b.T
  labels = jnp.arange(a.shape[0])
  return 0.5 * (
      optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
      + optax.softmax_cross_entropy_with_integer_labels(logits.T, labels).mean())


def caption_pool(world: generator.World, per_combo: int, seed: int):
  """``per_combo`` captions of every training combination; when the
  world's layout is describable, each caption's rendition has a random
  layout (drawn from a stream of its own) that the caption names.

  Returns:
    ``(attrs [P, A] int32, captions [P] str)``: the attribute rows the
    captions describe (a clip of each is rendered to match it).
  """
  rng = np.random.default_rng([seed, 1])
  attrs = np.repeat(world.combos[world.train_combos], per_combo, axis=0)
  if world.config.describe_layout:
    layouts = np.random.default_rng([seed, 2]).integers(
        generator.NUM_LAYOUTS, size=len(attrs))
    attrs = np.concatenate([attrs, layouts[:, None].astype(np.int32)], 1)
  return attrs, [generator.caption(rng, a) for a in attrs]


def train_video_encoder(world, caption_attrs, caption_embeddings,
                        config: TrainConfig, progress: Progress | None = None):
  """Trains ``VideoEncoder`` on on-the-fly renditions of train combinations.

  Args:
    world: the world (rendering settings).
    caption_attrs: ``[P, A]`` the attribute rows each caption describes.
    caption_embeddings: ``[P, 384]`` frozen text embeddings.
    config: hyperparameters.
    progress: called as ``progress(stage, step, total, info)``.

  Returns:
    ``{'params': ..., 'log_scale': ...}``.
  """
  wc = world.config
  model = encoders.VideoEncoder()
  key = jax.random.key(config.seed)
  init_key, key = jax.random.split(key)
  clips = jnp.zeros((1, wc.num_frames, wc.image_size, wc.image_size, 3))
  state = {'params': model.init(init_key, clips),
           'log_scale': jnp.log(1.0 / config.init_temperature)}
  caption_attrs = jnp.asarray(caption_attrs, jnp.int32)
  caption_embeddings = jnp.asarray(caption_embeddings)
  batch = config.video_batch

  render = functools.partial(generator.render_batch,
                             num_frames=wc.num_frames,
                             image_size=wc.image_size,
                             pixel_noise=wc.pixel_noise)

  def loss_fn(state, key):
    k_pick, k_render, k_scene, k_other, k_render2 = jax.random.split(key, 5)
    pick = jax.random.randint(k_pick, (batch,), 0, caption_attrs.shape[0])
    keys = jax.random.split(k_render, batch)
    if not config.scene_weight:
      clips = render(caption_attrs[pick], keys)
      video = model.apply(state['params'], clips)
      return _info_nce(video, caption_embeddings[pick], state['log_scale'])
    scenes = jax.random.split(k_scene, batch)
    video = model.apply(state['params'], render(
        caption_attrs[pick], keys, scene_keys=scenes))
    other = jax.random.randint(k_other, (batch,), 0, caption_attrs.shape[0])
    # Another combination in the same scene (and so the same layout).
    other_attrs = caption_attrs[other].at[:, generator.NUM_ATTRIBUTES:].set(
        caption_attrs[pick][:, generator.NUM_ATTRIBUTES:])
    same_scene = model.apply(state['params'], render(
        other_attrs, jax.random.split(k_render2, batch), scene_keys=scenes))
    return (_info_nce(video, caption_embeddings[pick], state['log_scale']) +
            config.scene_weight * _info_nce(video, same_scene,
                                            state['log_scale']))

  return _fit(state, loss_fn, config.video_lr, config.video_steps, key,
              'video encoder', progress, every=25)


def _fit(state, loss_fn, lr, steps, key, stage, progress, every):
  """AdamW (warm-up, cosine decay) on ``loss_fn(state, key)``."""
  opt = optax.adamw(_schedule(lr, steps), weight_decay=1e-4)
  opt_state = opt.init(state)

  @jax.jit
  def step(state, opt_state, key):
    loss, grads = jax.value_and_grad(loss_fn)(state, key)
    updates, opt_state = opt.update(grads, opt_state, state)
    return optax.apply_updates(state, updates), opt_state, loss

  for i in range(steps):
    state, opt_state, loss = step(state, opt_state, jax.random.fold_in(key, i))
    logged = (i + 1) % every == 0
    if logged or i == steps - 1:
      loss = checks.training_loss(stage, i + 1, loss)
    if progress is not None:
      progress(stage, i + 1, steps, {'loss': loss} if logged else {})
  return state


def _rendered_batches(world, attrs, keys, scene_keys, batch, fn,
                      progress=None, stage='videos'):
  """``fn(clips)`` over fixed-size batches of the clips of ``[n, A]``
  attribute rows, keys and optional scene keys (one compiled shape);
  ``progress(stage, done, total, {})`` after each batch."""
  wc = world.config

  @jax.jit
  def run(attrs, keys, scenes):
    return fn(generator.render_batch(attrs, keys, num_frames=wc.num_frames,
                                     image_size=wc.image_size,
                                     pixel_noise=wc.pixel_noise,
                                     scene_keys=scenes))

  attrs = np.asarray(attrs)
  pad_to = lambda x, pad: jnp.concatenate([x, jnp.repeat(x[-1:], pad, 0)])
  for start in range(0, len(attrs), batch):
    a = attrs[start:start + batch]
    k = keys[start:start + batch]
    s = None if scene_keys is None else scene_keys[start:start + batch]
    pad = batch - len(a)
    if pad:
      a = np.concatenate([a, np.repeat(a[-1:], pad, 0)])
      k = pad_to(k, pad)
      s = None if s is None else pad_to(s, pad)
    yield run(jnp.asarray(a), k, s), batch - pad
    if progress is not None:
      progress(stage, min(start + batch, len(attrs)), len(attrs), {})


def embed_videos(world, params, attrs, keys, batch: int = 256,
                 scene_keys=None, progress=None):
  """``[n, A]`` attribute rows and ``[n]`` keys (and optional scene keys)
  -> ``[n, 384]`` video embeddings (``progress`` as ``profiling.Timer`` takes it)."""
  model = encoders.VideoEncoder()
  out = [np.asarray(e)[:n] for e, n in _rendered_batches(
      world, attrs, keys, scene_keys, batch,
      lambda clips: model.apply(params, clips), progress, 'video encoding')]
  return np.concatenate(out) if out else np.zeros((0, encoders.TEXT_DIM),
                                                  np.float32)


def triplet_embeddings(world, video_params, seed: int):
  """``(reference [Q, D], target [Q, D])`` video embeddings of the training
  triplets. With several renditions per combination, a triplet's reference
  and target share a fresh scene (and, when the layout is describable, a
  random layout), as the test triplets do; otherwise each combination has
  its one fixed rendition."""
  train = world.train
  if world.config.renditions == 1:
    ids = world.train_combos
    emb = embed_videos(world, video_params, world.combos[ids],
                       world.video_keys(ids))
    row = {int(c): i for i, c in enumerate(ids)}
    return (emb[[row[int(c)] for c in train.reference]],
            emb[[row[int(c)] for c in train.target]])
  key = jax.random.fold_in(jax.random.key(seed), 3_000_017)
  k_scene, k_ref, k_tgt = jax.random.split(key, 3)
  q = len(train.reference)
  scenes = jax.random.split(k_scene, q)
  reference, target = world.combos[train.reference], world.combos[
      train.target]
  if world.config.describe_layout:
    layouts = np.random.default_rng([seed, 3]).integers(
        generator.NUM_LAYOUTS, size=(q, 1)).astype(np.int32)
    reference = np.concatenate([reference, layouts], 1)
    target = np.concatenate([target, layouts], 1)
  return (embed_videos(world, video_params, reference,
                       jax.random.split(k_ref, q), scene_keys=scenes),
          embed_videos(world, video_params, target,
                       jax.random.split(k_tgt, q), scene_keys=scenes))


def train_composer(reference, edit, target, config: TrainConfig,
                   progress: Progress | None = None):
  """Trains ``Composer`` on ``[Q, D]`` reference, edit and target embeddings."""
  model = encoders.Composer()
  key = jax.random.key(config.seed + 1)
  init_key, key = jax.random.split(key)
  d = reference.shape[1]
  state = {'params': model.init(init_key, jnp.zeros((1, d)), jnp.zeros((1, d))),
           'log_scale': jnp.log(1.0 / config.init_temperature)}
  reference, edit, target = (jnp.asarray(x) for x in (reference, edit, target))
  batch = min(config.composer_batch, reference.shape[0])

  def loss_fn(state, key):
    pick = jax.random.choice(key, reference.shape[0], (batch,), replace=False)
    composed = model.apply(state['params'], reference[pick], edit[pick])
    return _info_nce(composed, target[pick], state['log_scale'])

  return _fit(state, loss_fn, config.composer_lr, config.composer_steps, key,
              'composer', progress, every=100)


def ranks_of(queries, gallery, targets, exclude=None, k: int = 100):
  """``[Q]`` 1-based ranks of ``targets`` (censored at ``k + 1``)."""
  ids, _ = retrieval.retrieve(np.asarray(queries, np.float32),
                              np.asarray(gallery, np.float32), k,
                              exclude=exclude)
  return np.asarray(list_metrics.target_ranks(np.asarray(ids)[:, None, :],
                                         np.asarray(targets)))[:, 0]


def recall_table(ranks, ks=(1, 5, 10, 50)) -> dict:
  ranks = np.asarray(ranks)
  return {f'R@{k}': float(np.mean(ranks <= k)) for k in ks}


class KeptVideoEncoder:
  """A checkpoint's video encoder, restored when first used (a run whose
  gallery is cached never reads its weights, as a run's archive carries
  it: experiments/bundle.py); ``key`` names it by the digests its manifest
  records, or, without a manifest, by its restored parameters."""

  def __init__(self, directory, target):
    self.directory, self._target, self._params = directory, target, None

  @property
  def key(self) -> str:
    from recovr_jax import checksums  # pylint: disable=g-import-not-at-top
    from recovr_jax import readers  # pylint: disable=g-import-not-at-top
    manifest = self.directory / checksums.MANIFEST
    if manifest.is_file():
      return 'manifest:' + checksums.json_digest(
          readers.read_json(manifest, 'encoder manifest'))
    from recovr_jax.envs.world.models import progress_memory  # pylint: disable=g-import-not-at-top
    return progress_memory.params_fingerprint(self.params())

  def params(self):
    if self._params is None:
      self._params = encoders.restore_params(self.directory, self._target)
    return self._params


def load_world_models(checkpoint_dir, world, lazy_video: bool = False):
  """Restores the video encoder and composer params of a checkpoint dir
  (``lazy_video``: the video encoder as a ``KeptVideoEncoder``)."""
  import pathlib  # pylint: disable=g-import-not-at-top
  wc = world.config
  directory = pathlib.Path(checkpoint_dir)
  generator.check_layout(
      encoders.load_metadata(directory / 'video_encoder').get(
          'world_config', {}), wc, f'the encoders in {directory}')
  # Shapes only (``eval_shape``): initialising for real would run and
  # compile every initializer op by op just to be overwritten.
  clips = jax.ShapeDtypeStruct(
      (1, wc.num_frames, wc.image_size, wc.image_size, 3), jnp.float32)
  video_target = jax.eval_shape(encoders.VideoEncoder().init,
                                jax.random.key(0), clips)
  d = encoders.TEXT_DIM
  edit = jax.ShapeDtypeStruct((1, d), jnp.float32)
  composer_target = jax.eval_shape(encoders.Composer().init,
                                   jax.random.key(0), edit, edit)
  video = KeptVideoEncoder(directory / 'video_encoder', video_target)
  composer = encoders.restore_params(directory / 'composer', composer_target)
  return (video if lazy_video else video.params()), composer


def caption_videos(world, captioner, attrs, keys, batch: int = 256,
                   scene_keys=None, progress=None):
  """Captions of the clips ``embed_videos`` renders for the same inputs,
  written by ``captioner`` (a ``envs.world.models.captioner.Captioner``)."""
  generator.check_layout(captioner.info.get('world', {}), world.config,
               f'the captioner in {captioner.directory}')
  out = []
  for clips, n in _rendered_batches(world, attrs, keys, scene_keys,
                                    batch, lambda clips: clips, progress,
                                    'captioning'):
    out.extend(captioner(clips)[:n])
  return tuple(out)


def gallery_memory(world, video_params, cache_dir=None, captioner=None):
  """The gallery's embeddings and captions, cached (Progress Memory).

  ``captioner``: a ``envs.world.models.captioner.Captioner`` whose captions of the
  gallery's clips are what the system knows of them; ``None`` keeps the
  world's ground-truth captions (the oracle ablation).
  """
  from recovr_jax.envs.world.models import progress_memory  # pylint: disable=g-import-not-at-top
  # The gallery does not depend on which scene a target is in.
  # (The layout flag enters the key only when set: v2's caches stay valid.)
  gallery_world = {k: v for k, v in dataclasses.asdict(world.config).items()
                   if k != 'scene_shared' and (
                       k != 'describe_layout' or v)}
  # Not the text encoder: the cache holds no text embeddings (the captions'
  # are the text encoder's own cache's, kept once).
  kept = isinstance(video_params, KeptVideoEncoder)
  parts = dict(world=gallery_world,
               video=(video_params.key if kept else
                      progress_memory.params_fingerprint(video_params)),
               stored='video,captions')
  if captioner is not None:
    parts['captioner'] = captioner.fingerprint
  # A GPU's embeddings and captions, or a TF32 run's, may differ from a
  # CPU's: apart (the CPU's key is as before, so earlier caches stay).
  parts.update(encoders.numerics())
  key = progress_memory.cache_key(**parts)

  def compute():
    what = 'embedding' + (' and captioning' if captioner else '')
    print(f'Progress Memory: {what} the {len(world.gallery_combos)} gallery '
          'videos (once; cached afterwards)', flush=True)
    keys, scenes = world.gallery_keys()
    timer = profiling.Timer(every=10.0)  # a line per batch, at most every 10 s
    with profiling.part('video encoding'):
      video = embed_videos(world, video_params.params() if kept else
                           video_params, world.gallery_attributes, keys,
                           scene_keys=scenes, progress=timer)
    captions = world.gallery_captions if captioner is None else (
        caption_videos(world, captioner, world.gallery_attributes, keys,
                       scene_keys=scenes, progress=timer))
    return video, captions

  with profiling.part('progress memory (cache or build)'):
    return progress_memory.load_or_compute(cache_dir, key, compute)


def evaluate_world(world, text, video_params, composer_params,
                   cache_dir=None) -> dict:
  """Single-turn quality on the test split.

  CoVR: the composed query of each test triplet (trained composer and
  ``sum``) against the gallery, the reference excluded. T2V: the target's
  caption against the gallery.
  """
  memory = gallery_memory(world, video_params, cache_dir)
  test = world.test
  reference = memory.video[test.reference]
  edit = text(test.edit)
  composed = np.asarray(encoders.Composer().apply(composer_params, reference,
                                                  edit))
  summed = np.asarray(vectors.sum_composer(reference, edit))
  exclude = np.asarray(test.reference, np.int32)
  composer_ranks = ranks_of(composed, memory.video, test.target, exclude)
  unmentioned = np.asarray(test.unmentioned).any(axis=1)
  out = {
      'covr_composer': recall_table(composer_ranks),
      'covr_composer_edit_names_every_change': recall_table(
          composer_ranks[~unmentioned]),
      'covr_composer_with_unmentioned_change': recall_table(
          composer_ranks[unmentioned]),
      'share_with_unmentioned_change': float(unmentioned.mean()),
      'covr_sum': recall_table(
          ranks_of(summed, memory.video, test.target, exclude)),
      't2v_caption': recall_table(
          ranks_of(text([memory.captions[t] for t in test.target]),
                   memory.video, test.target), ks=(1, 5, 10)),
      'gallery_size': int(len(memory.video)),
      'test_triplets': int(len(test.target)),
      'chance_R@1': 1.0 / (len(memory.video) - 1),
      'gallery_from_cache': memory.from_cache,
  }
  return out
