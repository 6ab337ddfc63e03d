r"""CoVR's turn-0 composed queries and target features, exported for recovr_jax.

Run this in YOUR CoVR environment (PyTorch and a CoVR checkout, where
CoVR's ``test.py`` runs), not in recovr_jax's: it imports nothing from
recovr_jax, JAX or absl, only NumPy and, for the model, torch. CoVR builds
its model and test data with hydra; ``ExportWebVidCoVR`` takes the place of
CoVR's WebVid-CoVR test callable (``src/test/webvid_covr.py``), so the
checkpoint, the frame loading and the target pooling are CoVR's own:

    cd /path/to/CoVR
    PYTHONPATH=/path/to/recovr_jax/experiments/data python test.py \
        test=webvid-covr model/ckpt=webvid-covr \
        test.webvid-covr.test._target_=export_covr.ExportWebVidCoVR \
        +test.webvid-covr.test.output=/data/covr_queries.npz \
        +test.webvid-covr.test.gallery_output=/data/covr_gallery.npz

(the config group names are those of CoVR's ``configs/``; check yours with
``python test.py --cfg job``). It writes

* ``output``: ``query`` ``[rows, D]``, the composed query of every row of
  the annotation CSV in the CSV's order (BLIP's image-grounded text
  encoder over the reference frames and the edit, its [ENC] token through
  ``text_proj``, unit length: what CoVR scores against the targets), with
  ``pth1`` / ``pth2`` per row, which recovr_jax checks row by row;
* ``gallery_output`` (optional): ``ids`` (``pth2``), ``video`` (each
  target's feature as CoVR's data loader pooled it, ``emb_pool``: by
  default the ``scores``-weighted frames) and ``captions`` (``txt2``).

then, in recovr_jax's environment:

    python -m experiments.run --data=files \
        --annotations=webvid8m-covr_test.csv \
        --gallery_embeddings=/data/covr_gallery.npz \
        --query_embeddings=/data/covr_queries.npz --clip_dir=...

Run it on one process (no DDP): the rows are put back in the CSV's order
here. Each file is written to a temporary name and renamed, and nothing is
written when a CSV row has no query (a row CoVR's loader dropped) or a
feature is not finite. It has no command line of its own: it runs inside
CoVR's ``test.py``, configured there.
"""

import csv
import os
import pathlib
import tempfile

import numpy as np


def _numpy(x) -> np.ndarray:
  """A torch tensor (on any device) or an array, as NumPy."""
  if hasattr(x, 'detach'):
    x = x.detach().float().cpu().numpy()
  return np.asarray(x)


def _unpack(batch):
  """``(ref_img, target feature, edits, pair ids)`` of a CoVR test batch: a
  dict (``ref_img``, ``tar_img_feat``, ``edit``, ``pair_id``) or, in older
  CoVR versions, a tuple in that order."""
  if isinstance(batch, dict):
    return (batch['ref_img'], batch['tar_img_feat'], batch['edit'],
            batch['pair_id'])
  ref_img, target, edits, pair_ids = batch[:4]
  return ref_img, target, edits, pair_ids


def blip_query_encoder(model):
  """``encode(ref_img, edits) -> [B, D]`` NumPy: CoVR-BLIP's composed query.

  The reference frames go through the vision encoder; the edit, with its
  first token replaced by the tokenizer's [ENC] token, through the text
  encoder cross-attending to them; the [ENC] output through ``text_proj``,
  made unit length (BLIP's image-grounded text encoding, as CoVR's test
  scores it)."""
  import torch  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as functional  # pylint: disable=g-import-not-at-top

  def encode(ref_img, edits):
    with torch.no_grad():
      image = model.visual_encoder(ref_img)
      image_mask = torch.ones(image.shape[:-1], dtype=torch.long,
                              device=image.device)
      tokens = model.tokenizer(list(edits), padding='longest',
                               truncation=True, max_length=64,
                               return_tensors='pt').to(image.device)
      ids = tokens.input_ids.clone()
      ids[:, 0] = model.tokenizer.enc_token_id
      hidden = model.text_encoder(
          ids, attention_mask=tokens.attention_mask,
          encoder_hidden_states=image, encoder_attention_mask=image_mask,
          return_dict=True).last_hidden_state
      query = functional.normalize(model.text_proj(hidden[:, 0, :]), dim=-1)
    return _numpy(query)

  return encode


def read_rows(csv_path) -> list[dict]:
  """The annotation CSV's rows (``pth1``, ``pth2``, ``txt2`` at least)."""
  with open(csv_path, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  if not rows:
    raise ValueError(f'{csv_path}: no data rows')
  missing = [c for c in ('pth1', 'pth2') if c not in rows[0]]
  if missing:
    raise ValueError(f'{csv_path}: no column {missing[0]!r}')
  return rows


def in_csv_order(rows, pth1, pth2, queries, edits=None) -> np.ndarray:
  """``queries`` (one per exported ``(pth1[i], pth2[i])``, with its
  ``edits[i]`` when the CSV has an ``edit`` column: a pair repeated with
  another edit is another query) in the order of the CSV ``rows``; a row
  without a query is an error naming it."""
  by_edit = edits is not None and 'edit' in rows[0]
  index = {}
  for i, key in enumerate(zip(pth1, pth2)):
    index.setdefault(key + ((str(edits[i]),) if by_edit else ()), i)
  order = []
  for n, row in enumerate(rows, start=2):
    key = (row['pth1'], row['pth2']) + ((row['edit'],) if by_edit else ())
    if key not in index:
      raise ValueError(f'CSV row {n} ({key[0]} -> {key[1]}) has no exported '
                       "query: CoVR's data loader left it out (a missing "
                       'video?); recovr_jax needs one query per row')
    order.append(index[key])
  return np.asarray(queries)[order]


def _save(path, **arrays):
  """``np.savez`` through a temporary file and a rename."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix='.npz', dir=path.parent)
  os.close(fd)
  try:
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


class ExportWebVidCoVR:
  """A drop-in for CoVR's WebVid-CoVR test callable that writes the queries
  (and the target features) instead of scoring them.

  Args:
    output: the queries ``.npz`` (module docstring).
    gallery_output: optional gallery ``.npz`` of the target features.
    encode: ``encode(ref_img, edits) -> [B, D]``; default
      ``blip_query_encoder(model)``.
  """

  def __init__(self, output, gallery_output=None, encode=None, **unused):
    del unused   # CoVR's other test options (e.g. remove_self_similarity)
    self.output = output
    self.gallery_output = gallery_output
    self.encode = encode

  def __call__(self, model, data_loader, fabric=None):
    if fabric is not None and getattr(fabric, 'world_size', 1) > 1:
      raise ValueError('run the export on one process (the rows are put '
                       "back in the CSV's order here)")
    if hasattr(model, 'eval'):
      model.eval()
    encode = self.encode or blip_query_encoder(model)
    dataset = data_loader.dataset
    queries, targets, pair_ids, all_edits = [], [], [], []
    for batch in data_loader:
      ref_img, target, edits, ids = _unpack(batch)
      all_edits.extend(edits)
      queries.append(np.asarray(encode(ref_img, edits), np.float32))
      targets.append(_numpy(target).astype(np.float32))
      pair_ids.extend(int(i) for i in _numpy(ids).reshape(-1))
    queries, targets = np.concatenate(queries), np.concatenate(targets)
    # A pair id is the index of its target caption in the dataset; the
    # dataset's table, indexed by that caption, holds the row's videos.
    rows = [dataset.df.loc[dataset.target_txts[i]] for i in pair_ids]
    pth1 = [str(r['pth1']) for r in rows]
    pth2 = [str(r['pth2']) for r in rows]
    for name, x in (('query', queries), ('target feature', targets)):
      bad = ~np.isfinite(x).all(axis=1)
      if bad.any():
        raise ValueError(f'the {name} of {pth1[int(np.argmax(bad))]} -> '
                         f'{pth2[int(np.argmax(bad))]} is not finite')
    csv_rows = read_rows(dataset.annotation_pth)
    ordered = in_csv_order(csv_rows, pth1, pth2, queries, all_edits)
    gallery = None
    if self.gallery_output:
      first = {}
      for i, v in enumerate(pth2):
        first.setdefault(v, i)
      ids = list(dict.fromkeys(r['pth2'] for r in csv_rows))
      gallery = dict(
          ids=np.array(ids, str),
          video=targets[[first[v] for v in ids]],
          captions=np.array([next(r.get('txt2', '') for r in csv_rows
                                  if r['pth2'] == v) for v in ids], str))
    _save(self.output, query=ordered.astype(np.float32),
          pth1=np.array([r['pth1'] for r in csv_rows], str),
          pth2=np.array([r['pth2'] for r in csv_rows], str))
    if gallery is not None:
      _save(self.gallery_output, **gallery)
    print(f'wrote {self.output}: {len(csv_rows)} queries x '
          f'{ordered.shape[1]}' + (f'; {self.gallery_output}: '
                                   f'{len(gallery["ids"])} targets'
                                   if gallery is not None else ''))
