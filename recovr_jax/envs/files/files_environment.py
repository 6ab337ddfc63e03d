"""WebVid-CoVR-style files as a run's environment and its user.

No text here goes through the embedded world's lexicon: the ``rules``
backend is ``reasoning.rules.FreeTextReasoner``, which keeps the user's
words (``envs.files.files_source.FilesSource.vocabulary``).
"""

import dataclasses

import numpy as np

from recovr_jax.core import vectors
from recovr_jax.envs.files import callables
from recovr_jax.envs.files import clip_encoder
from recovr_jax.envs.files import data
from recovr_jax.protocol import environment


def real_environment(annotations: str, gallery_embeddings: str,
                     clip_dir: str, *, normalize_rows: bool = True,
                     reference_embeddings: str | None = None,
                     query_embeddings: str | None = None,
                     missing_ids: str = 'error',
                     text_encoder: str | None = None,
                     composer: str | None = None,
                     start: str = 'composed') -> environment.Environment:
  """The environment of an annotation CSV, precomputed gallery embeddings
  and the local CLIP that embedded them (for the text side).

  Args:
    annotations, gallery_embeddings, clip_dir: the files.
    normalize_rows: L2-normalise embedding rows (cosine); False keeps raw
      dot products.
    reference_embeddings: references that are not in the gallery (CoVR's
      test gallery is the set of targets): read from their own file,
      appended after the gallery rows but never retrieved.
    query_embeddings: precomputed turn-0 composed queries, one per CSV row
      (``data.load_query_embeddings``), instead of ``compose(v_ref, edit)``.
    missing_ids: ``error`` (an id in no file stops the load, naming the row
      and column) or ``drop`` (its rows are dropped and listed in the
      environment's ``dropped``).
    text_encoder, composer: ``module:function`` callables
      (``envs.files.callables``) instead of ``clip_dir``'s text encoder and the
      normalised sum; ``clip_dir`` is then not read.
    start: ``composed`` (``annotations`` is a WebVid-CoVR CSV) or ``text``
      (text-to-video queries in MSR-VTT-1kA's layout,
      ``data.load_text_queries``: sessions without a reference video).
  """
  if missing_ids not in ('error', 'drop'):
    raise ValueError(f'--missing_ids must be error or drop, got '
                     f'{missing_ids!r}')
  gallery = data.load_embeddings(gallery_embeddings, normalize=normalize_rows)
  dim = gallery.video.shape[1]
  ids, video = list(gallery.ids), [gallery.video]
  if gallery.captions is None:
    raise ValueError(f'--gallery_embeddings {gallery_embeddings} has no '
                     'captions; the caption-based simulated user describes '
                     "the target from its caption (write them with "
                     'experiments.data.embed_videos --annotations=<the '
                     'WebVid-CoVR CSV>, or experiments.data.import_covr)')
  captions = list(gallery.captions)
  searchable = len(ids)
  if reference_embeddings:
    refs = data.load_embeddings(reference_embeddings, dim=dim,
                                normalize=normalize_rows)
    both = sorted(set(refs.ids) & set(ids))
    if both:
      raise ValueError(f'--reference_embeddings {reference_embeddings}: id '
                       f'{both[0]!r} is also in --gallery_embeddings '
                       f'{gallery_embeddings} ({len(both)} ids); keep each '
                       'video in one file')
    ids += refs.ids
    video.append(refs.video)
    captions += refs.captions or [''] * len(refs.ids)
  index = {v: i for i, v in enumerate(ids)}
  strict = missing_ids == 'error'
  if start == 'text':
    if query_embeddings:
      raise ValueError('--query_embeddings are composed turn-0 queries; a '
                       'text start (--start=text) has none')
    rows = _text_rows(annotations, index, searchable, strict)
  else:
    rows = _composed_rows(annotations, index, searchable, strict,
                          query_embeddings, dim, normalize_rows)
  reference, target, modification, dropped, query = rows
  empty = sorted({ids[t] for t in target if not captions[t].strip()})
  if empty:
    raise ValueError(f'--gallery_embeddings {gallery_embeddings}: the '
                     f'caption of target video {empty[0]!r} is empty ('
                     f'{len(empty)} targets); the caption-based simulated '
                     'user needs it')
  if text_encoder:
    encode_text = callables.text_encoder(text_encoder, dim)
  else:
    encode_text = _clip_text(clip_dir, dim)
  compose = (callables.composer(composer, dim) if composer
             else sum_composer)

  return environment.Environment(
      gallery=np.concatenate(video).astype(np.float32),
      captions=tuple(captions), attributes=None,
      reference=np.array(reference, np.int64),
      target=np.array(target, np.int64),
      modification=tuple(modification), encode_text=encode_text,
      compose=compose, video_ids=tuple(ids), num_searchable=searchable,
      query_embeddings=query, dropped=tuple(dropped))


def _composed_rows(annotations, index, searchable, strict, query_embeddings,
                   dim, normalize_rows):
  """``(reference, target, edit, dropped, query)`` of composed triplets
  (a WebVid-CoVR CSV or a FashionIQ caption file, ``data.load_triplets``)."""
  ann = data.load_triplets(annotations, video_ids=index if strict else None)
  column = data.target_field(annotations)
  keep, dropped = _keep_rows(
      annotations, ann.target, index, searchable, strict, column,
      lambda i: {'pth1': ann.reference[i], 'pth2': ann.target[i]},
      extra_ids=ann.reference)
  query = None
  if query_embeddings:
    query = data.load_query_embeddings(query_embeddings, ann, dim,
                                       normalize=normalize_rows)[keep]
  return ([index[ann.reference[i]] for i in keep],
          [index[ann.target[i]] for i in keep],
          [ann.edit[i] for i in keep], dropped, query)


def _text_rows(annotations, index, searchable, strict):
  """``(reference -1, target, sentence, dropped, None)`` of text-to-video
  queries (``data.load_text_queries``): sessions with no reference."""
  queries = data.load_text_queries(annotations,
                                   video_ids=index if strict else None)
  column = '"image_id"' if data.is_json(annotations) else "column 'video_id'"
  keep, dropped = _keep_rows(annotations, queries.target, index, searchable,
                             strict, column,
                             lambda i: {'video_id': queries.target[i]})
  return ([-1] * len(keep), [index[queries.target[i]] for i in keep],
          [queries.text[i] for i in keep], dropped, None)


def _keep_rows(annotations, targets, index, searchable, strict, column,
               fields, extra_ids=None):
  """The rows a run can use and the ones ``--missing_ids=drop`` leaves out
  (each with ``fields(row)`` and why): an id in no embedding file, or a
  target outside the searchable gallery (an error when ``strict``)."""
  keep, dropped = [], []
  for row, t in enumerate(targets):
    label, number = data.row_label(annotations, row)
    ids = (extra_ids[row], t) if extra_ids is not None else (t,)
    missing = [v for v in ids if v not in index]
    outside = t in index and index[t] >= searchable
    if outside and strict:
      raise ValueError(f'{annotations}: {label} {number}, {column}: target '
                       f'{t!r} is in --reference_embeddings, not in the '
                       'gallery, so it could never be retrieved')
    if missing or outside:
      dropped.append({label: number, **fields(row),
                      'missing': missing or [t],
                      'why': 'no embedding' if missing else
                             'target outside the gallery'})
    else:
      keep.append(row)
  if not keep:
    raise ValueError(f'{annotations}: every row was dropped (--missing_ids='
                     f'drop): no id of the CSV is in the embedding files')
  return keep, dropped




def _clip_text(clip_dir: str, dim: int):
  """``encode_text`` of the local CLIP's text side, cached by text."""
  clip = clip_encoder.ClipEncoder(clip_dir)
  if clip.dim != dim:
    raise ValueError(f'--gallery_embeddings has dimension {dim} but the '
                     f'CLIP in --clip_dir projects to {clip.dim}')
  cache = {}

  def encode_text(texts):
    missing = sorted({t for t in texts if t not in cache})
    if missing:
      cache.update(zip(missing, clip.encode_text(missing)))
    return np.stack([cache[t] for t in texts]) if texts else np.zeros(
        (0, clip.dim), np.float32)

  def cuts(texts):  # (feedback dropped, tokens cut) of each text
    texts = list(texts)
    encode_text(sorted(set(texts)))
    return [clip.cuts.get(t, (0, 0)) for t in texts]

  encode_text.truncated = clip.truncated  # read by the source's report
  encode_text.max_tokens = encode_text.window = clip.max_tokens
  encode_text.encoded = cache
  encode_text.cuts = cuts
  return encode_text


def sum_composer(reference, edit):
  """The training-free composer (CLIP has none): the normalised sum."""
  return np.asarray(vectors.sum_composer(np.asarray(reference, np.float32),
                                         np.asarray(edit, np.float32)))


@dataclasses.dataclass(frozen=True)
class HostCaptionUser:
  """The host driver's user function for a ``caption_user.CaptionUser``
  (``user``, whose phrasing model's counts go to the run's outputs)."""
  user: object        # a caption_user.CaptionUser
  captions: object    # [N] the gallery's captions

  def __call__(self, session, turn, target, shown, question):
    # It answers a question about a word of the captions (UMIVR's), no
    # other.
    return self.user.respond(session, turn, target, shown,
                             self.captions[target], self.captions[shown],
                             question)


def caption_user(user, captions) -> HostCaptionUser:
  """The host driver's user function for a ``caption_user.CaptionUser``."""
  return HostCaptionUser(user, captions)
