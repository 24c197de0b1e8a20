// The REST API through the official browser client, with this browser session's credentials.
import { Auth, Hooks, Index, Queue } from './vendor/taskcluster-client.js';

const KEY = 'queue-dashboard-credentials';

export function credentials() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY));
  } catch {
    return null;
  }
}

export function signIn(clientId, accessToken) {
  sessionStorage.setItem(KEY, JSON.stringify({ clientId, accessToken }));
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

function options() {
  const creds = credentials();
  return {
    rootUrl: window.location.origin,
    retries: 0,
    ...(creds ? { credentials: creds } : {}),
  };
}

export function queue() {
  return new Queue(options());
}

export function hooks() {
  return new Hooks(options());
}

export function auth() {
  return new Auth(options());
}

export function index() {
  return new Index(options());
}

// Every page of a paginated list method, up to `max` items.
export async function all(call, key, max = 1000) {
  const items = [];
  let continuationToken;
  do {
    const query = { limit: 200, ...(continuationToken ? { continuationToken } : {}) };
    const page = await call(query);
    items.push(...page[key]);
    continuationToken = page.continuationToken;
  } while (continuationToken && items.length < max);
  return items;
}

// taskQueueCountsBatch is this coordinator's addition: the client has no method for it, so it
// goes through the client's generic request; a single taskQueueCounts per queue otherwise
// (without the resolved counts). `resolvedWithin` (seconds) adds each queue's tasks resolved in
// that window, as `resolved`.
const BATCH = { method: 'post', route: '/task-queues/counts', args: [], query: [], input: true };

export async function countsOf(taskQueueIds, resolvedWithin) {
  const q = queue();
  if (!taskQueueIds.length) return [];
  try {
    const body = { taskQueueIds, ...(resolvedWithin ? { resolvedWithin } : {}) };
    return (await q.request(BATCH, [body])).taskQueueCounts;
  } catch {
    return Promise.all(taskQueueIds.map(id => q.taskQueueCounts(id)));
  }
}

// The methods of ours (not Taskcluster's) the dashboard calls, as entries for the client's
// generic request: the management API's filtered listing, counts and bulk actions, a task
// queue's pause and limits, and a task's runs' progress. Query filters repeat as `state=a&state=b`.
const FILTERS = ['taskQueueId', 'state'];
const OURS = {
  listTasks: { method: 'get', route: '/tasks', args: [], query: [...FILTERS, 'limit',
    'continuationToken'] },
  countTasks: { method: 'get', route: '/tasks/count', args: [], query: FILTERS },
  cancelTasks: { method: 'post', route: '/tasks/cancel', args: [], query: FILTERS },
  rerunTasks: { method: 'post', route: '/tasks/rerun', args: [], query: FILTERS },
  pauseTaskQueue: { method: 'post', route: '/task-queues/<taskQueueId>/pause',
    args: ['taskQueueId'], query: [], input: true },
  resumeTaskQueue: { method: 'post', route: '/task-queues/<taskQueueId>/resume',
    args: ['taskQueueId'], query: [] },
  setTaskQueueLimits: { method: 'put', route: '/task-queues/<taskQueueId>/limits',
    args: ['taskQueueId'], query: [], input: true },
  taskProgress: { method: 'get', route: '/task/<taskId>/progress', args: ['taskId'], query: [] },
};

export function ours(name, ...args) {
  return queue().request(OURS[name], args);
}
