"""A small reasoning LM for the world, trained on world-generated requests.

Prompts are the ``flax_lm`` backend's own (``flax_lm.prompt``); targets are
the JSON objects the rules backend writes for them, so the trained model is a
drop-in ``flax_lm`` checkpoint. Requests come from simulated sessions on the
training split (noisy and constraint-dropping users included); held-out
prompts come from the test split.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from recovr_jax import checksums
from recovr_jax.core import checks
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import paths
from recovr_jax.reasoning import flax_lm
from recovr_jax.reasoning import frames
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas

EOS = '<|endoftext|>'
MARKER = 'recovr_reasoner.json'  # marks a checkpoint trained here
DEFAULT_REASONER_DIR = str(paths.CHECKPOINTS /
                           'reasoner')


@dataclasses.dataclass(frozen=True)
class ReasonerConfig:
  seed: int = 0
  num_train: int = 24_000
  num_eval: int = 500
  vocab_size: int = 768
  n_embd: int = 128
  n_layer: int = 4
  n_head: int = 4
  max_length: int = 256
  steps: int = 2800
  batch: int = 32
  lr: float = 2e-3


def _random_memory(rng, combos, target):
  keep = [lexicon.constraint(int(a), int(target[a]))
          for a in rng.permutation(7)[:rng.integers(0, 4)]]
  avoid = []
  for a in rng.permutation(7)[:rng.integers(0, 3)]:
    v = (target[a] + rng.integers(1, generator.NUM_VALUES[a])) % (
        generator.NUM_VALUES[a])
    avoid.append(lexicon.constraint(int(a), int(v)))
  return schemas.SessionMemory(keep=tuple(keep), avoid=tuple(avoid))


def sample_requests(world, pool, n: int, seed: int, with_targets=False):
  """``n`` (module, request) pairs from simulated turns over ``pool``;
  ``with_targets``: also each session target's attributes ``[7]`` (the
  ground truth an evaluation may score against; never in a prompt)."""
  rng = np.random.default_rng(seed)
  combos = world.combos
  out, truths = [], []
  modules = ('intent', 'reflect', 'question', 't2v_init')
  weights = np.array([0.35, 0.35, 0.15, 0.15])
  for i in range(n):
    module = modules[rng.choice(4, p=weights)]
    target = combos[rng.choice(pool)]
    truths.append(np.array(target))
    if module in ('intent', 'reflect'):
      shown = target.copy()
      for a in rng.permutation(7)[:rng.integers(1, 6)]:
        shown[a] = (shown[a] + rng.integers(1, generator.NUM_VALUES[a])) % (
            generator.NUM_VALUES[a])
      user = simulated_user.SimulatedUser(simulated_user.UserConfig(
          noise_rate=float(rng.choice([0.0, 0.0, 0.05, 0.1])),
          drop_rate=float(rng.choice([0.0, 0.0, 0.2]))), seed=seed)
      question = (lexicon.question_text(rng, int(rng.integers(7)))
                  if rng.random() < 0.3 else None)
      feedback = user.respond(i, 1, 0, 1, target, shown, question)
      request_type = (schemas.IntentRequest if module == 'intent'
                      else schemas.ReflectRequest)
      out.append((module, request_type(
          feedback.text, generator.caption(rng, shown),
          _random_memory(rng, combos, target))))
    elif module == 'question':
      captions = []
      for _ in range(int(rng.integers(2, 6))):
        other = target.copy()
        for a in rng.permutation(7)[:rng.integers(0, 3)]:
          other[a] = rng.integers(generator.NUM_VALUES[a])
        captions.append(generator.caption(rng, other))
      out.append((module, schemas.QuestionRequest(
          tuple(captions), _random_memory(rng, combos, target))))
    else:
      reference = target.copy()
      named = np.zeros(7, bool)
      named[rng.permutation(7)[:rng.integers(1, 3)]] = True
      for a in np.flatnonzero(named):
        reference[a] = (reference[a] + rng.integers(
            1, generator.NUM_VALUES[a])) % generator.NUM_VALUES[a]
      out.append((module, schemas.T2VInitRequest(
          generator.caption(rng, reference),
          generator.edit_text(rng, target, named))))
  return (out, truths) if with_targets else out


def preprocess(request):
  """The closed-vocabulary spelling fixer in front of the model."""
  def fix(text):
    return ' '.join(lexicon.fix_spelling(w) if w.isalpha() and w.islower()
                    else w for w in text.split(' '))
  if isinstance(request, (schemas.IntentRequest, schemas.ReflectRequest)):
    return dataclasses.replace(request, feedback=fix(request.feedback))
  return request


def targets_of(pairs) -> list[str]:
  """The rules backend's JSON for each (module, request)."""
  reasoner = rules.RulesReasoner(lexicon)
  return [json.dumps(reasoner.call(m, [r]).objects[0]) for m, r in pairs]


def train_tokenizer(texts, vocab_size: int):
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top,g-multiple-import
  from transformers import PreTrainedTokenizerFast  # pylint: disable=g-import-not-at-top
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=[EOS],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer)
  return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS,
                                 pad_token=EOS)


def encode_pairs(tokenizer, prompts, targets, max_length: int):
  """Token ids ``[n, L]``, loss mask on target tokens, attention mask."""
  n = len(prompts)
  ids = np.full((n, max_length), tokenizer.eos_token_id, np.int32)
  loss_mask = np.zeros((n, max_length), np.float32)
  attention = np.zeros((n, max_length), np.int32)
  p_ids = tokenizer(list(prompts))['input_ids']
  t_ids = tokenizer([' ' + t for t in targets])['input_ids']
  dropped = 0
  for i, (p, t) in enumerate(zip(p_ids, t_ids)):
    seq = p + t + [tokenizer.eos_token_id]
    if len(seq) > max_length:
      dropped += 1
      p = p[len(seq) - max_length:]  # keep the end of the prompt
      seq = p + t + [tokenizer.eos_token_id]
    ids[i, :len(seq)] = seq
    attention[i, :len(seq)] = 1
    loss_mask[i, len(p):len(seq)] = 1.0
  return ids, loss_mask, attention, dropped


def trimmed_batches(rng, attention, batch: int, steps: int, max_length: int):
  """Yields ``steps`` random batches ``(rows, length)``, each trimmed to its
  longest row rounded up to 32 tokens (fewer wasted tokens, few shapes)."""
  for _ in range(steps):
    pick = rng.choice(len(attention), batch, replace=False)
    length = int(attention[pick].sum(axis=1).max())
    yield pick, min(max_length, -(-length // 32) * 32)


def train(config: ReasonerConfig, world, output_dir, progress=None) -> dict:
  """Trains, evaluates and saves the reasoner; returns its report."""
  from transformers import FlaxGPT2LMHeadModel, GPT2Config  # pylint: disable=g-import-not-at-top,g-multiple-import
  train_pairs = sample_requests(world, world.train_combos, config.num_train,
                                config.seed)
  prompts = [flax_lm.prompt(m, preprocess(r)) for m, r in train_pairs]
  targets = targets_of(train_pairs)
  tokenizer = train_tokenizer(prompts + targets, config.vocab_size)
  ids, loss_mask, attention, truncated = encode_pairs(
      tokenizer, prompts, targets, config.max_length)

  model_config = GPT2Config(
      vocab_size=len(tokenizer), n_positions=config.max_length,
      n_embd=config.n_embd, n_layer=config.n_layer, n_head=config.n_head,
      bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
      pad_token_id=tokenizer.eos_token_id)
  model = FlaxGPT2LMHeadModel(model_config, seed=config.seed)
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, config.lr, max(1, config.steps // 20), config.steps,
      config.lr * 0.05)
  opt = optax.adamw(schedule, weight_decay=0.01)
  params = model.params
  opt_state = opt.init(params)

  @jax.jit
  def step(params, opt_state, ids, loss_mask, attention):
    def loss_fn(params):
      logits = model(ids, attention_mask=attention, params=params).logits
      losses = optax.softmax_cross_entropy_with_integer_labels(
          logits[:, :-1], ids[:, 1:])
      mask = loss_mask[:, 1:]
      return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  batches = trimmed_batches(np.random.default_rng(config.seed), attention,
                            config.batch, config.steps, config.max_length)
  for i, (pick, length) in enumerate(batches):
    params, opt_state, loss = step(params, opt_state, ids[pick, :length],
                                   loss_mask[pick, :length],
                                   attention[pick, :length])
    logged = (i + 1) % 50 == 0
    if logged or i == config.steps - 1:
      loss = checks.training_loss('reasoner', i + 1, loss)
    if progress is not None:
      progress('reasoner', i + 1, config.steps,
               {'loss': loss} if logged else {})

  output_dir = pathlib.Path(output_dir).absolute()
  output_dir.mkdir(parents=True, exist_ok=True)
  model.params = params
  model.save_pretrained(output_dir)
  tokenizer.save_pretrained(output_dir)
  report = {'config': dataclasses.asdict(config),
            'parameters': int(sum(np.size(x) for x in jax.tree.leaves(params))),
            'train_prompts_truncated': truncated}
  (output_dir / MARKER).write_text(json.dumps({'spelling_fixer': True,
                                               **report}, indent=2))
  checksums.write_manifest(output_dir)
  return report


def evaluate(model_dir, world, num: int, seed: int, batch_size: int = 32):
  """First-pass validity and field accuracy on held-out (test-split) prompts.

  Accuracy compares each field with the rules backend's output for the same
  request (exact string or list equality).
  """
  pairs = sample_requests(world, np.flatnonzero(world.is_test), num,
                          seed + 10_000)
  lm = flax_lm.FlaxLMReasoner(str(model_dir),
                              fallback=rules.RulesReasoner(lexicon),
                              batch_size=batch_size, max_new_tokens=96,
                              preprocess=preprocess)
  reference = [json.loads(t) for t in targets_of(pairs)]
  by_module = {}
  for module in schemas.MODULES:
    idx = [i for i, (m, _) in enumerate(pairs) if m == module]
    if not idx:
      continue
    prompts = [flax_lm.prompt(module, preprocess(pairs[i][1])) for i in idx]
    texts = lm.generate(prompts)
    valid, exact, fields = 0, 0, {}
    for i, text in zip(idx, texts):
      obj = flax_lm.parse_json(text)
      try:
        schemas.validate(module, obj)
      except schemas.SchemaError:
        continue
      valid += 1
      exact += obj == reference[i]
      for key in reference[i]:
        fields[key] = fields.get(key, 0) + (obj[key] == reference[i][key])
    by_module[module] = {
        'prompts': len(idx), 'first_pass_valid': valid / len(idx),
        'exact_match': exact / len(idx),
        'field_accuracy': {k: v / len(idx) for k, v in fields.items()}}
  total = sum(m['prompts'] for m in by_module.values())
  return {'prompts': total,
          'first_pass_valid': sum(m['first_pass_valid'] * m['prompts']
                                  for m in by_module.values()) / total,
          'exact_match': sum(m['exact_match'] * m['prompts']
                             for m in by_module.values()) / total,
          'by_module': by_module}


def few_shot_examples(world, per_module: int = 3, seed: int = 7):
  """module -> ``prompts.Example``s from the training split, answered by
  the rules backend (the Reflector's include a rejection and an approval)."""
  from recovr_jax.reasoning import prompts  # pylint: disable=g-import-not-at-top
  pairs = sample_requests(world, world.train_combos, 40 * per_module, seed)
  replies = [json.loads(t) for t in targets_of(pairs)]
  out = {}
  for module in schemas.MODULES:
    chosen, sigmas = [], set()
    for (m, request), reply in zip(pairs, replies):
      if m != module or len(chosen) == per_module:
        continue
      if module == 'reflect' and reply['sigma'] in sigmas and len(
          sigmas) < len(schemas.SIGMAS) and len(chosen) < per_module - 1:
        continue  # cover the sigmas first
      sigmas.add(reply.get('sigma'))
      chosen.append(prompts.Example(request, reply))
    out[module] = tuple(chosen)
  return out


# --- Training data drawn like a run on the default benchmark ---------------
#
# The shipped SmolLM2 adapter is trained on sessions of the train split: the
# paper's user in its own words (training phrasings only), the captioning
# VLM's captions of rendered videos, each session's memory the chain of the
# State Reflector's replies, and as targets the replies of the rules
# reasoning over the simulator's ground truth (``TeacherReasoner``).
SESSION_RECIPE = 'sessions-v2'   # recorded in the adapter's adapter.json
# How far the shown video is from the target (attributes that differ):
# weights of k = 1..7, fixed before any result was looked at (a session's
# list is often close to the target, sometimes far).
SHOWN_DISTANCE_WEIGHTS = (1 / 1, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6, 1 / 7)
QUESTION_RATE = 0.5   # share of turns whose list comes with a question
QUESTION_CANDIDATES = 5
NOISE_RATES = (0.0, 0.05, 0.1)   # the user's surface noise, per session
POOL_SIZE = 3000   # captioned train-split videos the sessions show


class TeacherReasoner(rules.RulesReasoner):
  """The rules reasoning over the simulator's own reading of the utterance
  (``set_truth``: the values it names and the user's decision): training
  targets only, never a backend. Intent: the feedback is an edit of the
  shown video unless the user rewrote; Reflector: sigma is the decision as
  docs/definitions.md §10 maps it (Modify ``pos``, Answer ``neu``, Rewrite
  ``neg``); keep and avoid as the rules write them, so a memory keeps one
  value per attribute and never avoids a kept one."""

  _SIGMA = frames.SIGMA  # the paper's sigma of the user's decision

  def __init__(self):
    super().__init__(lexicon, reader=self)
    self._truth = None

  def set_truth(self, named: dict, action: str):
    if action not in self._SIGMA:
      raise ValueError(f'TeacherReasoner: no sigma for action {action!r}')
    self._truth = (dict(named), action)

  def parse(self, text: str) -> dict:  # the reader's interface
    del text
    if self._truth is None:
      raise RuntimeError('TeacherReasoner: set_truth before each request')
    return dict(self._truth[0])

  def _read(self, r, mentions=None):
    *read, _ = super()._read(r, mentions)   # relative: the user's decision
    return (*read, self._truth[1] != 'rewrite')

  def reflect(self, requests) -> list[dict]:
    out = super().reflect(requests)
    for o in out:
      o['sigma'] = self._SIGMA[self._truth[1]]
    return out


def caption_pool(world, captioner, size: int, seed: int):
  """``(combos [size], captions)``: train-split combinations, each rendered
  once (a fresh scene when the world has several renditions) and captioned
  by ``captioner``."""
  from recovr_jax.envs.world.models import training  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  ids = np.sort(rng.choice(world.train_combos, size, replace=False))
  if world.config.renditions == 1:
    return ids, training.caption_videos(world, captioner, world.combos[ids],
                                        world.video_keys(ids))
  keys, scenes = jax.random.split(jax.random.key(seed + 17))
  return ids, training.caption_videos(
      world, captioner, world.combos[ids], jax.random.split(keys, size),
      scene_keys=jax.random.split(scenes, size))


def _near(rng, combos, pool, target, k):
  """A pool index whose combination differs from ``target`` in ``k``
  attributes (the nearest distance to ``k`` when none does; never 0)."""
  distance = (combos[pool] != target).sum(axis=1)
  distance = np.where(distance == 0, 99, distance)
  gap = np.abs(distance - k)
  return int(rng.choice(np.flatnonzero(gap == gap.min())))


def sample_sessions(world, pool_combos, pool_captions, user_config,
                    num_sessions: int, seed: int, num_turns: int = 5,
                    progress=None):
  """Training pairs ``[(module, request, reply)]`` of ``num_sessions``
  simulated sessions on the train split, drawn like a run's: per session a
  target (a train triplet's), the T2V initializer's request (a pool
  video's caption as the reference's, the triplet's modification text),
  then ``num_turns`` feedback turns. A turn shows a captioned pool video
  ``k`` attributes from the target (``SHOWN_DISTANCE_WEIGHTS``), with
  a question (``QUESTION_RATE``: the rules Question Asker over the captions
  of ``QUESTION_CANDIDATES`` pool videos, the shown one first); the user
  (``user_config``, its surface noise drawn from ``NOISE_RATES``) answers;
  the Intent Decomposer and the State Reflector get the session's memory,
  which is the chain of the teacher's replies. Replies: the teacher's for
  intent and reflect (the simulator's ground truth), the rules backend's
  for the question and the T2V initializer (they read the world's own
  caption words and modification texts)."""
  if user_config.phrasings != 'train':
    raise ValueError("sample_sessions: the user must draw only training "
                     f"phrasings (phrasings='train'), got "
                     f"{user_config.phrasings!r}")
  rng = np.random.default_rng(seed)
  combos = np.asarray(world.combos)
  pool = np.arange(len(pool_combos))
  pool_combos = np.asarray(pool_combos)
  pool_attrs = combos[pool_combos]
  train = world.train
  teacher, plain = TeacherReasoner(), rules.RulesReasoner(lexicon)
  weights = np.asarray(SHOWN_DISTANCE_WEIGHTS) / sum(SHOWN_DISTANCE_WEIGHTS)
  users = {r: simulated_user.SimulatedUser(
      dataclasses.replace(user_config, noise_rate=r), seed=seed) for r in NOISE_RATES}
  out = []
  for s in range(num_sessions):
    q = int(rng.integers(len(train.target)))
    target = combos[train.target[q]]
    # The T2V initializer reads a reference caption (a pool video's) and a
    # train triplet's modification text.
    ref = int(rng.integers(len(pool)))
    request = schemas.T2VInitRequest(pool_captions[ref], train.edit[q])
    out.append(('t2v_init', request, plain.t2v_init([request])[0]))
    user = users[NOISE_RATES[int(rng.integers(len(NOISE_RATES)))]]
    memory = schemas.SessionMemory()
    for turn in range(1, num_turns + 1):
      k = int(rng.choice(len(weights), p=weights)) + 1
      shown = _near(rng, combos, pool_combos, target, k)
      question = None
      if rng.random() < QUESTION_RATE:
        others = [shown] + [int(i) for i in rng.choice(
            pool, QUESTION_CANDIDATES - 1, replace=False)]
        ask = schemas.QuestionRequest(
            tuple(pool_captions[i] for i in others), memory)
        reply = plain.question([ask])[0]
        out.append(('question', ask, reply))
        question = reply['question']
      fb = user.respond(s, turn, -1, -2, target, pool_attrs[shown],
                        question=question)
      if fb.action == 'stop':  # the shown video is never the target
        raise RuntimeError('sample_sessions: the user stopped on a video '
                           'that is not the target')
      teacher.set_truth(fb.mentioned, fb.action)
      caption = pool_captions[shown]
      intent = schemas.IntentRequest(fb.text, caption, memory)
      reflect = schemas.ReflectRequest(fb.text, caption, memory, question)
      out.append(('intent', intent, teacher.intent([intent])[0]))
      reflected = teacher.reflect([reflect])[0]
      out.append(('reflect', reflect, reflected))
      memory = schemas.SessionMemory(keep=tuple(reflected['keep']),
                                     avoid=tuple(reflected['avoid']))
    if progress is not None:
      progress('sessions', s + 1, num_sessions, {})
  return out


def check_adapter(meta: dict, world_config, user=None,
                  allow_other_world: bool = False) -> list[str]:
  """Checks an adapter's recorded data (``adapter.json``'s ``data``)
  against the run's world ``world_config`` and user (a ``UserConfig``);
  returns warnings (the adapter was trained on another benchmark's user or
  renditions: no leak, another distribution).

  Raises ``ValueError`` when the adapter records no data recipe, or was
  trained on another world's split (its training sessions may hold this
  world's test combinations) unless ``allow_other_world``.
  """
  data = meta.get('data')
  if not isinstance(data, dict) or 'world' not in data:
    raise ValueError('the adapter records no training data (adapter.json '
                     "has no 'data' block with its world): it predates the "
                     'recorded recipe; retrain it with python -m '
                     'experiments.train.train_adapter')
  theirs = data['world']
  try:
    split = (theirs['seed'], theirs['test_share'])
  except (KeyError, TypeError) as e:
    raise ValueError(f"the adapter's recorded world {theirs!r} lacks {e}"
                     ) from e
  warnings = []
  if split != (world_config.seed, world_config.test_share):
    ours = generator.test_split(world_config.seed, world_config.test_share)
    seen = ~generator.test_split(*split)
    overlap = float((ours & seen).sum() / ours.sum())
    message = (f'the adapter was trained on the world with seed {split[0]}, '
               f'test_share {split[1]}; {100 * overlap:.1f}% of this '
               "world's test combinations are in its training split")
    if not allow_other_world:
      raise ValueError(message + '; retrain it for this world or pass '
                       '--allow_other_world_encoders to accept the leak')
    warnings.append(message + ' (accepted)')
  if theirs.get('renditions') != world_config.renditions:
    warnings.append(f"the adapter was trained on {theirs.get('renditions')} "
                    f'rendition(s) per combination, this world has '
                    f'{world_config.renditions}')
  recorded = data.get('user', {})
  if user is not None and (recorded.get('style'), recorded.get(
      'language')) != (user.style, user.language):
    warnings.append(f"the adapter was trained on the {recorded.get('style')} "
                    f"user speaking {recorded.get('language')!r} words, this "
                    f'run\'s user is {user.style} speaking {user.language!r}')
  return warnings
