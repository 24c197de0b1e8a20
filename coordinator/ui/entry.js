// The browser's view of the official client: the Queue, the Hooks for the hooks page, the Auth
// for the clients and roles page, and the Index for the index page.
export { Auth, Hooks, Index, Queue } from 'taskcluster-client-web';
