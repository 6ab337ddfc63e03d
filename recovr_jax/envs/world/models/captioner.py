"""A captioning VLM for the world: the captions Progress Memory caches.

A ``FlaxVisionEncoderDecoderModel`` (transformers' Flax classes): a small ViT
reads a clip's frames and their differences stacked on the channel axis (so a
patch sees motion),
and a GPT-2 decoder with cross-attention writes the caption greedily. It is
trained with optax on renders of the training split, against the world's
template captions (random templates and synonyms, so it learns to describe,
not to copy one string), and never sees a test combination. What it gets
wrong is what the reasoning modules and the baselines' question logic then
believe about a video; the ground-truth captions remain available only to the
oracle ablation (``--captions=oracle``).

A checkpoint is a directory: ``save_pretrained`` of the model and of its
word-level tokenizer, plus ``recovr_captioner.json`` (its training config and
quality report).
"""

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recovr_jax import readers
from recovr_jax import checksums
from recovr_jax.core import checks
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.models import encoders
from recovr_jax import paths
from recovr_jax import pretrained
from recovr_jax import profiling

MARKER = 'recovr_captioner.json'
DEFAULT_CAPTIONER_DIR = str(paths.CHECKPOINTS / 'captioner')
# The captioner of the describable-layout world (train_captioner.py
# --renditions=4 --describe_layout).
LAYOUT_CAPTIONER_DIR = str(paths.CHECKPOINTS / 'captioner_layout')
_SPECIAL = ('[PAD]', '[BOS]', '[EOS]', '[UNK]')
# What describes the captioner (its weights, WEIGHTS, are read only when it
# captions: a run whose captions are all cached needs none, as a run's
# archive carries it, experiments/bundle.py).
_REQUIRED_FILES = ('config.json', 'tokenizer.json', MARKER)
WEIGHTS = 'flax_model.msgpack'


@dataclasses.dataclass(frozen=True)
class CaptionerConfig:
  """Architecture and training budget (the shipped checkpoint's defaults)."""
  seed: int = 0
  hidden: int = 128
  encoder_layers: int = 3
  decoder_layers: int = 2
  heads: int = 4
  patch_size: int = 8
  max_length: int = 24        # caption tokens, BOS and EOS included
  steps: int = 3000
  batch: int = 64
  lr: float = 1e-3
  vocabulary_samples: int = 20_000  # captions read to build the vocabulary

  def __post_init__(self):
    for name in ('hidden', 'encoder_layers', 'decoder_layers', 'heads',
                 'patch_size', 'max_length', 'steps', 'batch'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}')
    if self.hidden % self.heads:
      raise ValueError(f'hidden ({self.hidden}) must divide by heads '
                       f'({self.heads})')


def num_channels(num_frames: int) -> int:
  """ViT input channels: every frame and every consecutive difference."""
  return 3 * num_frames + 3 * (num_frames - 1)


def pixels(frames) -> jax.Array:
  """``[B, F, H, W, 3]`` clips -> ``[B, 3F + 3(F-1), H, W]`` ViT input: the
  frames and their consecutive differences on the channel axis (so one patch
  sees motion, as the video encoder's frame pairs do), NCHW as transformers'
  Flax vision models take it."""
  frames = jnp.asarray(frames, jnp.float32)
  b, f, h, w, c = frames.shape
  stacked = jnp.concatenate([frames, frames[:, 1:] - frames[:, :-1]], axis=1)
  return jnp.transpose(stacked, (0, 1, 4, 2, 3)).reshape(
      b, (2 * f - 1) * c, h, w)


def build_tokenizer(captions):
  """A word-level tokenizer over the words of ``captions``."""
  from tokenizers import Tokenizer, models, pre_tokenizers  # pylint: disable=g-import-not-at-top,g-multiple-import
  from transformers import PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top
  words = sorted({w for c in captions for w in c.split()})
  vocab = {t: i for i, t in enumerate(_SPECIAL + tuple(words))}
  tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token='[UNK]'))
  tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='[PAD]',
                                 bos_token='[BOS]', eos_token='[EOS]',
                                 unk_token='[UNK]')


def new_model(config: CaptionerConfig, world_config: generator.WorldConfig,
              vocab_size: int, tokenizer):
  """A randomly initialised captioner for clips of ``world_config``."""
  from transformers import FlaxVisionEncoderDecoderModel, GPT2Config, ViTConfig, VisionEncoderDecoderConfig  # pylint: disable=g-import-not-at-top,g-multiple-import
  encoder = ViTConfig(
      image_size=world_config.image_size, patch_size=config.patch_size,
      num_channels=num_channels(world_config.num_frames),
      hidden_size=config.hidden,
      num_hidden_layers=config.encoder_layers,
      num_attention_heads=config.heads, intermediate_size=2 * config.hidden)
  decoder = GPT2Config(
      vocab_size=vocab_size, n_positions=config.max_length,
      n_embd=config.hidden, n_layer=config.decoder_layers,
      n_head=config.heads, add_cross_attention=True, is_decoder=True,
      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
      pad_token_id=tokenizer.pad_token_id)
  ved = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder,
                                                                decoder)
  ved.decoder_start_token_id = tokenizer.bos_token_id
  ved.pad_token_id = tokenizer.pad_token_id
  ved.eos_token_id = tokenizer.eos_token_id
  return FlaxVisionEncoderDecoderModel(ved, seed=config.seed)


def encode_captions(tokenizer, captions, max_length: int):
  """Teacher-forcing inputs: ``(decoder inputs [B, L], labels [B, L], mask
  [B, L])``; inputs start with BOS, labels end with EOS."""
  ids = tokenizer(list(captions), add_special_tokens=False)['input_ids']
  b = len(ids)
  inputs = np.full((b, max_length), tokenizer.pad_token_id, np.int32)
  labels = np.full((b, max_length), tokenizer.pad_token_id, np.int32)
  mask = np.zeros((b, max_length), np.float32)
  for i, seq in enumerate(ids):
    seq = seq[:max_length - 1]
    inputs[i, 0] = tokenizer.bos_token_id
    inputs[i, 1:len(seq) + 1] = seq
    labels[i, :len(seq)] = seq
    labels[i, len(seq)] = tokenizer.eos_token_id
    mask[i, :len(seq) + 1] = 1.0
  return inputs, labels, mask


class Captioner:
  """A trained captioner: ``captioner(frames) -> captions``.

  The description (``info``, ``fingerprint``) is read at once; the weights,
  checked against the checkpoint's manifest, when first used (a run whose
  captions are all cached never loads them)."""

  def __init__(self, directory: str, batch_size: int = 256):
    check_dir(directory)
    self.directory = str(directory)
    self.info = readers.read_json(pathlib.Path(directory) / MARKER,
                                  'captioner description')
    self.fingerprint = self.info['id']
    self.batch_size = batch_size
    self._loaded = None

  def _load(self):
    """``(model, tokenizer, jitted greedy generation)``."""
    if self._loaded is not None:
      return self._loaded
    directory = self.directory
    if not (pathlib.Path(directory) / WEIGHTS).is_file():
      raise FileNotFoundError(
          f'captioner checkpoint {directory!r} has no {WEIGHTS} (a copy '
          'without weights, as a run\'s archive carries: it serves the '
          'cached captions only, and this run captions videos the cache '
          'lacks); pass --captioner_checkpoint=<a checkpoint with weights>')
    from transformers import FlaxVisionEncoderDecoderModel, PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top,g-multiple-import
    checksums.verify_manifest(directory, 'captioner checkpoint')
    with encoders.quiet_transformers():
      try:
        model = pretrained.from_pretrained(
            FlaxVisionEncoderDecoderModel, directory, 'captioner checkpoint')
      except Exception as e:  # pylint: disable=broad-except
        raise ValueError(f'captioner checkpoint {directory!r} cannot be '
                         f'loaded ({type(e).__name__}: {e}); is '
                         'flax_model.msgpack complete?') from e
    checksums.check_finite(model.params, f'captioner checkpoint {directory}')
    tok = PreTrainedTokenizerFast.from_pretrained(directory)
    max_length = self.info['config']['max_length']

    def generate(params, pixel_values):
      return model.generate(
          pixel_values, params=params, max_length=max_length,
          num_beams=1, do_sample=False,
          decoder_start_token_id=tok.bos_token_id,
          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
      ).sequences

    self._loaded = model, tok, jax.jit(generate)
    return self._loaded

  @property
  def model(self):
    return self._load()[0]

  @property
  def params(self):
    return self._load()[0].params

  @property
  def tokenizer(self):
    return self._load()[1]

  def __call__(self, frames) -> list[str]:
    """``[B, F, H, W, 3]`` clips -> ``B`` captions (greedy), batched with a
    fixed batch shape (one compile)."""
    with profiling.part('captioning'):
      return self._caption(frames)

  def _caption(self, frames) -> list[str]:
    frames = np.asarray(frames, np.float32)
    model, tokenizer, generate = self._load()
    out = []
    for start in range(0, len(frames), self.batch_size):
      chunk = frames[start:start + self.batch_size]
      n = len(chunk)
      padded = np.concatenate([chunk, np.zeros(
          (self.batch_size - n,) + chunk.shape[1:], np.float32)])
      seq = np.asarray(generate(model.params, pixels(padded)))
      out.extend(tokenizer.batch_decode(seq[:n], skip_special_tokens=True))
    return [' '.join(c.split()) for c in out]


def check_dir(directory) -> None:
  """Raises ``FileNotFoundError`` naming what a checkpoint lacks."""
  path = pathlib.Path(directory)
  missing = [f for f in _REQUIRED_FILES if not (path / f).is_file()]
  if missing:
    raise FileNotFoundError(f'captioner checkpoint {str(directory)!r} is '
                            f'missing: {", ".join(missing)}')


def attribute_accuracy(captions, attributes) -> dict:
  """Per attribute: share of captions whose (lexicon-read) value is right;
  a caption that names no value of an attribute counts as wrong. Also the
  share right on every attribute and the share of captions that differ
  from every ground-truth reading (``wrong_any``)."""
  attributes = np.asarray(attributes)
  read = np.full(attributes.shape, -1)
  parse = lexicon.for_attributes(attributes.shape[1]).parse
  for i, caption in enumerate(captions):
    for a, v in parse(caption).items():
      read[i, a] = v
  right = read == attributes
  out = {name: float(right[:, a].mean()) for a, name in enumerate(
      generator.attribute_names(attributes.shape[1]))}
  out['all_attributes'] = float(right.all(axis=1).mean())
  out['wrong_any'] = 1.0 - out['all_attributes']
  return out


def train(config: CaptionerConfig, world, output_dir, log=print,
          eval_videos: int = 1000) -> dict:
  """Trains a captioner on renders of ``world``'s training split, saves it
  to ``output_dir`` and returns its report (per-attribute accuracy on
  ``eval_videos`` renders of the test split)."""
  wc = world.config
  rng = np.random.default_rng(config.seed)
  train_combos = world.train_combos
  layouts = np.random.default_rng([config.seed, 2])  # its own stream
  vocabulary = [generator.caption(rng, a) for a in _with_layouts(
      world, world.combos[rng.choice(train_combos,
                                     config.vocabulary_samples)], layouts)]
  tokenizer = build_tokenizer(vocabulary)
  model = new_model(config, wc, len(tokenizer), tokenizer)
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, config.lr, min(200, config.steps // 10 + 1), config.steps)
  optimizer = optax.adamw(schedule, weight_decay=1e-4)
  params = model.params
  opt_state = optimizer.init(params)
  render = jax.jit(lambda attrs, keys: pixels(generator.render_batch(
      attrs, keys, num_frames=wc.num_frames, image_size=wc.image_size,
      pixel_noise=wc.pixel_noise)))

  def loss_fn(params, pixel_values, inputs, labels, mask, dropout_key):
    logits = model(pixel_values, inputs, decoder_attention_mask=(
        inputs != tokenizer.pad_token_id).astype(jnp.int32), params=params,
                   dropout_rng=dropout_key, train=True).logits
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return jnp.sum(ce * mask) / jnp.sum(mask)

  @jax.jit
  def step(params, opt_state, pixel_values, inputs, labels, mask, key):
    loss, grads = jax.value_and_grad(loss_fn)(params, pixel_values, inputs,
                                              labels, mask, key)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  key = jax.random.key(config.seed)
  start = time.time()
  losses = []
  for i in range(config.steps):
    key, k_render, k_drop = jax.random.split(key, 3)
    combos = rng.choice(train_combos, config.batch)
    attrs = _with_layouts(world, world.combos[combos], layouts)
    keys = jax.random.split(k_render, config.batch)
    inputs, labels, mask = encode_captions(
        tokenizer, [generator.caption(rng, a) for a in attrs],
        config.max_length)
    params, opt_state, loss = step(params, opt_state, render(attrs, keys),
                                   inputs, labels, mask, k_drop)
    if i % 200 == 0 or i == config.steps - 1:
      losses.append((i, checks.training_loss('captioner', i + 1, loss)))
      log(f'captioner step {i}/{config.steps}: loss {float(loss):.3f} '
          f'({time.time() - start:.0f}s)')
  train_s = time.time() - start
  model.params = params

  out = pathlib.Path(output_dir).absolute()
  out.mkdir(parents=True, exist_ok=True)
  model.save_pretrained(out)
  tokenizer.save_pretrained(out)
  report = {'id': f'captioner-seed{config.seed}-steps{config.steps}-'
                  f'{int(time.time())}',
            'config': dataclasses.asdict(config),
            'world': dataclasses.asdict(wc),
            'train_seconds': train_s, 'losses': losses,
            'params': int(sum(np.size(x) for x in jax.tree.leaves(params)))}
  (out / MARKER).write_text(json.dumps(report, indent=2))
  checksums.write_manifest(out)
  report['test'] = evaluate(str(out), world, eval_videos, seed=config.seed)
  (out / MARKER).write_text(json.dumps(report, indent=2))
  checksums.write_manifest(out)
  return report


def evaluate(directory, world, num_videos: int, seed: int = 0) -> dict:
  """Per-attribute caption accuracy on fresh renders of test combinations."""
  wc = world.config
  captioner = Captioner(directory)
  rng = np.random.default_rng(seed + 1)
  combos = rng.choice(np.flatnonzero(world.is_test), num_videos)
  attrs = _with_layouts(world, world.combos[combos],
                        np.random.default_rng([seed + 1, 2]))
  keys = jax.random.split(jax.random.key(seed + 1), num_videos)
  frames = generator.render_batch(attrs, keys, num_frames=wc.num_frames,
                                  image_size=wc.image_size,
                                  pixel_noise=wc.pixel_noise)
  captions = captioner(frames)
  report = attribute_accuracy(captions, attrs)
  report['videos'] = num_videos
  report['examples'] = [
      {'caption': c, 'truth': lexicon.canonical_description(
          {a: int(v) for a, v in enumerate(t)})}
      for c, t in zip(captions[:8], attrs[:8])]
  return report


def _with_layouts(world, attrs, rng):
  """``[n, A]`` rows of combinations, with a random layout column drawn
  from ``rng`` when ``world``'s layout is describable."""
  if not world.config.describe_layout:
    return attrs
  return np.concatenate([attrs, rng.integers(
      generator.NUM_LAYOUTS, size=(len(attrs), 1)).astype(attrs.dtype)], 1)
