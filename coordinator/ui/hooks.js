// Hooks (docs/hooks.md): every hook with its schedule, next and last fires (refreshed every
// 5 s), and a trigger button that fires it now with a JSON payload.
import { hooks } from './api.js';
import { failure, h, link, readable, when } from './util.js';

async function everyHook(client) {
  const { groups } = await client.listHookGroups();
  const lists = await Promise.all(groups.map(group => client.listHooks(group)));
  return lists.flatMap(list => list.hooks);
}

// The hook's last fire: its result, when, and its task (or why it failed).
function lastFire(status) {
  const fire = status.lastFire;
  if (fire.result === 'no-fire') return h('span', { class: 'muted' }, 'never');
  return h('span', {},
    h('span', { class: `state ${fire.result === 'success' ? 'completed' : 'failed'}` },
      fire.result),
    ' ', when(fire.time), ' ',
    fire.result === 'success'
      ? link(`#/task/${fire.taskId}`, fire.taskId)
      : h('span', { class: 'error' }, readable(fire.error?.message ?? '')));
}

function triggerForm(client, hook, show) {
  const payload = h('input', { name: 'payload', value: '{}', 'aria-label': 'payload (JSON)' });
  const button = h('button', { type: 'submit', class: 'trigger' }, 'Trigger');
  return h('form', {
    class: 'trigger',
    onsubmit: async event => {
      event.preventDefault();
      button.disabled = true;
      try {
        const fired = await client.triggerHook(
          hook.hookGroupId, hook.hookId, JSON.parse(payload.value || '{}'));
        show(fired.taskId
          ? h('p', { id: 'trigger-result' }, 'Created ',
            link(`#/task/${fired.taskId}`, fired.taskId))
          : h('p', { id: 'trigger-result' }, 'The template declined to create a task.'));
      } catch (error) {
        show(h('div', { id: 'trigger-result' }, failure(error)));
      } finally {
        button.disabled = false;
      }
    },
  }, payload, button);
}

export async function hooksPage(main, every) {
  const message = h('div');
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Hooks'), message, list);
  const client = hooks();
  let found;
  try {
    found = await everyHook(client);
  } catch (error) {
    list.replaceChildren(failure(error));
    return;
  }
  if (!found.length) {
    list.replaceChildren(h('p', {}, 'No hook has been created yet (docs/hooks.md).'));
    return;
  }
  const show = node => {
    message.replaceChildren(node);
    refresh();
  };
  const cells = found.map(() => ({ next: h('td', { class: 'next' }), last: h('td', { class: 'last' }) }));
  list.replaceChildren(h('table', { id: 'hooks' },
    h('thead', {}, h('tr', {}, ...['hook', 'schedule', 'next fire', 'last fire', 'trigger']
      .map(name => h('th', {}, name)))),
    h('tbody', {}, found.map((hook, i) => h('tr', { 'data-hook': `${hook.hookGroupId}/${hook.hookId}` },
      h('td', {}, h('span', { class: 'mono' }, `${hook.hookGroupId}/${hook.hookId}`), h('br'),
        h('span', { class: 'muted' }, hook.metadata.name)),
      h('td', { class: 'mono schedule' }, hook.schedule.join(', ') || '—'),
      cells[i].next, cells[i].last,
      h('td', {}, triggerForm(client, hook, show)))))));

  async function refresh() {
    await Promise.all(found.map(async (hook, i) => {
      try {
        const status = await client.getHookStatus(hook.hookGroupId, hook.hookId);
        cells[i].next.replaceChildren(when(status.nextScheduledDate));
        cells[i].last.replaceChildren(lastFire(status));
      } catch (error) {
        cells[i].last.replaceChildren(failure(error));
      }
    }));
  }
  refresh();
  every(refresh, 5000);
}
