"""WebVid-CoVR-style files as a run's data source (``--data=files``).

``FilesData`` is its config; ``FilesSource`` answers the runner's questions
(``protocol.data_source.Source``). No text here goes through the embedded
world's lexicon.
"""

import dataclasses
import os
from typing import ClassVar

from recovr_jax import config_tree
from recovr_jax.envs.files import caption_user
from recovr_jax.protocol import data_source
from recovr_jax.reasoning import vocabulary
from recovr_jax.reasoning import rules

MISSING_IDS = ('error', 'drop')
PHRASERS = caption_user.PHRASERS
STARTS = ('composed', 'text')


@dataclasses.dataclass(frozen=True)
class FilesData:
  """The files of a real-data run."""
  NAME: ClassVar[str] = 'files'
  HELP_GROUP: ClassVar[str] = (
      'Files (--data=files, alias webvid_covr; docs/real-data.md)')
  #: A WebVid-CoVR-style CSV with columns pth1 (reference id), pth2 (target
  #: id), edit, txt1, txt2 (their captions).
  annotations: str | None = config_tree.setting(None)
  #: .npz/.safetensors with ids, video and captions
  #: (experiments/data/embed_videos.py writes it).
  gallery_embeddings: str | None = config_tree.setting(None)
  #: A local FlaxCLIPModel directory (FlaxCLIPModel.save_pretrained plus its
  #: tokenizer), the CLIP that embedded the gallery; nothing is downloaded.
  clip_dir: str | None = config_tree.setting(None)
  #: L2-normalise every embedding row on load (cosine scores). Off: the
  #: rows as stored, scored by a plain dot product (CoVR-2 scores averaged
  #: unit tokens so; experiments/data/import_covr.py writes them).
  normalize_rows: bool = config_tree.setting(True)
  #: .npz/.safetensors of the references that are not in
  #: --gallery_embeddings (CoVR's test gallery is the set of targets); they
  #: anchor composed queries and are never retrieved.
  reference_embeddings: str | None = config_tree.setting(None)
  #: .npz with 'query' [rows, D], the turn-0 composed query of every CSV row
  #: in order (e.g. a CoVR model's BLIP cross-attention output), used
  #: instead of composing v_ref with the edit; optional 'pth1'/'pth2' arrays
  #: are checked against the CSV row by row.
  query_embeddings: str | None = config_tree.setting(None)
  #: An annotation id found in no embedding file. error: stop, naming the
  #: CSV row and column (or the file tried). drop: leave its rows out and
  #: list them (run: <output_dir>/dropped_rows.json, counted in metrics.json
  #: and report.md; import_covr: <output>.dropped.json).
  missing_ids: str = config_tree.setting('error', choices=MISSING_IDS)
  user: caption_user.CaptionUserConfig = caption_user.CaptionUserConfig()
  #: module:function or path/to/file.py:function, your own text encoder (a
  #: Python callable list[str] -> float array [n, D]; e.g. the BLIP text encoder of the
  #: model that embedded the gallery, docs/real-data.md), used wherever text
  #: is encoded instead of --clip_dir's (which is then not needed). Checked
  #: per call: shape [n, D] with the gallery's D, finite values.
  text_encoder: str | None = config_tree.setting(None)
  #: module:function or path/to/file.py:function, your own composer
  #: (reference [B, D], text [B, D] ->
  #: query [B, D]; e.g. CoVR's BLIP composer) instead of the normalised sum.
  #: Checked per call like --text_encoder.
  composer: str | None = config_tree.setting(None)
  #: As the world's --start (one flag for both): 'composed' (a WebVid-CoVR
  #: CSV) or 'text' (text-to-video queries in MSR-VTT-1kA's layout, no
  #: reference video; data.load_text_queries).
  start: str = config_tree.setting('composed', choices=STARTS)

  def describe(self) -> str:
    """The benchmark in words, for captions and report headers."""
    name = os.path.basename(self.annotations or '') or 'no annotations'
    return f'the annotations {name}'


# What real files offer the reasoners: no lexicon applies, so the rules pass
# the user's words through (``FreeTextReasoner``); no grounding, no few-shot
# examples (the world's would mislead), no default flax_lm checkpoint (the
# shipped one knows only the world's words).
VOCABULARY = vocabulary.Vocabulary(data='files',
                                   rules=rules.FreeTextReasoner)


class FilesSource(data_source.Source, data_source.ExtraOutputs):
  """Annotation CSV, precomputed gallery embeddings, a local CLIP, the
  caption user and the free-text reasoners."""

  NAME = 'files'
  # No traced face: under --simulation=jit the caption user and the
  # reasoning stay on the host, a turn per pass (drivers.jit_driver.
  # Stepped).
  OUTPUT_FILES = ('user_phraser.json', 'text_truncation.json')

  def problems(self, create, num_sessions):
    del create, num_sessions
    c = self.config
    out = []
    if c.missing_ids not in MISSING_IDS:
      out.append(f'--missing_ids must be error or drop, got {c.missing_ids!r}')
    if c.start not in STARTS:
      out.append(f'--start must be composed or text, got {c.start!r}')
    elif c.start == 'text' and (c.query_embeddings or
                                c.reference_embeddings):
      out.append('--start=text: sessions have no reference video, so '
                 '--query_embeddings and --reference_embeddings do not '
                 'apply')
    if c.user.phraser not in PHRASERS:
      out.append(f'--user_phraser must be none or smollm2, got '
                 f'{c.user.phraser!r}')
    elif c.user.phraser == 'smollm2':
      from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
      problem = gguf_llama.smollm2_problem()
      if problem:
        out.append(f'--user_phraser=smollm2: {problem}')
    missing = [f'--{name}' for name in ('annotations', 'gallery_embeddings')
               if not getattr(c, name)]
    if not c.clip_dir and not c.text_encoder:
      missing.append('--clip_dir or --text_encoder')
    if missing:
      out.append(f'--data=files needs {", ".join(missing)}')
    from recovr_jax.envs.files import callables  # pylint: disable=g-import-not-at-top
    for flag, spec in (('--text_encoder', c.text_encoder),
                       ('--composer', c.composer)):
      if spec:
        try:
          callables.module_file(spec, flag)
        except ValueError as e:
          out.append(str(e))
    absent = [f'--{name} {getattr(c, name)}'
              for name in ('annotations', 'gallery_embeddings',
                           'reference_embeddings', 'query_embeddings')
              if getattr(c, name) and not os.path.isfile(getattr(c, name))]
    if absent:
      out.append(f'{"; ".join(absent)}: no such file')
    if c.clip_dir and not c.text_encoder:
      from recovr_jax.envs.files import clip_encoder  # pylint: disable=g-import-not-at-top
      try:
        clip_encoder.check_clip_dir(c.clip_dir)
      except FileNotFoundError as e:
        out.append(f'--clip_dir: {e}')
    return out

  def input_paths(self):
    paths = {name: getattr(self.config, name)
             for name in ('annotations', 'gallery_embeddings', 'clip_dir',
                          'reference_embeddings', 'query_embeddings')
             if getattr(self.config, name)}
    if self.config.user.phraser == 'smollm2':
      from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
      paths['user_phraser_gguf'] = str(gguf_llama.find_smollm2())
    if self.config.text_encoder:  # its code, not the CLIP's, encodes text
      paths.pop('clip_dir', None)
    from recovr_jax.envs.files import callables  # pylint: disable=g-import-not-at-top
    for name in ('text_encoder', 'composer'):
      spec = getattr(self.config, name)
      if spec and callables.module_file(spec, f'--{name}'):
        paths[f'{name}_module'] = callables.module_file(spec, f'--{name}')
    return paths

  def build(self, cache_dir, num_sessions=None):
    del cache_dir, num_sessions
    from recovr_jax.envs.files import files_environment  # pylint: disable=g-import-not-at-top
    c = self.config
    try:
      env = files_environment.real_environment(
          c.annotations, c.gallery_embeddings, c.clip_dir,
          normalize_rows=c.normalize_rows,
          reference_embeddings=c.reference_embeddings,
          query_embeddings=c.query_embeddings, missing_ids=c.missing_ids,
          text_encoder=c.text_encoder, composer=c.composer, start=c.start)
    except ValueError as e:  # the message names the file, row or column
      raise data_source.SourceError(str(e)) from e
    return data_source.Built(env=env)

  def user(self, env, seed):
    from recovr_jax.envs.files import files_environment  # pylint: disable=g-import-not-at-top
    phrase = None
    if self.config.user.phraser == 'smollm2':
      from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
      from recovr_jax.reasoning import rules  # pylint: disable=g-import-not-at-top
      phrase = caption_user.LMPhraser(
          chat_lm.make('smollm2', rules.FreeTextReasoner(), batch_size=1),
          seed=seed)
    return files_environment.caption_user(
        caption_user.CaptionUser(drop_rate=self.config.user.drop_rate,
                                 seed=seed, phrase=phrase),
        env.captions)

  def vocabulary(self, cache_dir):
    del cache_dir
    return VOCABULARY

  def extra_outputs(self, built, user):
    out = {}
    text = built.env.encode_text
    truncated = getattr(text, 'truncated', None)
    if truncated:  # the CLIP text tower read only the first tokens of these
      longest = sorted(truncated.items(), key=lambda kv: -kv[1])
      out['text_truncation.json'] = (
          {'max_tokens': text.max_tokens,
           'texts_encoded': len(text.encoded),
           'texts_truncated': len(truncated),
           'longest': [{'text': t, 'tokens': n} for t, n in longest[:5]]},
          f'text encoder: {len(truncated)} of {len(text.encoded)} '
          f'distinct texts were longer than its {text.max_tokens} '
          'token positions and were encoded from their first tokens '
          '(text_truncation.json)')
    phrase = user.user.phrase  # files_environment.HostCaptionUser's
    if phrase is None or not phrase.calls:
      return out
    counts = {'calls': phrase.calls, 'fallbacks_to_rules': phrase.fallbacks}
    out['user_phraser.json'] = (
        counts, f'user phraser: {phrase.fallbacks} of {phrase.calls} '
        'replies were empty or copied the target caption and fell back to '
        'the rules user\'s words')
    return out
