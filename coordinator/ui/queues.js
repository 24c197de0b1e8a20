// Task queues: per queue its pending, delayed and running counts (every 3 s), its tasks
// resolved in the last hour by outcome and their rate (every 30 s: that count reads each task
// resolved in the hour), whether it is paused and its limits; a live chart of the total depth.
import { all, countsOf, queue } from './api.js';
import { depthChart } from './chart.js';
import { badge, failure, h, link, when } from './util.js';

const SERIES = ['pending', 'delayed', 'running'];
const OUTCOMES = ['completed', 'failed', 'exception'];
const CAPACITY = 60;
const WINDOW_S = 3600;
const RESOLVED_EVERY_MS = 30_000;
const samples = [];

// Resolved tasks a minute, averaged over the window.
function throughput(resolved) {
  const rate = OUTCOMES.reduce((sum, o) => sum + resolved[o], 0) / (WINDOW_S / 60);
  return rate >= 10 ? rate.toFixed(0) : rate.toFixed(2);
}

function pausedCell(paused) {
  if (!paused) return '';
  const marked = badge('paused');
  marked.title = `paused since ${when(paused.since)}: ${paused.reason}`;
  return marked;
}

// Every limit the API returns that is set, by its API name: a new kind of limit shows as is.
const limitsCell = limits => Object.entries(limits ?? {})
  .filter(([, value]) => value != null)
  .map(([name, value]) => h('span', { class: 'limit', 'data-limit': name }, `${name} ${value}`));

export function queuesPage(main, every) {
  const chart = h('div', { class: 'chart-box' });
  const table = h('div');
  const stamp = h('p', { class: 'muted' });
  main.append(h('h1', {}, 'Task queues'), chart, stamp, table);
  let resolved = new Map();
  let resolvedAt = -Infinity;

  async function refresh() {
    try {
      const q = queue();
      const queues = await all(query => q.listTaskQueues(query), 'taskQueues');
      const ids = queues.map(t => t.taskQueueId);
      const due = Date.now() - resolvedAt >= RESOLVED_EVERY_MS
        || ids.some(id => !resolved.has(id));
      const counts = await countsOf(ids, due ? WINDOW_S : undefined);
      if (due) {
        resolved = new Map(counts.filter(c => c.resolved).map(c => [c.taskQueueId, c.resolved]));
        resolvedAt = Date.now();
      }
      const total = Object.fromEntries(SERIES.map(s => [s, 0]));
      const rows = ids.map((id, i) => {
        const c = counts[i];
        const r = resolved.get(id);
        for (const s of SERIES) total[s] += c[s] ?? 0;
        const tasks = `#/queue/${encodeURIComponent(id)}`;
        return h('tr', { 'data-queue': id },
          h('td', {}, link(tasks, id)),
          ...SERIES.map(s => h('td', { class: `num ${s}` }, String(c[s] ?? 0))),
          ...OUTCOMES.map(o => h('td', { class: `num ${o}` }, r ? String(r[o]) : '—')),
          h('td', { class: 'num throughput' }, r ? throughput(r) : '—'),
          h('td', { class: 'paused-state' }, pausedCell(queues[i].paused)),
          h('td', { class: 'limits' }, limitsCell(queues[i].limits)));
      });
      samples.push(total);
      if (samples.length > CAPACITY) samples.shift();
      chart.replaceChildren(depthChart(SERIES, samples, CAPACITY));
      const th = (text, cls, title) => h('th', { class: cls, title }, text);
      table.replaceChildren(rows.length
        ? h('table', { id: 'queues' },
          h('thead', {}, h('tr', {}, th('task queue'),
            ...SERIES.map(s => th(s, 'num')),
            ...OUTCOMES.map(o => th(`${o} (1 h)`, 'num', `tasks ${o} in the last hour`)),
            th('resolved / min', 'num', 'tasks resolved a minute, averaged over the last hour'),
            th(''), th('limits'))),
          h('tbody', {}, rows))
        : h('p', {}, 'No task queue has been used yet.'));
      stamp.textContent = `Updated ${new Date().toLocaleTimeString()}; every 3 s. `
        + 'Completed, failed and exception count the tasks resolved in the last hour; '
        + 'resolved / min is their rate, averaged over that hour (both every 30 s).';
    } catch (error) {
      table.replaceChildren(failure(error));
    }
  }
  refresh();
  every(refresh, 3000);
}
