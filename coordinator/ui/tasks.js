// A task group's tasks (listTaskGroup), narrowed by a state filter. A task queue's tasks are
// on its own page (queue.js), through the management API.
import { all, queue } from './api.js';
import { STATES, badge, failure, h, link } from './util.js';

async function load(params) {
  const tasks = await all(query => queue().listTaskGroup(params.get('group'), query), 'tasks');
  return tasks.map(({ status, task }) => ({ taskId: status.taskId, state: status.state, task }));
}

export async function tasksPage(main, params) {
  const source = ['Task group ', link(`#/group/${params.get('group')}`, params.get('group'))];
  const filter = h('select', { id: 'state-filter', 'aria-label': 'state' },
    h('option', { value: '' }, 'all states'),
    ...STATES.map(s => h('option', { value: s }, s)));
  filter.value = params.get('state') ?? '';
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, ...source), h('label', { class: 'filter' }, 'State ', filter), list);
  let tasks;
  try {
    tasks = await load(params);
  } catch (error) {
    list.replaceChildren(failure(error));
    return;
  }
  const render = () => {
    const shown = tasks.filter(t => !filter.value || t.state === filter.value);
    list.replaceChildren(
      h('p', { class: 'muted', id: 'task-count' }, `${shown.length} of ${tasks.length} tasks`),
      h('table', { id: 'tasks' },
        h('thead', {}, h('tr', {}, h('th', {}, 'task'), h('th', {}, 'state'),
          h('th', {}, 'priority'), h('th', {}, 'taskId'))),
        h('tbody', {}, shown.map(t => h('tr', { 'data-task': t.taskId, 'data-state': t.state },
          h('td', {}, link(`#/task/${t.taskId}`, t.task.metadata?.name ?? t.taskId)),
          h('td', {}, badge(t.state)),
          h('td', {}, t.task.priority ?? ''),
          h('td', { class: 'mono' }, t.taskId))))));
  };
  filter.addEventListener('change', render);
  render();
}
