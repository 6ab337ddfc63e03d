"""The chat-LM reasoning backend (issue #14): cached batched decoding against
a plain forward pass, JSON-constrained replies on adversarial inputs, the
free path's counting, prompts, LoRA adapters, safetensors and bfloat16.

Runs on two of SmolLM2's blocks (its real weights and tokenizer) to keep the
compiles short; the outputs of such a model are nonsense, which is what the
constrained decoder has to survive."""

import collections
import contextlib
import copy
import functools
import io
import json
import pathlib
import tempfile

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np

from recovr_jax import checksums
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.reasoning import chat_lm
from recovr_jax.reasoning import constrained
from recovr_jax.reasoning import llama_decode
from recovr_jax.reasoning import lora
from recovr_jax.reasoning import prompts
from recovr_jax.reasoning import rules
from recovr_jax.reasoning import schemas
from tests.helpers import two_blocks
from third_party import transformers_flax_llama

transformers_flax_llama.install()

from transformers import LlamaConfig  # pylint: disable=g-import-not-at-top,wrong-import-position

_STATE = {}
LIMITS = constrained.Limits(string_tokens=6, item_tokens=4, list_items=2)


def setUpModule():  # pylint: disable=invalid-name
  _STATE.update(two_blocks.write())
  d, model, params = _STATE['dir'], _STATE['model'], _STATE['params']
  # The reference: FlaxLlamaForCausalLM, jitted once over rows padded on
  # the right to REFERENCE_LENGTH (causal attention: a padding token after
  # position i changes no logit at i). Unjitted, each new length would run
  # op by op and compile every operation again.
  reference = jax.jit(lambda p, ids: model(ids, params=p).logits)
  _STATE['reference'] = functools.partial(reference, params)
  _STATE['lm'] = chat_lm.ChatLMReasoner(
      str(d), rules.RulesReasoner(lexicon), batch_size=4, limits=LIMITS)


REFERENCE_LENGTH = 32


def _last_logits(ids):
  """The reference model's logits after the last of ``ids``."""
  assert len(ids) <= REFERENCE_LENGTH, len(ids)
  padded = np.zeros((1, REFERENCE_LENGTH), np.int32)
  padded[0, :len(ids)] = ids
  return np.asarray(_STATE['reference'](padded)[0, len(ids) - 1])


def _requests(module):
  memory = schemas.SessionMemory(keep=('colour: red',), avoid=('shape: x',))
  texts = ['', 'x' * 3000, '把它变成红色的圆', 'اجعلها حمراء', 'say "}\\n',
           'make it red']
  if module in ('intent', 'reflect'):
    kind = (schemas.IntentRequest if module == 'intent'
            else schemas.ReflectRequest)
    return [kind(t, 'two blue circles', memory) for t in texts]
  if module == 'question':
    return [schemas.QuestionRequest((t, 'a red square'), memory)
            for t in texts]
  return [schemas.T2VInitRequest('two blue circles', t) for t in texts]


class ChatLMTest(absltest.TestCase):

  def test_cached_batched_decoding_matches_a_plain_forward_pass(self):
    lm = _STATE['lm']
    prefix = list(lm.vocab.encode('<|im_start|>system\nBe brief.<|im_end|>\n'))
    suffixes = [list(lm.vocab.encode('Hello there, who')),
                list(lm.vocab.encode('One'))]
    steps = 5
    gens = [constrained.free(lm.vocab, -1, steps) for _ in suffixes]
    texts, decoded = lm.decoder.generate(
        lm.params, 'test', prefix, suffixes, gens, batch_size=4,
        steps=steps + 1)
    self.assertEqual(decoded, 2 * steps)
    for suffix, text in zip(suffixes, texts):
      ids = prefix + suffix
      for _ in range(steps):  # greedy, no cache, no padding
        ids.append(int(np.argmax(_last_logits(ids))))
      expected = ''.join(lm.vocab.texts[i] or ''
                         for i in ids[len(prefix) + len(suffix):])
      self.assertEqual(text, expected)

  def test_decoding_layout_computes_the_transformers_logits(self):
    """llama_decode (weights [out, in], a head-major cache that grows)
    gives FlaxLlamaForCausalLM's logits: a left-padded prefill of two rows,
    then three cached steps, the cache grown in between."""
    lm = _STATE['lm']
    model = _STATE['model']
    shape = llama_decode.Shape.of(model.config)
    rows = [list(lm.vocab.encode('Hello there, who are')),
            list(lm.vocab.encode('One two'))]
    width, length = 8, 128
    ids = np.zeros((2, width), np.int32)
    mask = np.zeros((2, length), np.int32)
    for i, r in enumerate(rows):
      ids[i, width - len(r):] = r
      mask[i, width - len(r):width] = 1
    pos = np.maximum(np.cumsum(mask[:, :width], axis=1) - 1, 0)
    cache = llama_decode.init_cache(shape, 2, length)
    hidden, cache = llama_decode.forward(shape, lm.params, ids, mask, pos,
                                         cache)
    cache = llama_decode.grow(cache, 2 * length)
    mask = np.pad(mask, ((0, 0), (0, length)))
    mask[:, width:] = 1
    for t in range(4):
      got = np.asarray(llama_decode.logits(lm.params, hidden[:, -1]))
      for i, r in enumerate(rows):
        want = _last_logits(r)
        np.testing.assert_allclose(got[i], want, atol=2e-4, rtol=1e-4)
        r.append(int(np.argmax(want)))
      if t == 3:
        break
      step = np.asarray([[r[-1]] for r in rows], np.int32)
      positions = np.asarray([[len(r) - 1] for r in rows], np.int32)
      hidden, cache = llama_decode.forward(shape, lm.params, step, mask,
                                           positions, cache)
    self.assertEqual(int(cache['index']), width + 3)

  def test_a_prompt_read_by_two_modules_is_prefilled_once(self):
    """Without a system message (as smollm2_world is prompted) the Intent
    Decomposer and State Reflector read the same prompt: the second call
    prefills only its lead, and replies as it does from scratch."""
    lm = copy.copy(_STATE['lm'])
    lm.system = False
    memory = schemas.SessionMemory(keep=('colour: red',), avoid=())
    pairs = [('make it red', 'two blue circles'),
             ('no, squares please', 'a green square')]
    widths = []
    prefill = lm.decoder._prefill

    def counting(params, ids, *args):
      widths.append(np.asarray(ids).shape[1])
      return prefill(params, ids, *args)

    lm.decoder._prefill = counting
    try:
      lm.complete('intent', [schemas.IntentRequest(f, c, memory)
                             for f, c in pairs])
      lead = len(lm.vocab.encode('{"sigma": "'))
      widths.clear()
      reflect = [schemas.ReflectRequest(f, c, memory) for f, c in pairs]
      shared = lm.complete('reflect', reflect)
      self.assertEqual(widths, [lead])
      lm.decoder._prompts.clear()
      widths.clear()
      self.assertEqual(lm.complete('reflect', reflect), shared)
      self.assertGreater(max(widths), lead)
    finally:
      lm.decoder._prefill = prefill
      lm.decoder._prompts.clear()

  def test_finished_rows_leave_the_batch_and_change_no_row(self):
    """Rows that finish early are gathered out (batch 8 -> 4 -> 2 -> 1)
    and a chunk of 5 runs at batch 8, not 16: every row decodes the tokens
    it decodes alone."""
    lm = _STATE['lm']
    suffixes = [list(lm.vocab.encode(t)) for t in (
        'Hello there, who', 'One', 'make it red please', 'x', 'two blue')]
    budgets = [1, 2, 4, 7, 9]
    gens = [constrained.free(lm.vocab, -1, k) for k in budgets]
    texts, decoded = lm.decoder.generate(lm.params, 'compact', [], suffixes,
                                         gens, batch_size=16, steps=10)
    self.assertEqual(decoded, sum(budgets))
    for suffix, k, text in zip(suffixes, budgets, texts):
      alone, _ = lm.decoder.generate(
          lm.params, 'compact', [], [suffix],
          [constrained.free(lm.vocab, -1, k)], batch_size=1, steps=10)
      self.assertEqual(text, alone[0])
    self.assertEqual([constrained.batch_bucket(r, 16) for r in
                      (1, 2, 3, 5, 9, 13, 16)], [1, 2, 4, 8, 12, 16, 16])
    self.assertEqual([constrained.batch_bucket(r, 64) for r in
                      (17, 25, 38, 50)], [24, 32, 48, 64])
    self.assertEqual(constrained.batch_bucket(5, 5), 5)

  def test_constrained_replies_follow_the_schema_on_adversarial_inputs(self):
    lm = _STATE['lm']
    for module in schemas.MODULES:
      with self.subTest(module=module):
        requests = _requests(module)
        out = lm.call(module, requests)
        self.assertLen(out.objects, len(requests))
        self.assertTrue(all(out.first_pass))
        for obj in out.objects:
          schemas.validate(module, obj)
        if module == 'reflect':
          for obj in out.objects:
            self.assertLessEqual(len(obj['keep']), LIMITS.list_items)
    stats = lm.validity()
    self.assertEqual(stats['intent']['first_pass_valid'], 1.0)
    self.assertEqual(stats['intent']['fallback'], 0)
    self.assertGreater(lm.speed()['decoded_tokens'], 0)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      lm._report_progress(every=0.0)  # pylint: disable=protected-access
    self.assertRegex(err.getvalue(), r'\[reasoner\] [\d,]+ requests, [\d,]+ '
                     r'tokens decoded')

  def test_sigma_is_chosen_among_its_values(self):
    vocab = _STATE['lm'].vocab
    lead, gen = constrained.grammar('reflect', vocab, LIMITS)
    self.assertEqual(lead, '{"sigma": "')
    step = next(gen)
    allowed = {vocab.texts[i] for i in step.ids}
    self.assertEqual(step.content, constrained.CONTENT_NONE)
    for text in allowed:  # every allowed first token starts a sigma value
      self.assertTrue(any(s.startswith(text) for s in schemas.SIGMAS), text)

  def test_grammars_accept_the_tokenization_the_model_was_trained_on(self):
    """The reply texts of training (``prompts.reply_text``), tokenized as
    ``experiments.train.train_adapter`` tokenizes them, walk every grammar to its
    end: the tokenizer merges pieces (`` ["``, ``"],``, `` [],``) that a
    grammar forcing its literals token by token refused, so a trained
    Reflector could only close its lists (issue 25)."""
    vocab = _STATE['lm'].vocab
    tok = _STATE['lm'].tokenizer
    literals = {a: generator.VALUES[a] for a in generator.ATTRIBUTES}
    limits = constrained.Limits()
    replies = [
        ('reflect', {'sigma': 'pos', 'keep': ['shape: square', 'size: small'],
                     'avoid': ['shape: circle', 'size: large']}, literals),
        ('reflect', {'sigma': 'neu', 'keep': [], 'avoid': []}, literals),
        ('reflect', {'sigma': 'neg', 'keep': ['background: water'],
                     'avoid': []}, literals),
        ('reflect', {'sigma': 'neu', 'keep': [],
                     'avoid': ['lighting: sunset', 'count: two']}, literals),
        ('reflect', {'sigma': 'pos', 'keep': ['a red car', 'snow'],
                     'avoid': ['night']}, None),
        ('reflect', {'sigma': 'neg', 'keep': [], 'avoid': []}, None),
        ('intent', {'search': 'one small white square',
                    'edit': 'make them small'}, None),
        ('intent', {'search': 'two red circles', 'edit': ''}, None),
        ('question', {'question': 'Which colour should it be?'}, None),
        ('t2v_init', {'search': 'three blue crosses moving left'}, None),
    ]
    for module, reply, lits in replies:
      with self.subTest(module=module, reply=reply):
        text = prompts.reply_text(reply)
        lead, gen = constrained.grammar(module, vocab, limits, literals=lits)
        self.assertTrue(text.startswith(lead), text)
        self.assertEqual(tok.encode(lead, add_special_tokens=False),
                         tok.encode(text, add_special_tokens=False)[
                             :len(tok.encode(lead, add_special_tokens=False))])
        ids = tok.encode(text, add_special_tokens=False)[
            len(tok.encode(lead, add_special_tokens=False)):]
        step = next(gen)
        walked = lead
        for k, token in enumerate(ids):
          self.assertTrue(
              token in step.ids or vocab.masks[step.content][token],
              f'{vocab.texts[token]!r} refused after {walked!r}')
          walked += vocab.texts[token]
          try:
            step = gen.send(token)
          except StopIteration:
            self.assertEqual(k, len(ids) - 1, f'ended early at {walked!r}')
            break
        else:
          self.fail(f'the grammar did not end after {walked!r}')
        self.assertEqual(walked, text)
        self.assertLessEqual(len(ids), constrained.max_steps(module, limits,
                                                             lits))

  def test_literal_reflect_items_on_random_walks(self):
    """World literals: whatever allowed token is taken at every step, the
    reply is valid JSON whose items are literals, one kept value per
    attribute, no item twice, keep and avoid disjoint."""
    vocab = _STATE['lm'].vocab
    literals = {a: generator.VALUES[a] for a in generator.ATTRIBUTES}
    limits = constrained.Limits(list_items=8)
    rng = np.random.default_rng(0)
    longest = 0
    for _ in range(60):
      lead, gen = constrained.grammar('reflect', vocab, limits,
                                      literals=literals)
      text, steps = lead, 0
      step = next(gen)
      try:
        while True:
          self.assertEqual(step.content, constrained.CONTENT_NONE)
          self.assertNotEmpty(step.ids)
          token = int(rng.choice(step.ids))
          text += vocab.texts[token]
          steps += 1
          step = gen.send(token)
      except StopIteration:
        pass
      longest = max(longest, steps)
      obj = schemas.validate('reflect', json.loads(text))
      keep = [lexicon.parse_constraint(x) for x in obj['keep']]
      avoid = [lexicon.parse_constraint(x) for x in obj['avoid']]
      self.assertNotIn(None, keep + avoid, text)
      self.assertLen({a for a, _ in keep}, len(keep), text)
      self.assertLen(set(avoid), len(avoid), text)
      self.assertEmpty(set(keep) & set(avoid), text)
      self.assertLessEqual(len(avoid), limits.list_items)
    self.assertLessEqual(longest, constrained.max_steps('reflect', limits,
                                                        literals))

  def test_literal_reflect_items_from_the_model(self):
    lm = chat_lm.ChatLMReasoner(
        str(_STATE['dir']), rules.RulesReasoner(lexicon), batch_size=4,
        limits=LIMITS, reflect_literals={
            a: generator.VALUES[a] for a in generator.ATTRIBUTES})
    out = lm.call('reflect', _requests('reflect'))
    self.assertTrue(all(out.first_pass))
    for obj in out.objects:
      keep = [lexicon.parse_constraint(x) for x in obj['keep']]
      avoid = [lexicon.parse_constraint(x) for x in obj['avoid']]
      self.assertNotIn(None, keep + avoid, obj)
      self.assertEmpty(set(keep) & set(avoid), obj)
      self.assertLen({a for a, _ in keep}, len(keep), obj)

  def test_safe_tokens_cannot_break_a_json_string(self):
    vocab = _STATE['lm'].vocab
    safe = np.flatnonzero(vocab.masks[constrained.CONTENT_ANY])
    self.assertGreater(len(safe), 40_000)
    for i in safe:
      t = vocab.texts[i]
      self.assertEqual(json.loads(json.dumps(t)), t)
      self.assertNotIn('"', t)
      self.assertNotIn('\\', t)

  def test_free_decoding_counts_retries_and_fallbacks(self):
    lm = copy.copy(_STATE['lm'])  # shares the compiled decoder
    lm.constrained_decoding = lm.strict = False
    lm.stats = {m: collections.Counter() for m in schemas.MODULES}
    requests = _requests('intent')[:3]
    out = lm.call('intent', requests)
    for obj in out.objects:
      schemas.validate('intent', obj)
    s = lm.stats['intent']
    self.assertEqual(s['calls'], 3)
    self.assertEqual(s['first_pass_valid'] + s['retry_valid'] + s['fallback'],
                     3)

  def test_chat_replies_and_the_caption_phraser(self):
    from recovr_jax.envs.files import caption_user  # pylint: disable=g-import-not-at-top
    lm = _STATE['lm']
    replies = lm.chat([[{'role': 'user', 'content': 'hello'}],
                       [{'role': 'system', 'content': 'Be brief.'},
                        {'role': 'user', 'content': 'a dog on sand'}]],
                      max_tokens=4)
    self.assertLen(replies, 2)
    for reply in replies:
      self.assertIsInstance(reply, str)
    self.assertEqual(replies, lm.chat([[{'role': 'user',
                                         'content': 'hello'}]], 4) +
                     replies[1:])   # greedy: the same reply alone
    target = 'a brown dog running on a sunny beach'
    phraser = caption_user.LMPhraser(lm, max_tokens=4)
    text = phraser(target, 'a cat indoors')
    self.assertTrue(text)
    self.assertNotIn(target, text)

    class Copier:
      def chat(self, conversations, max_tokens):
        del max_tokens
        return [f'I want {target}!' for _ in conversations]

    copying = caption_user.LMPhraser(Copier())
    self.assertEqual(copying(target, 'a cat indoors'),
                     'Not this one. I am looking for brown dog running '
                     'sunny beach')
    self.assertEqual((copying.calls, copying.fallbacks), (1, 1))

  def test_prompts(self):
    tok = _STATE['lm'].tokenizer
    request = _requests('intent')[-1]
    example = prompts.Example(request, {'search': 'red', 'edit': ''})
    texts = set()
    for wording in prompts.WORDINGS:
      prefix, suffix = prompts.render(tok, 'intent', request, wording,
                                      [example])
      full = tok.apply_chat_template(
          [{'role': 'system', 'content': prompts.system_text('intent',
                                                             wording)},
           {'role': 'user', 'content': prompts.request_text(
               'intent', request, wording)},
           {'role': 'assistant', 'content': '{"search": "red", "edit": ""}'},
           {'role': 'user', 'content': prompts.request_text(
               'intent', request, wording)}],
          tokenize=False, add_generation_prompt=True)
      self.assertEqual(prefix + suffix, full)
      self.assertIn('make it red', suffix)
      texts.add(prefix)
    self.assertLen(texts, 3)
    with self.assertRaisesRegex(ValueError, 'wording must be one of'):
      prompts.system_text('intent', 4)

  def test_lora_merge_save_load(self):
    params = _STATE['params']
    adapter = lora.init(params, rank=2)
    merged = lora.merge(params, adapter, scale=2.0)
    chex.assert_trees_all_close(merged, params)  # b starts at zero
    layer = adapter['layers']['0']['q_proj']
    layer['b'] = jnp.ones_like(layer['b'])
    merged = lora.merge(params, adapter, scale=2.0)
    q = params['model']['layers']['0']['self_attn']['q_proj']['kernel']
    np.testing.assert_allclose(
        merged['model']['layers']['0']['self_attn']['q_proj']['kernel'],
        q + 2.0 * layer['a'] @ layer['b'], rtol=1e-5, atol=1e-5)
    d = lora.save({**adapter, 'scale': 2.0}, tempfile.mkdtemp() + '/a',
                  {'note': 'test'})
    loaded = lora.load(d)
    self.assertEqual(loaded['scale'], 2.0)
    chex.assert_trees_all_close(lora.merge(params, loaded), merged)
    # PEFT's layout round-trips: names, shapes, config and the same merge.
    self.assertFalse((d / 'peft').exists())  # one copy unless exported
    lora.export_peft(d, d / 'peft')
    config = json.loads((d / 'peft' / 'adapter_config.json').read_text())
    self.assertEqual((config['peft_type'], config['r'], config['lora_alpha']),
                     ('LORA', 2, 4.0))
    self.assertEqual(config['target_modules'], sorted(lora.DEFAULT_TARGETS))
    from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
    tensors = st.load_file(str(d / 'peft' / 'adapter_model.safetensors'))
    a = tensors['base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight']
    b = tensors['base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight']
    self.assertEqual(a.shape, (2, q.shape[0]))   # [r, in]
    self.assertEqual(b.shape, (q.shape[1], 2))   # [out, r]
    self.assertIn('base_model.model.model.layers.0.mlp.down_proj.lora_A.weight',
                  tensors)
    peft = lora.load_peft(d / 'peft')
    self.assertEqual(peft['scale'], 2.0)
    chex.assert_trees_all_close(lora.merge(params, peft), merged)
    (d / 'adapter.safetensors').write_bytes(b'broken')
    with self.assertRaisesRegex(ValueError, 'checksum|changed|manifest'):
      lora.load(d)

  def test_shipped_adapter_fits_smollm2(self):
    adapter = lora.load(chat_lm.DEFAULT_ADAPTER_DIR)
    meta = adapter['meta']
    self.assertLen(adapter['layers'], 30)
    self.assertEqual(lora.num_parameters(adapter), meta['parameters'])
    params = _STATE['params']['model']['layers']['0']
    for name, ab in adapter['layers']['0'].items():
      block = 'self_attn' if name.endswith(('q_proj', 'v_proj', 'o_proj')) \
          else 'mlp'
      d_in, d_out = params[block][name]['kernel'].shape
      self.assertEqual(ab['a'].shape, (d_in, meta['rank']))
      self.assertEqual(ab['b'].shape, (meta['rank'], d_out))
      self.assertTrue(np.all(np.isfinite(ab['b'])))
    self.assertLess(meta['loss_last10'], meta['loss_first10'])

  def test_safetensors_and_bfloat16_load(self):
    from safetensors import numpy as st  # pylint: disable=g-import-not-at-top
    d = pathlib.Path(tempfile.mkdtemp()) / 'st'
    d.mkdir()
    for f in _STATE['dir'].iterdir():
      if f.name not in ('flax_model.msgpack', 'checksums.json'):
        (d / f.name).write_bytes(f.read_bytes())
    st.save_file({k: np.ascontiguousarray(v, np.float32)
                  for k, v in _STATE['tensors'].items()},
                 str(d / 'model.safetensors'))
    checksums.write_manifest(d)
    self.assertTrue(chat_lm.is_chat_checkpoint(d))
    loaded = chat_lm.load_params(d, LlamaConfig(**_STATE['kwargs']))
    chex.assert_trees_all_close(loaded, _STATE['params'])
    lm = chat_lm.ChatLMReasoner(str(d), rules.RulesReasoner(lexicon),
                                batch_size=4, dtype='bfloat16', limits=LIMITS)
    self.assertEqual(lm.params['layers'][0]['q'].dtype, jnp.bfloat16)
    self.assertEqual(lm.params['head'].dtype, jnp.bfloat16)
    for obj in lm.question(_requests('question')[:2]):
      schemas.validate('question', obj)
    with self.assertRaisesRegex(ValueError, 'dtype must be one of'):
      chat_lm.ChatLMReasoner(str(d), None, dtype='float16')
    (d / 'model.safetensors').unlink()
    with self.assertRaisesRegex(FileNotFoundError,
                                'neither flax_model.msgpack nor'):
      chat_lm.load_params(d, LlamaConfig(**_STATE['kwargs']))


if __name__ == '__main__':
  absltest.main()
