// A task's artifacts on its page: each run's listing with a link to every artifact (a public/
// name by its getArtifact URL, which the browser follows to the bytes; any other name by a URL
// signed with this session's credentials), error artifacts with their reason, and the run's
// log inline (its last 200 KB, the browser decoding a gzip Content-Encoding).
import { all, credentials, queue } from './api.js';
import { errorBox, failure, h, when } from './util.js';

export const LOG = 'public/logs/live_backing.log';
const TAIL_BYTES = 200 * 1024;
const SIGN_IN_TO_DOWNLOAD = 'Sign in to download: only public/ names are open to everybody.';
const SIGN_IN_TO_LIST = 'Sign in to see the artifacts: listing them needs queue:list-artifacts.';

const isPublic = name => name.startsWith('public/');

// Where the browser fetches an artifact, or null when only credentials could and there are none.
// A signed URL (bewit) lives 15 minutes, so a link is signed again when it is followed.
function href(taskId, runId, name) {
  const q = queue();
  if (isPublic(name)) return q.buildUrl(q.getArtifact, taskId, runId, name);
  return credentials() ? q.buildSignedUrlSync(q.getArtifact, taskId, runId, name) : null;
}

function download(taskId, runId, name) {
  const url = href(taskId, runId, name);
  if (url == null) {
    const why = h('span', { class: 'muted why-no-link' }, SIGN_IN_TO_DOWNLOAD);
    return h('span', {}, name, ' ', why);
  }
  const refresh = event => { event.currentTarget.href = href(taskId, runId, name); };
  const attrs = { href: url, class: 'artifact-link', onmousedown: refresh, onclick: refresh };
  return h('a', attrs, name);
}

export const size = bytes => (bytes < 1024 ? `${bytes} B`
  : bytes < 1024 ** 2 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1024 ** 2).toFixed(1)} MB`);

// An error artifact's reason and message (artifact-content answers them with a 200).
async function reasonOf(taskId, runId, name) {
  try {
    const { reason, message } = await queue().artifact(taskId, runId, name);
    return h('div', { class: 'error artifact-error' }, `${reason}: ${message}`);
  } catch (error) {
    return failure(error);
  }
}

async function row(taskId, runId, artifact) {
  const { name, storageType, contentType, expires } = artifact;
  const error = storageType === 'error';
  return h('tr', { 'data-name': name, 'data-storage': storageType },
    h('td', { class: 'mono' }, error ? name : download(taskId, runId, name),
      error ? await reasonOf(taskId, runId, name) : null),
    h('td', {}, error ? '—' : contentType),
    h('td', {}, when(expires)),
    h('td', {}, storageType));
}

// The last `max` bytes of a response as text, from a whole line, holding no more than about
// `max` bytes however long the body is; and the body's (decoded) length.
async function tail(response, max) {
  const reader = response.body.getReader();
  const chunks = [];
  let kept = 0;
  let total = 0;
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    chunks.push(read.value);
    kept += read.value.length;
    total += read.value.length;
    while (kept - chunks[0].length >= max) kept -= chunks.shift().length;
  }
  const bytes = new Uint8Array(kept);
  chunks.reduce((at, chunk) => (bytes.set(chunk, at), at + chunk.length), 0);
  let text = new TextDecoder().decode(bytes.subarray(Math.max(0, kept - max)));
  if (total > max) text = text.slice(text.indexOf('\n') + 1);
  return { text, total };
}

// A refused log fetch as failure() shows a refused client call (whose message the client cuts
// at Taskcluster's `---` too).
async function refusal(response) {
  const body = await response.text();
  try {
    const { code, message, reason } = JSON.parse(body);
    return errorBox(code ?? reason ?? response.status, (message ?? '').split('---')[0].trim());
  } catch {
    return errorBox(`HTTP ${response.status}`, response.statusText);
  }
}

async function showLog(box, taskId, runId, listed, current) {
  const entry = listed.find(a => a.name === LOG);
  if (!entry) {
    box.replaceChildren(h('p', { class: 'muted' }, `Run ${runId} has no log (${LOG}): a run uploads one as it ends, when its handler logged anything.`));
    return;
  }
  if (entry.storageType === 'error') {
    box.replaceChildren(await reasonOf(taskId, runId, LOG));
    return;
  }
  const url = href(taskId, runId, LOG);
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    // Bytes kept in Azure Blob Storage come from another origin: the account's CORS rules
    // must allow this page's, or the browser refuses it the body (a link still works).
    box.replaceChildren(h('p', { class: 'error' },
      `The log could not be read here (${error.message}); if the artifacts are on another `,
      'origin, its CORS rules must allow this one. ',
      h('a', { href: url, id: 'whole-log' }, 'Open the whole log'), '.'));
    return;
  }
  if (!response.ok) {
    box.replaceChildren(await refusal(response));
    return;
  }
  const { text, total } = await tail(response, TAIL_BYTES);
  if (!current()) return;
  const whole = h('a', { href: url, id: 'whole-log' }, 'the whole log');
  const pre = h('pre', { id: 'log' }, text);
  box.replaceChildren(
    h('p', { id: 'log-note', class: 'muted' },
      total > TAIL_BYTES ? `The last ${size(TAIL_BYTES)} of ${size(total)}; ` : `${size(total)}; `,
      whole, '.'),
    pre);
  pre.scrollTop = pre.scrollHeight;
}

// `current()` is false once another run was chosen: a slower answer then shows nothing.
async function showRun(box, logBox, taskId, runId, current) {
  let listed;
  try {
    listed = await all(query => queue().listArtifacts(taskId, runId, query), 'artifacts', Infinity);
  } catch (error) {
    if (!current()) return;
    const anonymous = !credentials() && [401, 403].includes(error.response?.status);
    box.replaceChildren(failure(error));
    if (anonymous) box.append(h('p', { id: 'why-no-artifacts', class: 'muted' }, SIGN_IN_TO_LIST));
    logBox.replaceChildren();
    return;
  }
  const rows = await Promise.all(listed.map(a => row(taskId, runId, a)));
  if (!current()) return;
  box.replaceChildren(listed.length
    ? h('table', { id: 'artifacts' },
      h('thead', {}, h('tr', {}, ['name', 'content type', 'expires', 'storage']
        .map(title => h('th', {}, title)))),
      h('tbody', {}, rows))
    : h('p', { class: 'muted' }, `Run ${runId} has no artifacts.`));
  logBox.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  await showLog(logBox, taskId, runId, listed, current);
}

// The Artifacts and Log sections of a task with `runs`, for the latest run until another is chosen.
export function artifactsSection(taskId, runs) {
  if (!runs.length) return [];
  const box = h('div', { id: 'artifacts-box' }, h('p', { class: 'muted' }, 'Loading…'));
  const logBox = h('div', { id: 'log-box' });
  const latest = runs[runs.length - 1].runId;
  let shown = latest;
  const show = runId => {
    shown = runId;
    showRun(box, logBox, taskId, runId, () => shown === runId);
  };
  const choice = h('select', {
    id: 'artifact-run', 'aria-label': 'run', onchange: () => show(Number(choice.value)),
  }, runs.map(run => h('option', { value: run.runId }, `run ${run.runId}`)));
  choice.value = String(latest);
  show(latest);
  return [h('h2', {}, 'Artifacts of ', choice), box, h('h2', {}, 'Log'), logBox];
}
