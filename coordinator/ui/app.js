// The dashboard's router (location.hash) and the credentials form.
import { credentials, signIn, signOut } from './api.js';
import { clientsPage, rolesPage } from './auth.js';
import { groupPage } from './group.js';
import { hooksPage } from './hooks.js';
import { queuePage } from './queue.js';
import { queuesPage } from './queues.js';
import { taskPage } from './task.js';
import { indexPage } from './task-index.js';
import { tasksPage } from './tasks.js';
import { workersPage } from './workers.js';

const main = document.getElementById('app');
let timers = [];

function route() {
  timers.forEach(clearInterval);
  timers = [];
  const every = (fn, ms) => timers.push(setInterval(fn, ms));
  main.replaceChildren();
  const [path, search] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(search);
  const [, page, raw] = (path || '/').split('/');
  const id = raw && decodeURIComponent(raw);
  if (page === 'task' && id) taskPage(main, id, route);
  else if (page === 'group' && id) groupPage(main, id);
  else if (page === 'queue' && id) queuePage(main, id, params, route);
  else if (page === 'workers' && id) workersPage(main, id);
  else if (page === 'tasks' && params.get('queue')) {
    location.replace(`#/queue/${encodeURIComponent(params.get('queue'))}`);
  } else if (page === 'tasks') tasksPage(main, params);
  else if (page === 'hooks') hooksPage(main, every);
  else if (page === 'index') indexPage(main, id ?? '');
  else if (page === 'clients') clientsPage(main, id, params, route);
  else if (page === 'roles') rolesPage(main, id, route);
  else queuesPage(main, every);
}

function showCredentials() {
  const form = document.getElementById('credentials');
  const creds = credentials();
  form.classList.toggle('signed-in', Boolean(creds));
  document.getElementById('who').textContent = creds ? `Signed in as ${creds.clientId}` : '';
}

document.getElementById('credentials').addEventListener('submit', event => {
  event.preventDefault();
  const { clientId, accessToken } = event.target.elements;
  if (!clientId.value || !accessToken.value) return;
  signIn(clientId.value, accessToken.value);
  event.target.reset();
  showCredentials();
  route();
});
document.getElementById('sign-out').addEventListener('click', () => {
  signOut();
  showCredentials();
  route();
});
document.getElementById('lookup').addEventListener('submit', event => {
  event.preventDefault();
  const id = event.target.elements.id.value.trim();
  if (id) location.hash = `#/${event.submitter.value}/${id}`;
});
window.addEventListener('hashchange', route);
showCredentials();
route();
