"""Chat prompts of the reasoning modules for instruction-tuned LMs.

Every module's prompt lives here: a system message that describes the module
and its JSON reply, optional few-shot examples (user request, assistant JSON)
and the request itself, rendered with the checkpoint's own chat template.
Three wordings of the whole suite exist (``WORDINGS``; the paper's Table 9
measures the spread across rewordings): they say the same thing in other
words and label the request fields differently; the reply schema is the same.

A prompt is split into a ``prefix`` (system + examples, the same for every
request of a module, so its key/value cache is computed once) and a
per-request ``suffix`` (the request and the assistant header).
"""

import dataclasses
import json

from recovr_jax.reasoning import schemas

# Plain (non-chat) prompts of the tiny world GPT-2 (``reasoning.flax_lm``).
PLAIN = {
    'intent': ('Task: intent. Reply with JSON {{"search": str, "edit": str}}.'
               '\nKeep: {keep}\nAvoid: {avoid}\nShown: {shown}\n'
               'Feedback: {feedback}\nJSON:'),
    'reflect': ('Task: reflect. Reply with JSON {{"sigma": "neg"|"neu"|"pos",'
                ' "keep": [str], "avoid": [str]}}.\nKeep: {keep}\n'
                'Avoid: {avoid}\nShown: {shown}\nFeedback: {feedback}\nJSON:'),
    'question': ('Task: question. Reply with JSON {{"question": str}}.\n'
                 'Keep: {keep}\nCandidates: {candidates}\nJSON:'),
    't2v_init': ('Task: t2v_init. Reply with JSON {{"search": str}}.\n'
                 'Reference: {reference}\nModification: {modification}\n'
                 'JSON:'),
}

_SCHEMA_TEXT = {
    'intent': '{"search": "...", "edit": "..."}',
    'reflect': '{"sigma": "neg" or "neu" or "pos", "keep": ["..."], '
               '"avoid": ["..."]}',
    'question': '{"question": "..."}',
    't2v_init': '{"search": "..."}',
}

# wording -> module -> system text. Each ends with the reply format.
_SYSTEM = {
    1: {
        'intent': (
            'You help a person search a video collection. They were shown a '
            'video and gave feedback. Keep lists what the wanted video has; '
            'Avoid lists what it does not have. Write "search": a full '
            'description of the wanted video, and "edit": only the changes '
            'to make to the shown video (empty if none).'),
        'reflect': (
            'You track what a person wants while they search for a video. '
            'Read their feedback on the shown video. "sigma" is "neg" if they '
            'reject it, "pos" if it is close, else "neu". "keep" lists the '
            'properties the wanted video has and "avoid" the properties it '
            'does not have, each as "attribute: value", including earlier '
            'ones that still hold.'),
        'question': (
            'You help a person search a video collection. Given the captions '
            'of the current top results and what is known, ask one short '
            'question whose answer best tells the results apart.'),
        't2v_init': (
            'You help a person search a video collection. They describe a '
            'reference video and a change. Write "search": a description of '
            'the video they want, the reference with the change applied.'),
    },
    2: {
        'intent': (
            'Role: video search assistant. Input: the caption of the video '
            'on screen, the user\'s reaction, and the constraints known so '
            'far (must have / must not have). Output "search", a '
            'self-contained description of the target video, and "edit", '
            'the modification the on-screen video needs ("" if none).'),
        'reflect': (
            'Role: conversation state tracker for video search. Decide the '
            'user\'s verdict on the on-screen video ("sigma": "neg" = '
            'rejected, "pos" = nearly right, "neu" = neither) and update the '
            'constraints: "keep" = attribute: value pairs the target must '
            'have, "avoid" = pairs it must not have. Carry over constraints '
            'that still apply.'),
        'question': (
            'Role: video search assistant. From the captions of the leading '
            'candidates and the known constraints, write the single '
            'clarifying question that would best separate the candidates.'),
        't2v_init': (
            'Role: video search assistant. Combine the reference caption '
            'with the requested modification into one "search" description '
            'of the target video.'),
    },
    3: {
        'intent': (
            'A user is looking for one particular video. Given what the '
            'system just showed, what the user said about it, and their '
            'stated likes and dislikes, produce the text query for a search '
            'engine ("search") and the short instruction for editing the '
            'shown video into the wanted one ("edit", may be empty).'),
        'reflect': (
            'A user is looking for one particular video and comments on '
            'each result. Judge the comment (sigma: "neg" for a rejection, '
            '"pos" for nearly there, "neu" otherwise) and keep the lists of '
            'what the video should show ("keep") and should not show '
            '("avoid") up to date, written as attribute: value.'),
        'question': (
            'A user is looking for one particular video. Several candidates '
            'remain (their captions are given). Ask the user the one '
            'question that would narrow them down most.'),
        't2v_init': (
            'A user is looking for a video like a reference video but with a '
            'change. Write the search query ("search") for the video they '
            'want.'),
    },
}

# wording -> request field labels.
_LABELS = {
    1: {'keep': 'Keep', 'avoid': 'Avoid', 'shown': 'Shown',
        'feedback': 'Feedback', 'candidates': 'Candidates',
        'reference': 'Reference', 'modification': 'Modification'},
    2: {'keep': 'Must have', 'avoid': 'Must not have',
        'shown': 'On screen', 'feedback': 'User reaction',
        'candidates': 'Leading candidates', 'reference': 'Reference caption',
        'modification': 'Requested modification'},
    3: {'keep': 'Likes', 'avoid': 'Dislikes', 'shown': 'System showed',
        'feedback': 'User said', 'candidates': 'Remaining videos',
        'reference': 'Reference video', 'modification': 'Wanted change'},
}
WORDINGS = tuple(sorted(_SYSTEM))
MAX_FIELD_CHARS = 800


def _cut(text) -> str:
  return str(text).replace('\n', ' ')[:MAX_FIELD_CHARS]


def system_text(module: str, wording: int = 1) -> str:
  if wording not in _SYSTEM:
    raise ValueError(f'prompt wording must be one of {WORDINGS}, got '
                     f'{wording!r}')
  return (f'{_SYSTEM[wording][module]} Reply with JSON only: '
          f'{_SCHEMA_TEXT[module]}')


def request_text(module: str, request, wording: int = 1) -> str:
  """The user message of one request."""
  lab = _LABELS[wording]
  if module in ('intent', 'reflect'):
    m = request.memory
    rows = [(lab['keep'], '; '.join(m.keep) or '-'),
            (lab['avoid'], '; '.join(m.avoid) or '-'),
            (lab['shown'], request.shown_caption),
            (lab['feedback'], request.feedback)]
  elif module == 'question':
    rows = [(lab['keep'], '; '.join(request.memory.keep) or '-'),
            (lab['candidates'], ' | '.join(request.candidate_captions))]
  elif module == 't2v_init':
    rows = [(lab['reference'], request.reference_caption),
            (lab['modification'], request.modification)]
  else:
    raise ValueError(f'unknown reasoning module {module!r}; valid: '
                     f'{", ".join(schemas.MODULES)}')
  return '\n'.join(f'{k}: {_cut(v)}' for k, v in rows)


def reply_text(obj: dict) -> str:
  """An assistant reply as the constrained decoder writes it."""
  return json.dumps(obj, ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class Example:
  """A few-shot example: a request and the reply it should get."""
  request: object
  reply: dict


def render(tokenizer, module: str, request, wording: int = 1,
           examples=(), system: bool = True) -> tuple[str, str]:
  """``(prefix, suffix)`` of one request's chat prompt.

  ``prefix`` is the system message and the examples (identical across the
  requests of a module); ``suffix`` is the request and the assistant header.
  ``system=False`` leaves the system message out (the fine-tuned adapter is
  trained without it).
  """
  messages = []
  if system:
    messages.append({'role': 'system',
                     'content': system_text(module, wording)})
  for ex in examples:
    messages.append({'role': 'user',
                     'content': request_text(module, ex.request, wording)})
    messages.append({'role': 'assistant', 'content': reply_text(ex.reply)})
  user = {'role': 'user', 'content': request_text(module, request, wording)}
  prefix = (tokenizer.apply_chat_template(messages, tokenize=False)
            if messages else '')
  full = tokenizer.apply_chat_template(messages + [user], tokenize=False,
                                       add_generation_prompt=True)
  if not full.startswith(prefix):
    raise ValueError('the chat template does not render the conversation '
                     'as its prefix followed by the request; prefix caching '
                     'needs it to')
  return prefix, full[len(prefix):]
