// The browser's view of the official client: the Queue, the Hooks for the hooks page, and the
// Auth for the clients and roles page.
export { Auth, Hooks, Queue } from 'taskcluster-client-web';
