"""WebVid-CoVR-style files as a run's environment, its user and reasoners.

No text here goes through the embedded world's lexicon: the ``rules``
backend is ``reasoning.rules.FreeTextReasoner``, which keeps the user's
words.
"""

import numpy as np

from recovr_jax.protocol import host
from recovr_jax.real import clip_encoder
from recovr_jax.real import data
from recovr_jax.reasoning import rules


def real_environment(annotations: str, gallery_embeddings: str,
                     clip_dir: str) -> host.Environment:
  """The environment of an annotation CSV, precomputed gallery embeddings
  and the local CLIP that embedded them (for the text side)."""
  gallery = data.load_embeddings(gallery_embeddings)
  ann = data.load_covr_csv(annotations, video_ids=gallery.ids)

  index = gallery.index()
  if gallery.captions is None:
    raise ValueError(f'--gallery_embeddings {gallery_embeddings} has no '
                     'captions; the caption-based simulated user describes '
                     "the target from its caption (write them with "
                     'experiments.embed_videos --captions=...)')
  captions = tuple(gallery.captions)
  empty = sorted({t for t in ann.target if not captions[index[t]].strip()})
  if empty:
    raise ValueError(f'--gallery_embeddings {gallery_embeddings}: the '
                     f'caption of target video {empty[0]!r} is empty ('
                     f'{len(empty)} targets); the caption-based simulated '
                     'user needs it')
  clip = clip_encoder.ClipEncoder(clip_dir)
  if clip.dim != gallery.video.shape[1]:
    raise ValueError(f'--gallery_embeddings has dimension '
                     f'{gallery.video.shape[1]} but the CLIP in --clip_dir '
                     f'projects to {clip.dim}')
  cache = {}

  def encode_text(texts):
    missing = sorted({t for t in texts if t not in cache})
    if missing:
      cache.update(zip(missing, clip.encode_text(missing)))
    return np.stack([cache[t] for t in texts]) if texts else np.zeros(
        (0, clip.dim), np.float32)

  return host.Environment(
      gallery=gallery.video, captions=captions, attributes=None,
      reference=np.array([index[r] for r in ann.reference]),
      target=np.array([index[t] for t in ann.target]),
      modification=ann.edit, encode_text=encode_text,
      compose=sum_composer, video_ids=tuple(gallery.ids))


def sum_composer(reference, edit):
  """The training-free composer: the normalised sum (CLIP has none)."""
  out = np.asarray(reference, np.float32) + np.asarray(edit, np.float32)
  return out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)


def caption_user(user, captions):
  """The host driver's user function for a ``caption_user.CaptionUser``."""
  def respond(session, turn, target, shown, question):
    del question  # the caption user does not answer questions
    return user.respond(session, turn, target, shown, captions[target],
                        captions[shown])
  return respond


def make_reasoner(backend: str, checkpoint: str | None = None,
                  chat_options: dict | None = None, **kwargs):
  """The real-data reasoner of a backend name: ``rules`` keeps the user's
  words (``FreeTextReasoner``); ``flax_lm`` loads ``checkpoint`` (required:
  the shipped reasoner was trained on the world's vocabulary) with the
  free-text backend as its fallback."""
  fallback = rules.FreeTextReasoner()
  if backend == 'rules':
    return fallback
  if backend == 'flax_lm':
    if not checkpoint:
      raise ValueError('--reasoner=flax_lm on real data needs '
                       '--reasoner_checkpoint (the shipped reasoner knows '
                       "only the world's vocabulary)")
    from recovr_jax.reasoning import flax_lm  # pylint: disable=g-import-not-at-top
    return flax_lm.FlaxLMReasoner(checkpoint, fallback=fallback, **kwargs)
  if backend in ('smollm2', 'smollm2_world'):
    from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
    # No few-shot examples on real data (the world's would mislead).
    return chat_lm.make(backend, fallback, checkpoint, examples=None,
                        **(chat_options or {}))
  raise ValueError(f'unknown reasoner {backend!r}; valid choices: rules, '
                   'flax_lm, smollm2, smollm2_world')
