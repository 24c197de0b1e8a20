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

// An API error's message as people read it. Taskcluster writes them in markdown, scopes and
// scope expressions in ``` fences and names in backticks: each fenced block becomes a <pre>,
// backticks go, and the prose around stays text.
export function readable(message) {
  return String(message).split(/^[ \t]*```[^\n]*$/m).map((part, i) => {
    if (i % 2 === 1) {
      const code = part.replace(/^\n+|\n+$/g, '');
      return code ? h('pre', {}, code) : null;
    }
    return part.replace(/`([^`\n]*)`/g, '$1').trim() || null;
  });
}

// A failed call's error code and readable message, where a page shows the call's result.
export const errorBox = (code, message) => h('div', { class: 'error' }, `${code}: `,
  readable(message));

export const failure = error => errorBox(error.body?.code ?? 'Error', error.message);

export const link = (href, text) => h('a', { href }, text);
