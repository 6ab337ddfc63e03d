"""A joined dialogue within a text encoder's window.

IVR and UMIVR (and their rank-cap transplants) encode the dialogue so far
as one text: the modification text and every utterance since, joined with
``SEPARATOR``. A text encoder reads a bounded number of tokens (its window:
256 for all-MiniLM-L6-v2, 77 for CLIP); a tokenizer that truncates cuts the
end, which here is the user's newest words. ``fit`` cuts the oldest
feedback instead, never the modification text or the newest feedback
(``docs/definitions.md``), and ``truncation_table`` counts, per method and
turn, what a run's dialogues lost.
"""

from collections.abc import Callable, Iterable

SEPARATOR = ' [SEP] '
# The turn fields ``dialogues`` reads of a trajectories row.
READS = ('turn', 'action', 'feedback')
RULE = ('oldest feedback dropped first; never the modification text or the '
        'newest feedback')


def fit(text: str, count: Callable[[str], int],
        window: int) -> tuple[str, int, int]:
  """``(fitted, dropped, over)``: ``text`` with its oldest feedback
  utterances dropped (``dropped`` of them) until ``count(fitted)`` tokens
  fit ``window``. A text that is not a joined dialogue, or whose first and
  last parts alone are longer, is cut by the encoder from its end: ``over``
  tokens past the window (0 when it fits)."""
  tokens = count(text)
  if tokens <= window:
    return text, 0, 0
  parts = text.split(SEPARATOR)
  fitted, dropped = text, 0
  for dropped in range(1, len(parts) - 1):
    fitted = SEPARATOR.join(parts[:1] + parts[1 + dropped:])
    tokens = count(fitted)
    if tokens <= window:
      return fitted, dropped, 0
  return fitted, dropped, tokens - window


def dialogues(row: dict) -> Iterable[tuple[int, str]]:
  """``(turn, joined dialogue)`` of each feedback turn a session of a
  dialogue-joining method encoded (``row``: a ``trajectories.jsonl`` row;
  its turn 0's feedback is the modification text)."""
  said = [row['turns'][0]['feedback']]
  for turn in row['turns'][1:]:
    if turn.get('action') in (None, 'stopped'):
      continue
    said.append(turn['feedback'])
    yield turn['turn'], SEPARATOR.join(said)


def truncation_table(trajectories, methods, cuts) -> dict:
  """Per method in ``methods`` and turn: the dialogues encoded, how many
  were longer than the window, the feedback utterances dropped, and how
  many were still cut by the encoder. ``cuts(texts)``: each text's
  ``(dropped, over)`` (``fit``'s)."""
  rows = [(r['method'], t, text) for r in trajectories
          if r['method'] in methods for t, text in dialogues(r)]
  table = {m: {} for m in methods}
  for (method, turn, _), (dropped, over) in zip(
      rows, cuts([text for _, _, text in rows])):
    cell = table[method].setdefault(str(turn), dict(
        dialogues=0, over_window=0, feedback_dropped=0, still_cut=0))
    cell['dialogues'] += 1
    cell['over_window'] += bool(dropped or over)
    cell['feedback_dropped'] += dropped
    cell['still_cut'] += bool(over)
  return table
