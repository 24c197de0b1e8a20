// One task: its status, its runs drawn as a timeline, the running run's progress, each run's
// artifacts and log, its definition, and the actions that change it (they need credentials;
// without them the buttons are disabled and say why).
import { credentials, ours, queue } from './api.js';
import { artifactsSection } from './artifacts.js';
import { badge, failure, h, link, when } from './util.js';

const PRIORITIES = ['highest', 'very-high', 'high', 'medium', 'low', 'very-low', 'lowest'];
const NO_CREDENTIALS = 'Sign in (clientId and accessToken, top right) to act on tasks.';

function timeline(runs) {
  if (!runs.length) return h('p', { class: 'muted' }, 'No runs yet.');
  const t = iso => (iso ? Date.parse(iso) : Date.now());
  const start = Math.min(...runs.map(r => t(r.scheduled)));
  const end = Math.max(...runs.map(r => t(r.resolved)), start + 1);
  const pct = v => `${(100 * (v - start)) / (end - start)}%`;
  const span = (from, to) => `left:${pct(from)};width:calc(${pct(to + start - from)} + 2px)`;
  return h('ol', { id: 'runs', class: 'timeline' }, runs.map(run => {
    const began = run.started ? t(run.started) : t(run.resolved);
    return h('li', { 'data-run': run.runId, 'data-state': run.state },
      h('span', { class: 'run-label' }, `run ${run.runId} `, badge(run.state)),
      h('span', { class: 'track' },
        h('span', { class: 'bar waiting', style: span(t(run.scheduled), began) }),
        run.started ? h('span', { class: `bar ${run.state}`, style: span(began, t(run.resolved)) })
          : null),
      h('span', { class: 'run-detail muted' },
        [run.reasonCreated, run.reasonResolved, run.workerId].filter(Boolean).join(' · ')));
  }));
}

// Each running run's last progress report (reportProgress): a bar, its percentage and message;
// nothing when no run is running.
function progressSection(taskId, runs) {
  const running = new Set(runs.filter(r => r.state === 'running').map(r => r.runId));
  if (!running.size) return [];
  const section = h('div', { id: 'progress' });
  ours('taskProgress', taskId).then(({ runs: reports }) => section.replaceChildren(
    ...reports.filter(p => running.has(p.runId)).map(p => h('p', { 'data-run': p.runId },
      `run ${p.runId} `,
      h('progress', { max: '1', value: String(p.fraction) }),
      ` ${Math.round(100 * p.fraction)}%`,
      p.message ? h('span', { class: 'muted' }, ` ${p.message}`) : null))),
  error => section.replaceChildren(failure(error)));
  return [section];
}

export async function taskPage(main, taskId, rerender) {
  main.append(h('h1', {}, 'Task ', h('span', { class: 'mono' }, taskId)));
  let task, status;
  try {
    [task, { status }] = await Promise.all([queue().task(taskId), queue().status(taskId)]);
  } catch (error) {
    main.append(failure(error));
    return;
  }
  const signedIn = Boolean(credentials());
  const message = h('p', { id: 'action-result', role: 'status' });
  const act = (label, call) => h('button', {
    class: `action ${label}`, disabled: !signedIn, title: signedIn ? null : NO_CREDENTIALS,
    onclick: async () => {
      try {
        await call();
        rerender();
      } catch (error) {
        message.replaceChildren(failure(error));
      }
    },
  }, label);
  const priority = h('select', { id: 'priority', disabled: !signedIn, 'aria-label': 'priority' },
    PRIORITIES.map(p => h('option', { value: p }, p)));
  priority.value = task.priority;
  main.append(
    h('p', {}, badge(status.state), ' ', task.metadata.name, ' — group ',
      link(`#/group/${status.taskGroupId}`, status.taskGroupId), ', queue ',
      link(`#/queue/${encodeURIComponent(status.taskQueueId)}`, status.taskQueueId)),
    h('div', { class: 'actions' },
      act('cancel', () => queue().cancelTask(taskId)),
      act('rerun', () => queue().rerunTask(taskId)),
      act('schedule', () => queue().scheduleTask(taskId)),
      priority,
      act('change priority', () => queue().changeTaskPriority(taskId,
        { newPriority: priority.value })),
      signedIn ? null : h('span', { id: 'why-disabled', class: 'muted' }, NO_CREDENTIALS)),
    message,
    h('h2', {}, 'Runs'),
    timeline(status.runs),
    ...progressSection(taskId, status.runs),
    h('dl', { class: 'facts' },
      h('dt', {}, 'created'), h('dd', {}, when(task.created)),
      h('dt', {}, 'deadline'), h('dd', {}, when(task.deadline)),
      h('dt', {}, 'retries left'), h('dd', {}, String(status.retriesLeft))),
    ...artifactsSection(taskId, status.runs),
    h('h2', {}, 'Definition'),
    h('pre', { id: 'definition' }, JSON.stringify(task, null, 2)));
}
