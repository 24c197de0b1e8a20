// The index (docs/index-service.md): a namespace's namespaces, each a link one level down,
// and the tasks indexed in it with their rank, expiry and data; the path above as links.
import { all, index } from './api.js';
import { failure, h, link, when } from './util.js';

const href = namespace => `#/index/${encodeURIComponent(namespace)}`;

// Links to the top level and to each namespace above `namespace`, then its own name.
function crumbs(namespace) {
  const words = namespace ? namespace.split('.') : [];
  const parts = [link('#/index', 'top level')];
  words.forEach((word, i) => {
    const path = words.slice(0, i + 1).join('.');
    parts.push(' . ', i === words.length - 1 ? h('strong', {}, word) : link(href(path), word));
  });
  return h('p', { id: 'index-path' }, ...parts);
}

export async function indexPage(main, namespace) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Index'), crumbs(namespace), body);
  const client = index();
  let namespaces;
  let tasks;
  try {
    [namespaces, tasks] = await Promise.all([
      all(query => client.listNamespaces(namespace, query), 'namespaces'),
      all(query => client.listTasks(namespace, query), 'tasks'),
    ]);
  } catch (error) {
    body.replaceChildren(failure(error));
    return;
  }
  if (!namespaces.length && !tasks.length) {
    body.replaceChildren(h('p', { id: 'index-empty' }, namespace
      ? `Nothing is indexed under ${namespace}.`
      : 'Nothing is indexed yet: a task that completes is indexed at <namespace> for each of '
        + 'its routes index.<namespace>.'));
    return;
  }
  body.replaceChildren(
    h('h2', {}, 'Namespaces'),
    namespaces.length
      ? h('table', { id: 'namespaces' },
        h('thead', {}, h('tr', {}, h('th', {}, 'namespace'), h('th', {}, 'expires'))),
        h('tbody', {}, namespaces.map(n => h('tr', { 'data-namespace': n.namespace },
          h('td', { class: 'mono' }, link(href(n.namespace), n.name)),
          h('td', {}, when(n.expires))))))
      : h('p', { class: 'muted' }, 'none'),
    h('h2', {}, 'Tasks'),
    tasks.length
      ? h('table', { id: 'indexed-tasks' },
        h('thead', {}, h('tr', {}, ...['index path', 'task', 'rank', 'expires', 'data']
          .map(name => h('th', {}, name)))),
        h('tbody', {}, tasks.map(t => h('tr', { 'data-path': t.namespace },
          h('td', { class: 'mono' }, t.namespace),
          h('td', { class: 'mono' }, link(`#/task/${t.taskId}`, t.taskId)),
          h('td', {}, String(t.rank)),
          h('td', {}, when(t.expires)),
          h('td', { class: 'mono' }, JSON.stringify(t.data))))))
      : h('p', { class: 'muted' }, 'none'));
}
