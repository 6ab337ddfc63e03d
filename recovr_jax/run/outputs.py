"""What a finished run writes: metrics with intervals, the paired
bootstrap, failure modes, trajectories, ranks, tables, the report, plots, and
the wall time by part.
"""

import dataclasses
import json
import time

import numpy as np

from recovr_jax import checksums
from recovr_jax import methods
from recovr_jax import profiling
from recovr_jax.protocol import dialogue
from recovr_jax.reasoning import upper_bound
from recovr_jax.run import ask_scores
from recovr_jax.run import figures
from recovr_jax.run import reporting
from recovr_jax import trajectory_files
from recovr_jax.run import validation


# What a finished run leaves in its directory besides batches/ and the lock
# (a --noresume run removes these before it starts; INCOMPLETE marks a
# directory whose run has not finished).
OUTPUT_FILES = ('metrics.json', 'metrics.csv', 'ranks.csv', 'tables.tex',
                'report.md', 'bootstrap.json', 'bootstrap_also.json',
                'failure_modes.json', 'rank_cap_firing.json',
                'trajectories.jsonl', 'trajectories.parquet',
                'dropped_rows.json', 'profile.json',
                'profile.md', 'plot_*.png', 'plot_*.pdf',
                'reasoner_speed.json', 'reader.json',
                't2v_ceiling.json', 'text_truncation.json')
INCOMPLETE = 'INCOMPLETE'


def write_profile(out, profile):
  """``profile.json`` / ``profile.md``: the run's wall time by part."""
  report = profile.report()
  (out / 'profile.json').write_text(json.dumps(report, indent=2))
  (out / 'profile.md').write_text(
      '# Where the wall time went\n\nExclusive seconds per part of this '
      'run (recovr_jax.profiling); resumed batches are loaded, '
      'not run.\n\n' + profiling.table(report) + '\n')
  print('time by part: ' + ', '.join(
      f'{name} {p["seconds"]:.0f}s' for name, p in report['parts'].items()
      if p['seconds'] >= 0.5) + f' (of {report["wall_s"]:.0f}s; {out}/'
      'profile.md)')


def lm_speed(reasoner):
  """A language-model reasoner's time and token counters (None: none)."""
  return reasoner.speed() if hasattr(reasoner, 'speed') else None


def speed_row(wall, sessions, turns, before, after) -> dict:
  """One method's wall time per session turn and its LM's throughput
  (batches run in this process only; resumed batches are not timed)."""
  delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
  lm = delta.get('seconds', 0.0)
  return {'sessions_timed': int(sessions), 'wall_seconds': round(wall, 1),
          'seconds_per_turn': round(wall / (sessions * (turns + 1)), 4),
          'lm_seconds': round(lm, 1),
          'lm_requests': int(delta.get('requests', 0)),
          'prompt_tokens': int(delta.get('prompt_tokens', 0)),
          'decoded_tokens': int(delta.get('decoded_tokens', 0)),
          'decoded_tokens_per_s': round(
              delta.get('decoded_tokens', 0) / lm, 1) if lm else 0.0,
          'tokens_per_s': round((delta.get('decoded_tokens', 0) +
                                 delta.get('prompt_tokens', 0)) / lm, 1)
                          if lm else 0.0}


def write_reasoner_notes(out, speed, reasoner) -> None:
  """``reasoner_speed.json`` (a language-model reasoner's speed per method)
  and ``reader.json`` (the grounding reader's fitted threshold and reads)."""
  if speed:
    (out / 'reasoner_speed.json').write_text(json.dumps(speed, indent=2))
    print('reasoner speed: ' + '; '.join(
        f'{m} {v["seconds_per_turn"]:.2f} s/turn, '
        f'{v["decoded_tokens_per_s"]:.1f} decoded tokens/s'
        for m, v in speed.items()), flush=True)
  fit = getattr(reasoner, 'fit', None)
  if fit is not None:  # --reasoner=grounded: its threshold and its reads
    reader = reasoner.reader
    (out / 'reader.json').write_text(json.dumps(
        {'threshold_fit': fit, 'parses': reader.calls,
         'values_grounded': reader.grounded}, indent=2))
    print(f'grounding reader: threshold {fit["threshold"]:.2f} (fitted on '
          f'{fit["utterances"]} train-split utterances); '
          f'{reader.grounded} values grounded in {reader.calls} parses',
          flush=True)


def t2v_ceiling(env, captions: dict, sessions, list_length: int,
                num_resamples: int, seed: int) -> dict:
  """The T2V ceiling of a run's sessions: for each kind of ``captions``
  (``Source.target_captions``), the gallery searched with the target's own
  caption (its reference excluded), R@1/5/10 with 95% session-bootstrap
  intervals. A diagnostic of the benchmark: no method reads a target."""
  from recovr_jax.core import retrieval  # pylint: disable=g-import-not-at-top
  targets = np.asarray(env.target)[sessions]
  references = np.asarray(env.reference)[sessions]
  gallery = np.asarray(env.gallery, np.float32)[:env.searchable]
  # A reference outside the searchable gallery (real data: references
  # are stored after the targets) has nothing to exclude.
  references = np.where(references < env.searchable, references, -1)
  out = {}
  for kind, texts in captions.items():
    queries = np.asarray(env.encode_text([texts[t] for t in targets]),
                         np.float32)
    ids, _ = retrieval.retrieve(queries, gallery, list_length,
                                exclude=references)
    shown = np.asarray(ids)[:, None, :]   # one turn
    m = reporting.method_metrics(shown, targets)
    iv = reporting.intervals(shown, targets, num_resamples, seed,
                             None if env.query is None else
                             np.asarray(env.query)[sessions])
    out[kind] = {key: {'value': m[key][0], 'lower': iv[key]['lower'][0],
                       'upper': iv[key]['upper'][0]}
                 for key in ('R@1', 'R@5', 'R@10')}
  return out


def ceiling_markdown(ceiling: dict) -> str:
  lines = ['## T2V ceiling', '',
           'The gallery searched with the target\'s own caption (reference '
           'excluded): how far words alone can find the target. No method '
           'reads it.', '', '| target caption | R@1 | R@5 | R@10 |',
           '|---|---:|---:|---:|']
  for kind, row in ceiling.items():
    lines.append(f'| {kind} | ' + ' | '.join(
        f'{100 * row[k]["value"]:.1f} [{100 * row[k]["lower"]:.1f}, '
        f'{100 * row[k]["upper"]:.1f}]' for k in ('R@1', 'R@5', 'R@10')) +
                 ' |')
  return '\n'.join(lines) + '\n'


def _in_words(settings) -> str:
  """A settings dataclass as ``name value`` pairs (``noise rate 0.1``)."""
  return ', '.join(f'{f.name.replace("_", " ")} {getattr(settings, f.name)}'
                   for f in dataclasses.fields(settings))


def _header(config, env, num_sessions: int, benchmark: str,
            clusters: int | None = None) -> str:
  """The report's opening: the benchmark, the sessions, the reasoner and
  the methods, then the protocol's settings in words (``clusters``: the
  distinct queries the intervals resample, when fewer than the
  sessions)."""
  clusters = num_sessions if clusters is None else clusters
  loop, ask = config.loop, config.settings.ask
  shown = '; '.join(methods.display_name(m) for m in config.methods)
  asking_line = ('no questions' if ask.mode == 'never' else
                 f'asking: {_in_words(ask)}')
  return '\n'.join([
      f'# ReCoVR and baselines on {benchmark}', '',
      f'**{num_sessions:,} sessions**, {env.searchable:,} videos searched; '
      f'reasoner **{config.reasoner.name}**; methods: {shown}.', ''] + (
          [f'**Upper bound on reading**: {upper_bound.LABEL}.', '']
          if config.reasoner.name == upper_bound.NAME else []) + [
      f'Protocol: T = {loop.num_turns} feedback turns, window W = '
      f'{loop.window}, K = {loop.list_length} shown, RRF k = '
      f'{loop.rrf_k:g}, kappa = {loop.kappa} (kappa_pos is the project\'s '
      f'assumption), rank-cap placement {loop.rank_cap_placement}, avoid '
      f'penalty {config.settings.avoid_penalty:g}; {asking_line}.', '',
      f'Simulated user: {_in_words(config.data.user)}.'] + (
          ['', f'**Only {figures.counted(num_sessions, clusters)}**: '
           'every interval below is rough (at least '
           f'{figures.FEW_SESSIONS} are advised).']
          if clusters < figures.FEW_SESSIONS else []) + (
              ['', whole_gallery_note(loop.list_length, env.searchable)]
              if loop.list_length >= env.searchable - 1 else []))


def whole_gallery_note(list_length: int, searchable: int) -> str:
  """The note of a run whose lists hold every video but the reference (K
  at least the gallery's size less one)."""
  return (f'Note: K = {list_length} shown, over a gallery of {searchable} '
          'videos: every list holds every video but the reference, so '
          'Hits@K and R@K at that K are 100% by construction (--list_length '
          'below the gallery size to measure them).')


def write_dialogue_truncation(config, out, env, documents, method_names):
  """Adds to ``text_truncation.json`` what the dialogues of the methods
  that join them lost to the text encoder's window, per method and turn
  (``dialogue.truncation_table``), where the encoder tells
  (``encode_text.cuts``); ``documents(methods)``: those methods' session
  documents."""
  cuts = getattr(env.encode_text, 'cuts', None)
  joined = [m for m in method_names
            if methods.make(m, config.settings).joins_dialogue]
  if cuts is None or not joined:
    return
  table = dialogue.truncation_table(documents(joined), joined, cuts)
  path = out / 'text_truncation.json'
  notes = json.loads(path.read_text()) if path.exists() else {}
  notes['dialogues'] = dict(window=env.encode_text.window, rule=dialogue.RULE,
                            methods=table)
  path.write_text(json.dumps(notes, indent=2, sort_keys=True))
  cut = {m: sum(c['over_window'] for c in turns.values())
         for m, turns in table.items()}
  if any(cut.values()):
    print('text encoder: dialogues longer than its '
          f'{env.encode_text.window}-token window lost their oldest feedback: '
          + ', '.join(f'{m} {n}' for m, n in cut.items() if n) +
          ' (text_truncation.json)', flush=True)


def write(config, out, env, sessions, collected, start, ceiling=None,
          ask_truth=None):
  """Every output of a finished run (``collected``: ``runner.Collected``);
  returns the per-method metrics. ``ask_truth``: the source's
  ``AskTruth`` (each method's ``asking`` scores), or None. ``RunFailed``
  after writing them when more sessions raised than --max_error_share
  allows."""
  displayed, trajectories = collected.displayed, collected.trajectories
  reasoning_counts, raised = collected.reasoning_counts, collected.raised
  fired = collected.fired
  targets = np.asarray(env.target)[sessions]
  # Each session's query where queries repeat: the bootstraps resample them.
  queries = None if env.query is None else np.asarray(env.query)[sessions]
  # What the intervals resample: the distinct queries (the sessions
  # without repeats); the marks and the "ahead" sentences need enough.
  clusters = len(sessions) if queries is None else len(np.unique(queries))
  benchmark = config.data.describe()   # captions, titles, header
  if config.reasoner.name == upper_bound.NAME:  # labelled wherever it shows
    benchmark += ', read by the upper bound on reading (an oracle)'
  per_method = {m: reporting.method_metrics(d, targets)
                for m, d in displayed.items()}
  for m, d in displayed.items():
    per_method[m]['intervals'] = reporting.intervals(
        d, targets, config.bootstrap_resamples, config.seed, queries)
  failures = {m: reporting.failure_table(d, targets)
              for m, d in displayed.items()}
  # Rank-cap firing, for the methods that rank-cap.
  firing = {m: reporting.firing_table(d, targets, fired[m])
            for m, d in displayed.items()
            if methods.make(m, config.settings).ranking(
                config.loop).rank_cap}
  boot = None
  against = config.bootstrap_baseline
  if against not in displayed:
    against = reporting.strongest_baseline(per_method, methods.BASELINES)
  if 'recovr' in displayed and against:
    boot = reporting.bootstrap(displayed['recovr'], displayed[against],
                               targets, config.bootstrap_resamples,
                               config.seed, queries)
    boot.update(a='recovr', b=against,
                num_resamples=config.bootstrap_resamples)

  also = {}
  for name in config.bootstrap_also:
    also[name] = reporting.bootstrap(displayed['recovr'], displayed[name],
                                     targets, config.bootstrap_resamples,
                                     config.seed, queries)
    also[name].update(a='recovr', b=name,
                      num_resamples=config.bootstrap_resamples)

  fmt = trajectory_files.chosen(config.trajectories_format,
                                len(sessions) * len(displayed))
  # The session documents, made once where JSON Lines are written (and
  # read by asking's scores); a Parquet file is written from the arrays
  # (``run.trajectories``), and asking's scores read only their fields.
  rows = list(trajectories) if fmt == 'jsonl' else None
  if ask_truth is not None:
    read = rows if rows is not None else trajectories.documents(
        ask_scores.READS)
    by_method = {m: [] for m in displayed}
    for row in read:
      by_method[row['method']].append(row)
    # One replay per user turn, all of them up front.
    ask_truth = ask_scores.remembering(ask_truth, read,
                                       config.loop.num_turns)
    for m, of_method in by_method.items():
      per_method[m]['asking'] = ask_scores.score(of_method, ask_truth,
                                                 config.loop.num_turns)
    del read, by_method
  for m, n in raised.items():
    per_method[m]['sessions_raised'] = n
  if env.dropped:  # --missing_ids=drop: the rows no session ran on
    for m in per_method:
      per_method[m]['rows_dropped'] = len(env.dropped)
    (out / 'dropped_rows.json').write_text(reporting.dumps(list(env.dropped)))
  if config.export_trec:
    from recovr_jax.run import trec  # pylint: disable=g-import-not-at-top
    paths = trec.write(out / 'trec', displayed, sessions, targets,
                       env.video_ids)
    print(f'wrote {len(paths)} TREC files in {out / "trec"}')
  (out / 'metrics.json').write_text(
      reporting.dumps(per_method, reporting.METRIC_DECIMALS))
  (out / 'metrics.csv').write_text(reporting.metrics_csv(per_method))
  actions = trajectories.actions()
  (out / 'ranks.csv').write_text(reporting.ranks_csv(
      displayed, sessions, targets, env.video_ids, actions, queries))
  (out / 'tables.tex').write_text(figures.latex_tables(
      per_method, sessions=len(sessions),
      benchmark=benchmark,
      resamples=config.bootstrap_resamples,
      names={m: methods.display_name(m) for m in per_method},
      main=methods.MAIN, boot=boot, clusters=clusters))
  (out / 'failure_modes.json').write_text(
      reporting.dumps(failures, reporting.METRIC_DECIMALS))
  (out / 'rank_cap_firing.json').write_text(
      reporting.dumps(firing, reporting.METRIC_DECIMALS))
  (out / 'bootstrap.json').write_text(
      reporting.dumps(boot, reporting.METRIC_DECIMALS))
  if also:
    (out / 'bootstrap_also.json').write_text(
        reporting.dumps(also, reporting.METRIC_DECIMALS))
  for other in (trajectory_files.JSONL, trajectory_files.PARQUET):
    (out / other).unlink(missing_ok=True)  # a resumed run's other format
  trajectory_files.write(out, rows if fmt == 'jsonl' else trajectories, fmt)

  def documents(names):  # the joining methods' documents (made, or light)
    if rows is not None:
      return [r for r in rows if r['method'] in names]
    return trajectories.documents(dialogue.READS, names)
  write_dialogue_truncation(config, out, env, documents, displayed)
  del rows
  names = {m: methods.display_name(m) for m in per_method}
  report = reporting.markdown(per_method, failures, boot,
                              _header(config, env, len(sessions), benchmark,
                                      clusters),
                              firing, names, clusters)
  report += ask_scores.markdown(per_method, names)
  for interval in also.values():
    report += reporting.bootstrap_markdown(interval, names,
                                           clusters) + '\n'

  if ceiling:
    (out / 't2v_ceiling.json').write_text(
        reporting.dumps(ceiling, reporting.METRIC_DECIMALS))
    report += '\n' + ceiling_markdown(ceiling)
  report += '\n' + reporting.errors_markdown(raised, len(sessions), names)
  unverified = checksums.unverified()
  if unverified:
    report += ('\n**Unverified checkpoints** (--allow_unverified_checkpoints: '
               'no checksums.json, their files not checked): ' +
               '; '.join(unverified) + '\n')
  if env.dropped:
    report += (f'\n{len(env.dropped)} annotation rows were dropped '
               '(--missing_ids=drop: an id in no embedding file); they are '
               'listed in dropped_rows.json and no method ran on them.\n')
  used = {m: c for m, c in reasoning_counts.items() if c}
  if used:
    report += '\n' + reporting.validity_markdown(used, names)
  (out / 'report.md').write_text(report)
  plots = config.plots and figures.plot(
      per_method, str(out / 'plot_'), boot,
      title=f'{len(sessions):,} sessions of {benchmark}',
      names={m: methods.display_name(m) for m in per_method},
      main=methods.MAIN)
  (out / INCOMPLETE).unlink(missing_ok=True)  # every output is written
  print(report)
  if config.plots and not plots:
    print('(matplotlib not installed: no plots; pip install ".[plots]")')
  print(f'wrote {out} in {time.time() - start:.0f}s')
  over = {m: n for m, n in raised.items()
          if n > config.max_error_share * len(sessions)}
  if over:
    raise validation.RunFailed(
        'sessions raised: ' + ', '.join(f'{m} {n} of {len(sessions)}'
                                        for m, n in over.items()) +
        f' (above --max_error_share={config.max_error_share:g}); the '
        f'outputs in {out} count them as misses; the errors are in '
        'trajectories.jsonl')
  return per_method
