// The browser's view of the official client: the Queue, and the Hooks for the hooks page.
export { Hooks, Queue } from 'taskcluster-client-web';
