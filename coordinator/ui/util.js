// Small DOM helpers shared by the pages.
export const STATES = ['unscheduled', 'pending', 'running', 'completed', 'failed', 'exception'];

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value == null) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  node.append(...children.flat().filter(c => c != null));
  return node;
}

export const badge = state => h('span', { class: `state ${state}` }, state);

export const when = iso => (iso ? new Date(iso).toLocaleString() : '—');

export function failure(error) {
  return h('p', { class: 'error' }, `${error.body?.code ?? 'Error'}: ${error.message}`);
}

export const link = (href, text) => h('a', { href }, text);
