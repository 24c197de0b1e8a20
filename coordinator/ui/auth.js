// Clients and roles (docs/auth.md), through the auth service's official client: the clients
// the API manages (#/clients, filtered by prefix and read a page at a time) and one client
// (#/clients/<clientId>: its scopes and their expansion, edit, disable or enable, a new
// accessToken, delete, its audit history); the roles (#/roles, with what scopes expand to)
// and one role (#/roles/<roleId>). A new accessToken is shown once, on the client's page right
// after createClient or resetAccessToken: it is kept only in this module until that page is
// drawn, never in the URL, storage or the console.
import { all, auth } from './api.js';
import { failure, h, link, when } from './util.js';

const PAGE = 50;
let notice = '';  // what the last action answered, shown once the page is drawn again
let revealed = null;  // { clientId, accessToken } of createClient or resetAccessToken, shown once

const enc = encodeURIComponent;
const clientHref = id => `#/clients/${enc(id)}`;
const roleHref = id => `#/roles/${enc(id)}`;

// One scope a line, blank lines and surrounding spaces dropped.
const lines = text => text.split('\n').map(line => line.trim()).filter(Boolean);

const pad = n => String(n).padStart(2, '0');
// An ISO date as a datetime-local input's value, in the browser's time zone.
function localInput(iso) {
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}` +
    `T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function tabs(current) {
  const tab = (href, name) => h('a', { href, class: name === current ? 'current' : null }, name);
  return h('p', { class: 'tabs' }, tab('#/clients', 'Clients'), tab('#/roles', 'Roles'));
}

function scopeList(id, scopes) {
  if (!scopes.length) return h('p', { id, class: 'muted' }, 'none');
  return h('ul', { id, class: 'scopes mono' }, scopes.map(scope => h('li', {}, scope)));
}

function facts(pairs) {
  return h('dl', { class: 'facts wide' }, pairs.flatMap(([name, value]) => [
    h('dt', {}, name), h('dd', { class: `fact-${name}` }, value)]));
}

// A status line for what the last action answered, and `act` to run one: a call answering
// the notice to show once the page is drawn again (or null when it moves to another page).
function actions(rerender) {
  const message = h('div', { id: 'action-result', role: 'status' }, notice);
  notice = '';
  const act = async (button, call) => {
    if (button) button.disabled = true;
    try {
      const said = await call();
      if (said != null) {
        notice = said;
        rerender();
      }
    } catch (error) {
      message.replaceChildren(failure(error));
    } finally {
      if (button) button.disabled = false;
    }
  };
  return { message, act };
}

const field = (label, input) => [h('label', { for: input.id }, label), input];
const textarea = (id, name, value, rows) => h('textarea', { id, name, rows,
  spellcheck: 'false' }, value);

// The fields createClient and updateClient take; `client` fills them in for an edit.
function clientFields(prefix, client) {
  const expires = client?.expires ??
    new Date(Date.now() + 365 * 24 * 3600 * 1000).toISOString();
  const inputs = {
    description: textarea(`${prefix}-description`, 'description', client?.description ?? '', 2),
    expires: h('input', { id: `${prefix}-expires`, name: 'expires', type: 'datetime-local',
      required: true, value: localInput(expires) }),
    scopes: textarea(`${prefix}-scopes`, 'scopes', (client?.scopes ?? []).join('\n'), 5),
    deleteOnExpiration: h('input', { id: `${prefix}-delete-on-expiration`,
      name: 'delete-on-expiration', type: 'checkbox', checked: client?.deleteOnExpiration }),
  };
  const shown = inputs.expires.value;
  const body = () => ({
    description: inputs.description.value,
    // An unchanged expiry keeps its seconds, which the input does not show.
    expires: inputs.expires.value === shown ? expires
      : new Date(inputs.expires.value).toISOString(),
    scopes: lines(inputs.scopes.value),
    deleteOnExpiration: inputs.deleteOnExpiration.checked,
  });
  const nodes = [
    field('description', inputs.description),
    field('expires', inputs.expires),
    field('scopes (one a line)', inputs.scopes),
    field('deleteOnExpiration', inputs.deleteOnExpiration),
  ];
  return { nodes, body };
}

function roleFields(prefix, role) {
  const description = textarea(`${prefix}-description`, 'description', role?.description ?? '',
    2);
  const scopes = textarea(`${prefix}-scopes`, 'scopes', (role?.scopes ?? []).join('\n'), 5);
  return {
    nodes: [field('description', description), field('scopes (one a line)', scopes)],
    body: () => ({ description: description.value, scopes: lines(scopes.value) }),
  };
}

function form(id, nodes, label, onsubmit) {
  const button = h('button', { type: 'submit' }, label);
  return h('form', { id, class: 'record', autocomplete: 'off', onsubmit: event => {
    event.preventDefault();
    onsubmit(button);
  } }, nodes.flat(Infinity), h('span'), h('span', {}, button));
}

// Who changed the client or role, how and when (getEntityHistory), oldest first.
function history(type, id) {
  const box = h('div', { id: 'history' }, h('p', { class: 'muted' }, 'Loading…'));
  all(query => auth().getEntityHistory(type, id, query), 'auditHistory', 1000).then(
    entries => box.replaceChildren(entries.length
      ? h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'when'), h('th', {}, 'what'),
        h('th', {}, 'by'))),
      h('tbody', {}, entries.map(entry => h('tr', { 'data-action': entry.actionType },
        h('td', {}, when(entry.created)), h('td', {}, entry.actionType),
        h('td', { class: 'mono' }, entry.clientId)))))
      : h('p', { class: 'muted' }, 'Nothing recorded.')),
    error => box.replaceChildren(failure(error)));
  return box;
}

// A paged listing: `call(query)` answers one page with `key` and maybe a continuationToken;
// `row` draws an item. Continuation tokens stay in this closure, not in the URL.
function pagedTable(box, id, headings, call, key, row, empty) {
  const pages = [undefined];
  async function show(index) {
    let page;
    try {
      const token = pages[index];
      page = await call({ limit: PAGE, ...(token ? { continuationToken: token } : {}) });
    } catch (error) {
      box.replaceChildren(failure(error));
      return;
    }
    pages[index + 1] = page.continuationToken;
    const items = page[key];
    box.replaceChildren(...[
      items.length || index > 0
        ? h('table', { id }, h('thead', {}, h('tr', {}, headings.map(([name, cls]) =>
          h('th', { class: cls }, name)))), h('tbody', {}, items.map(row)))
        : h('p', { class: 'muted' }, empty),
      index > 0 || page.continuationToken
        ? h('p', { class: 'actions' }, `Page ${index + 1}`,
          h('button', { id: 'previous-page', disabled: index === 0,
            onclick: () => show(index - 1) }, 'Previous'),
          h('button', { id: 'next-page', disabled: !page.continuationToken,
            onclick: () => show(index + 1) }, 'Next'))
        : null,
    ].filter(Boolean));
  }
  show(0);
}

function tokenBox(clientId, accessToken) {
  return h('div', { id: 'new-token', class: 'token' },
    h('p', {}, 'The accessToken of ', h('span', { class: 'mono' }, clientId), ':'),
    h('pre', { id: 'access-token' }, accessToken),
    h('p', {}, h('strong', {}, 'Copy it now: it will not be shown again.'),
      ' Leaving or reloading this page forgets it; if it is lost, reset it.'));
}

export function clientsPage(main, id, params, rerender) {
  if (id) {
    clientPage(main, id, rerender);
    return;
  }
  const { message, act } = actions(rerender);
  const prefix = params.get('prefix') ?? '';
  const filter = h('input', { id: 'prefix', name: 'prefix', value: prefix,
    placeholder: 'clientId prefix', 'aria-label': 'clientId prefix' });
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const clientId = h('input', { id: 'create-client-id', name: 'client-id', required: true,
    placeholder: 'e.g. project/ci' });
  const fields = clientFields('create-client');
  main.append(h('h1', {}, 'Clients'), tabs('Clients'), message,
    h('details', { id: 'create-client-box' }, h('summary', {}, 'Create a client'),
      form('create-client', [field('clientId', clientId), fields.nodes], 'Create client',
        button => act(button, async () => {
          const made = await auth().createClient(clientId.value.trim(), fields.body());
          revealed = { clientId: made.clientId, accessToken: made.accessToken };
          notice = `Created client ${made.clientId}.`;
          location.hash = clientHref(made.clientId);
          return null;
        }))),
    h('form', { id: 'client-filter', class: 'actions filter', onsubmit: event => {
      event.preventDefault();
      const value = filter.value.trim();
      const target = value ? `#/clients?prefix=${enc(value)}` : '#/clients';
      if (location.hash === target) rerender();
      else location.hash = target;
    } }, filter, h('button', { type: 'submit' }, 'Filter')),
    list,
    h('p', { class: 'muted' }, 'The clients file\'s clients (root, static/…) are not listed: ' +
      'only the clients the API manages are.'));
  const now = Date.now();
  pagedTable(list, 'clients',
    [['clientId'], ['expires'], ['disabled'], ['lastDateUsed']],
    query => auth().listClients({ ...(prefix ? { prefix } : {}), ...query }), 'clients',
    client => h('tr', { 'data-client': client.clientId },
      h('td', { class: 'mono' }, link(clientHref(client.clientId), client.clientId)),
      h('td', { class: Date.parse(client.expires) < now ? 'expires error' : 'expires' },
        when(client.expires)),
      h('td', { class: 'disabled' }, client.disabled ? 'yes' : 'no'),
      h('td', { class: 'last-used' }, when(client.lastDateUsed))),
    prefix ? `No client's clientId starts with ${prefix}.` : 'No client has been created yet.');
}

async function clientPage(main, id, rerender) {
  const shown = revealed?.clientId === id ? revealed : null;
  revealed = null;
  const { message, act } = actions(rerender);
  main.append(h('h1', {}, 'Client ', h('span', { class: 'mono' }, id)), tabs('Clients'),
    message);
  if (shown) main.append(tokenBox(shown.clientId, shown.accessToken));
  let client;
  try {
    client = await auth().client(id);
  } catch (error) {
    main.append(failure(error));
    return;
  }
  const button = (label, cls, onclick) => h('button', { class: `action ${cls}`, onclick:
    event => onclick(event.target) }, label);
  const fields = clientFields('edit-client', client);
  main.append(
    facts([
      ['description', client.description || '—'],
      ['expires', when(client.expires)],
      ['disabled', client.disabled ? 'yes' : 'no'],
      ['deleteOnExpiration', client.deleteOnExpiration ? 'yes' : 'no'],
      ['created', when(client.created)],
      ['lastModified', when(client.lastModified)],
      ['lastRotated', when(client.lastRotated)],
      ['lastDateUsed', when(client.lastDateUsed)],
    ]),
    h('div', { class: 'actions' },
      client.disabled
        ? button('Enable', 'enable', b => act(b, async () => {
          await auth().enableClient(id);
          return 'Enabled: the client authenticates again.';
        }))
        : button('Disable', 'disable', b => act(b, async () => {
          await auth().disableClient(id);
          return 'Disabled: every request of the client is refused until it is enabled.';
        })),
      button('Reset accessToken', 'reset', b => {
        if (!window.confirm(`Reset the accessToken of ${id}? The current one stops working.`)) {
          return;
        }
        act(b, async () => {
          const reset = await auth().resetAccessToken(id);
          revealed = { clientId: reset.clientId, accessToken: reset.accessToken };
          return 'A new accessToken was made; the old one no longer works.';
        });
      }),
      button('Delete', 'delete', b => {
        if (!window.confirm(`Delete the client ${id}?`)) return;
        act(b, async () => {
          await auth().deleteClient(id);
          notice = `Deleted client ${id}.`;
          location.hash = '#/clients';
          return null;
        });
      })),
    h('h2', {}, 'Scopes'), scopeList('scopes', client.scopes),
    h('h2', {}, 'Expanded scopes'),
    h('p', { class: 'muted' }, 'What the client holds, through the roles its scopes assume.'),
    scopeList('expanded-scopes', client.expandedScopes),
    h('details', { id: 'edit-client-box' }, h('summary', {}, 'Edit'),
      form('edit-client', fields.nodes, 'Save', b => act(b, async () => {
        await auth().updateClient(id, fields.body());
        return 'Saved.';
      }))),
    h('h2', {}, 'History'), history('client', id));
}

export function rolesPage(main, id, rerender) {
  if (id) {
    rolePage(main, id, rerender);
    return;
  }
  const { message, act } = actions(rerender);
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const roleId = h('input', { id: 'create-role-id', name: 'role-id', required: true,
    placeholder: 'e.g. project:ci' });
  const fields = roleFields('create-role');
  const toExpand = textarea('expand-input', 'expand', '', 3);
  const expanded = h('div', { id: 'expand-result' });
  main.append(h('h1', {}, 'Roles'), tabs('Roles'), message,
    h('details', { id: 'create-role-box' }, h('summary', {}, 'Create a role'),
      form('create-role', [field('roleId', roleId), fields.nodes], 'Create role',
        button => act(button, async () => {
          const made = await auth().createRole(roleId.value.trim(), fields.body());
          notice = `Created role ${made.roleId}.`;
          location.hash = roleHref(made.roleId);
          return null;
        }))),
    list,
    h('h2', {}, 'Expand scopes'),
    h('p', { class: 'muted' }, 'What scopes (one a line) grant through the roles: each ' +
      'assume:<roleId> brings in the role\'s scopes, and theirs.'),
    form('expand', [field('scopes', toExpand)], 'Expand', async button => {
      button.disabled = true;
      try {
        const { scopes } = await auth().expandScopes({ scopes: lines(toExpand.value) });
        expanded.replaceChildren(scopeList('expanded', scopes));
      } catch (error) {
        expanded.replaceChildren(failure(error));
      } finally {
        button.disabled = false;
      }
    }),
    expanded);
  pagedTable(list, 'roles', [['roleId'], ['scopes', 'num']],
    query => auth().listRoles2(query), 'roles',
    role => h('tr', { 'data-role': role.roleId },
      h('td', { class: 'mono' }, link(roleHref(role.roleId), role.roleId)),
      h('td', { class: 'num scope-count' }, String(role.scopes.length))),
    'No role has been created yet.');
}

async function rolePage(main, id, rerender) {
  const { message, act } = actions(rerender);
  main.append(h('h1', {}, 'Role ', h('span', { class: 'mono' }, id)), tabs('Roles'), message);
  let role;
  try {
    role = await auth().role(id);
  } catch (error) {
    main.append(failure(error));
    return;
  }
  const fields = roleFields('edit-role', role);
  main.append(
    facts([
      ['description', role.description || '—'],
      ['created', when(role.created)],
      ['lastModified', when(role.lastModified)],
    ]),
    h('div', { class: 'actions' },
      h('button', { class: 'action delete', onclick: event => {
        if (!window.confirm(`Delete the role ${id}?`)) return;
        act(event.target, async () => {
          await auth().deleteRole(id);
          notice = `Deleted role ${id}.`;
          location.hash = '#/roles';
          return null;
        });
      } }, 'Delete')),
    h('h2', {}, 'Scopes'), scopeList('scopes', role.scopes),
    h('h2', {}, 'Expanded scopes'),
    h('p', { class: 'muted' }, `What assume:${id} grants.`),
    scopeList('expanded-scopes', role.expandedScopes),
    h('details', { id: 'edit-role-box' }, h('summary', {}, 'Edit'),
      form('edit-role', fields.nodes, 'Save', b => act(b, async () => {
        await auth().updateRole(id, fields.body());
        return 'Saved.';
      }))),
    h('h2', {}, 'History'), history('role', id));
}
