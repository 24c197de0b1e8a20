// One task queue: its tasks counted by state (countTasks), its pause and limits, its tasks
// through the management API (listTasks: filtered by state on the server, a page at a time;
// failed ones link to their logs on the task page), and cancel or rerun of every task the
// filter matches, after a confirmation. Acting needs credentials, as on a task page.
import { credentials, ours, queue } from './api.js';
import { badge, failure, h, link, when } from './util.js';

const STATES = ['unscheduled', 'pending', 'delayed', 'running', 'completed', 'failed',
  'exception'];
const PAGE = 50;
const NO_CREDENTIALS = 'Sign in (clientId and accessToken, top right) to change the queue.';
let notice = '';  // what the last action answered, shown once the page is drawn again

export async function queuePage(main, id, params, rerender) {
  const signedIn = Boolean(credentials());
  const message = h('p', { id: 'action-result', role: 'status' }, notice);
  notice = '';
  const act = async call => {
    try {
      notice = await call() ?? '';
      rerender();
    } catch (error) {
      message.replaceChildren(failure(error));
    }
  };
  main.append(h('h1', {}, 'Task queue ', h('span', { class: 'mono' }, id)),
    h('p', {}, link(`#/workers/${encodeURIComponent(id)}`, 'Workers and their recent tasks')));

  let found = null;
  try {
    found = await queue().getTaskQueue(id);
  } catch (error) {
    if (error.response?.status !== 404) main.append(failure(error));
  }
  const paused = found?.paused;
  const limits = found?.limits ?? { maxRunning: null, maxClaimsPerSecond: null, maxRunningPerKey: null };
  const reason = h('input', { id: 'pause-reason', placeholder: 'why', 'aria-label': 'reason',
    disabled: !signedIn });
  const number = (name, value, step) => h('input', { id: name, name, type: 'number', min: 0,
    step, value: value ?? '', placeholder: 'none', 'aria-label': name, disabled: !signedIn });
  const maxRunning = number('max-running', limits.maxRunning, 1);
  const maxRate = number('max-claims-per-second', limits.maxClaimsPerSecond, 'any');
  const maxPerKey = number('max-running-per-key', limits.maxRunningPerKey, 1);
  const limit = input => (input.value === '' ? null : Number(input.value));
  const button = (label, cls, onclick) => h('button', { class: `action ${cls}`,
    disabled: !signedIn, title: signedIn ? null : NO_CREDENTIALS, onclick }, label);
  main.append(
    h('p', { id: 'pause-state' }, paused
      ? [badge('paused'), ` since ${when(paused.since)}: ${paused.reason}`]
      : 'Claims are handed out.'),
    h('div', { class: 'actions' },
      paused
        ? button('Resume', 'resume', () => act(async () => {
          await ours('resumeTaskQueue', id);
          return 'Resumed.';
        }))
        : [reason, button('Pause', 'pause', () => act(async () => {
          await ours('pauseTaskQueue', id, { reason: reason.value || 'paused from the dashboard' });
          return 'Paused.';
        }))],
      h('label', {}, 'maxRunning ', maxRunning),
      h('label', {}, 'maxClaimsPerSecond ', maxRate),
      h('label', {}, 'maxRunningPerKey ', maxPerKey),
      button('Set limits', 'limits', () => act(async () => {
        await ours('setTaskQueueLimits', id,
          { maxRunning: limit(maxRunning), maxClaimsPerSecond: limit(maxRate),
            maxRunningPerKey: limit(maxPerKey) });
        return 'Limits set.';
      })),
      signedIn ? null : h('span', { id: 'why-disabled', class: 'muted' }, NO_CREDENTIALS)),
    message);

  const counts = h('div', {}, h('p', { class: 'muted' }, 'Counting…'));
  const filter = h('select', { id: 'state-filter', 'aria-label': 'state' },
    h('option', { value: '' }, 'all states'), ...STATES.map(s => h('option', { value: s }, s)));
  filter.value = params.get('state') ?? '';
  filter.addEventListener('change', () => {
    const state = filter.value ? `&state=${filter.value}` : '';
    location.hash = `#/queue/${encodeURIComponent(id)}?${state.slice(1)}`;
  });
  const matching = { taskQueueId: id, ...(filter.value ? { state: filter.value } : {}) };
  const bulk = (label, cls, method, key) => button(label, cls, () => {
    const what = filter.value ? `${filter.value} tasks` : 'tasks';
    if (!window.confirm(`${label} every ${what} of ${id}?`)) return;
    act(async () => `${label}: ${(await ours(method, matching))[key]} tasks.`);
  });
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h2', {}, 'Tasks'), counts,
    h('div', { class: 'actions' }, h('label', {}, 'State ', filter),
      bulk('Cancel all', 'bulk-cancel', 'cancelTasks', 'cancelled'),
      bulk('Rerun all', 'bulk-rerun', 'rerunTasks', 'rerun')),
    list);

  ours('countTasks', { taskQueueId: id }).then(c => counts.replaceChildren(
    h('table', { id: 'state-counts' }, h('thead', {}, h('tr', {},
      ...STATES.map(s => h('th', { class: 'num' }, s)), h('th', { class: 'num' }, 'total'))),
    h('tbody', {}, h('tr', {}, ...STATES.map(s => h('td', { class: `num ${s}` },
      String(c.states[s]))), h('td', { class: 'num total' }, String(c.total)))))),
  error => counts.replaceChildren(failure(error)));

  const pages = [undefined];
  async function show(index) {
    let page;
    try {
      const token = pages[index];
      page = await ours('listTasks', { ...matching, limit: PAGE,
        ...(token ? { continuationToken: token } : {}) });
    } catch (error) {
      list.replaceChildren(failure(error));
      return;
    }
    pages[index + 1] = page.continuationToken;
    const rows = page.tasks.map(({ status, task }) => h('tr',
      { 'data-task': status.taskId, 'data-state': status.state },
      h('td', {}, link(`#/task/${status.taskId}`, task.metadata?.name ?? status.taskId)),
      h('td', {}, badge(status.state)),
      h('td', {}, ['failed', 'exception'].includes(status.state)
        ? h('a', { class: 'log-link', href: `#/task/${status.taskId}` }, 'log') : ''),
      h('td', { class: 'mono' }, status.taskId)));
    list.replaceChildren(
      h('table', { id: 'tasks' },
        h('thead', {}, h('tr', {}, h('th', {}, 'task'), h('th', {}, 'state'), h('th', {}, ''),
          h('th', {}, 'taskId'))),
        h('tbody', {}, rows)),
      h('p', { class: 'actions' }, `Page ${index + 1}`,
        h('button', { id: 'previous-page', disabled: index === 0,
          onclick: () => show(index - 1) }, 'Previous'),
        h('button', { id: 'next-page', disabled: !page.continuationToken,
          onclick: () => show(index + 1) }, 'Next')));
  }
  show(0);
}
