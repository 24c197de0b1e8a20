// Task queues: counts per queue and a live chart of the total depth, refreshed every 3 s.
import { all, countsOf, queue } from './api.js';
import { depthChart } from './chart.js';
import { badge, failure, h, link } from './util.js';

const SERIES = ['pending', 'delayed', 'running'];
const CAPACITY = 60;
const samples = [];

export function queuesPage(main, every) {
  const chart = h('div', { class: 'chart-box' });
  const table = h('div');
  const stamp = h('p', { class: 'muted' });
  main.append(h('h1', {}, 'Task queues'), chart, stamp, table);

  async function refresh() {
    try {
      const q = queue();
      const queues = await all(query => q.listTaskQueues(query), 'taskQueues');
      const ids = queues.map(t => t.taskQueueId);
      const counts = await countsOf(ids);
      const total = Object.fromEntries(SERIES.map(s => [s, 0]));
      const rows = ids.map((id, i) => {
        const c = counts[i];
        for (const s of SERIES) total[s] += c[s] ?? 0;
        const tasks = `#/queue/${encodeURIComponent(id)}`;
        return h('tr', { 'data-queue': id },
          h('td', {}, link(tasks, id)),
          ...SERIES.map(s => h('td', { class: `num ${s}` }, String(c[s] ?? 0))),
          h('td', {}, queues[i].paused ? badge('paused') : ''));
      });
      samples.push(total);
      if (samples.length > CAPACITY) samples.shift();
      chart.replaceChildren(depthChart(SERIES, samples, CAPACITY));
      table.replaceChildren(rows.length
        ? h('table', { id: 'queues' },
          h('thead', {}, h('tr', {}, h('th', {}, 'task queue'),
            ...SERIES.map(s => h('th', { class: 'num' }, s)), h('th', {}, ''))),
          h('tbody', {}, rows))
        : h('p', {}, 'No task queue has been used yet.'));
      stamp.textContent = `Updated ${new Date().toLocaleTimeString()}; every 3 s.`;
    } catch (error) {
      table.replaceChildren(failure(error));
    }
  }
  refresh();
  every(refresh, 3000);
}
