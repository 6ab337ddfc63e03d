"""What a run reads and what a batch gives back, for every driver.

``Environment``: the gallery, the composed queries, the encoders and the
user's view a data source builds (``protocol.data_source.Source.build``);
``BatchResult``: one batch's shown lists, scores and turn records, as each
driver (``drivers``) returns them.
"""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

# The shown list's top, whose scores a batch keeps (trajectories'
# ``top10_scores``).
SHOWN = 10


@dataclasses.dataclass(frozen=True)
class Environment:
  """What a run reads: the gallery (Progress Memory, long-term part), the
  composed queries to answer, the encoders and the user's view."""
  gallery: np.ndarray                  # [N, D] float32 video embeddings
  captions: tuple[str, ...]            # [N] Progress Memory captions
  attributes: np.ndarray | None        # [N, A] the world's labels (the
                                       # simulated user's and the jitted
                                       # driver's view); None on real data
  reference: np.ndarray                # [Q] gallery ids
  target: np.ndarray                   # [Q] gallery ids
  modification: tuple[str, ...]        # [Q]
  encode_text: Callable[[Sequence[str]], np.ndarray]
  compose: Callable[[np.ndarray, np.ndarray], np.ndarray]
  # The same composer as a pure JAX function, for the jitted driver:
  # 'mlp' with its params, 'sum', or None.
  composer: str | None = None
  composer_params: object = None
  # [N] the videos' ids (file names on real data), for display and exports.
  video_ids: tuple[str, ...] | None = None
  # Rows [0, num_searchable) are retrieved; later rows are references only
  # (real data: CoVR's test gallery is the set of targets). None: all.
  num_searchable: int | None = None
  # [Q, D] precomputed turn-0 composed queries (real data), instead of
  # compose(v_ref, modification); None: composed.
  query_embeddings: np.ndarray | None = None
  # Annotation rows left out (--missing_ids=drop), each with its reason.
  dropped: tuple[dict, ...] = ()
  # [Q] the query each session repeats (the world's --query_repeats: the
  # per-query arrays above are tiled); None: session i is query i. The
  # bootstraps resample whole queries when queries repeat.
  query: np.ndarray | None = None

  @property
  def searchable(self) -> int:
    """How many gallery rows the ranking retrieves from."""
    return len(self.gallery) if self.num_searchable is None else (
        self.num_searchable)


@dataclasses.dataclass
class BatchResult:
  """Per-session records of one batch."""
  displayed: np.ndarray        # [S, T+1, K] int32 shown lists per turn
  top_scores: np.ndarray       # [S, T+1] float32 score of each shown top-1
  records: list[list[dict]]    # [S][turn] feedback, action, sigma, question
  scores: np.ndarray           # [S, T+1, SHOWN] float32 scores of the
                               # shown top SHOWN (the viewer's)
