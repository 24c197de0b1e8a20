// A task queue's workers (listWorkers) and each one's latest claims (getWorker's
// recentTasks), linked to their task pages.
import { queue } from './api.js';
import { failure, h, link, when } from './util.js';

const SHOWN = 50;
const RECENT = 5;

export async function workersPage(main, id) {
  main.append(h('h1', {}, 'Workers of ', link(`#/queue/${encodeURIComponent(id)}`, id)));
  const [provisionerId, workerType] = id.split('/');
  const q = queue();
  let workers;
  try {
    workers = (await q.listWorkers(provisionerId, workerType, { limit: SHOWN })).workers;
    workers = await Promise.all(workers.map(w => q.getWorker(provisionerId, workerType,
      w.workerGroup, w.workerId)));
  } catch (error) {
    main.append(failure(error));
    return;
  }
  if (!workers.length) {
    main.append(h('p', {}, 'No worker of this queue has been seen.'));
    return;
  }
  const recent = w => w.recentTasks.slice(-RECENT).reverse().map(t =>
    h('span', {}, link(`#/task/${t.taskId}`, `${t.taskId.slice(0, 8)}…/${t.runId}`), ' '));
  const row = w => h('tr', { 'data-worker': `${w.workerGroup}/${w.workerId}` },
    h('td', { class: 'mono' }, `${w.workerGroup}/${w.workerId}`),
    h('td', {}, when(w.lastDateActive)),
    h('td', {}, Date.parse(w.quarantineUntil) > Date.now() ? when(w.quarantineUntil) : '—'),
    h('td', { class: 'recent' }, recent(w)));
  main.append(h('table', { id: 'workers' },
    h('thead', {}, h('tr', {}, h('th', {}, 'worker'), h('th', {}, 'last active'),
      h('th', {}, 'quarantined until'), h('th', {}, 'recent tasks'))),
    h('tbody', {}, workers.map(row))));
}
