// A task group: progress by state as one stacked bar, and links to its tasks.
import { all, queue } from './api.js';
import { STATES, badge, failure, h, link } from './util.js';

export async function groupPage(main, groupId) {
  main.append(h('h1', {}, 'Task group ', h('span', { class: 'mono' }, groupId)));
  let tasks;
  try {
    const q = queue();
    tasks = await all(query => q.listTaskGroup(groupId, query), 'tasks', 10000);
  } catch (error) {
    main.append(failure(error));
    return;
  }
  const counts = Object.fromEntries(STATES.map(s => [s, 0]));
  for (const { status } of tasks) counts[status.state] += 1;
  const total = tasks.length || 1;
  const done = counts.completed + counts.failed + counts.exception;
  main.append(
    h('p', {}, `${done} of ${tasks.length} tasks resolved`),
    h('div', { id: 'progress', class: 'progress', role: 'img',
      'aria-label': STATES.map(s => `${s} ${counts[s]}`).join(', ') },
    STATES.filter(s => counts[s]).map(s => h('span', {
      class: `segment ${s}`, 'data-state': s, title: `${s}: ${counts[s]}`,
      style: `width:${(100 * counts[s]) / total}%`,
    }))),
    h('ul', { class: 'legend' }, STATES.map(s => h('li', {}, badge(s), ' ',
      link(`#/tasks?group=${groupId}&state=${s}`, String(counts[s]))))),
    h('p', {}, link(`#/tasks?group=${groupId}`, 'All tasks of this group')));
}
