"""What a data source offers the reasoner backends (``Vocabulary``).

The source makes one (``protocol.data_source.Source.vocabulary``) and the
registry makes the run's reasoner over it (``registry.make``), so no backend
asks which source it runs on and no source imports the registry.
"""

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """What a data source offers the backends (``None``: not offered)."""
  data: str                          # the source's name, for messages
  rules: Callable[[], Any]           # the lexicon-only reasoner (fallback)
  grounding: Any = None              # the grounding reader's maker
  # The few-shot examples (module -> prompts.Example), per module at most n.
  examples: Callable[[int], dict] | None = None
  literals: dict | None = None       # the Reflector's items per attribute
  preprocess: Callable | None = None  # the lexicon's spelling fixer
  lm_checkpoint: str | None = None   # flax_lm's default checkpoint
  # flax_lm: the checkpoint directory -> the preprocess it was trained with.
  lm_preprocess: Callable[[str], Callable | None] | None = None
  # smollm2_world: checks adapter.json's contents against this source
  # (ValueError naming the problem; warnings printed).
  check_adapter: Callable[[dict], None] | None = None
  # Why only the backends that read the lexicon alone (``LEXICAL``) can run
  # here, naming the flag (e.g. the world's layout words, which no other
  # reader knows); None: any backend.
  lexical_only: str | None = None
  # The simulator's own meaning of its words, ``() -> reader`` with
  # ``parse(text) -> {attribute: value}`` (``--reasoner=upper_bound``: an
  # upper bound on reading, an oracle ablation); None: a source whose user
  # is not simulated with values.
  meanings: Callable[[], Any] | None = None
