// The browser's view of the official client: only the Queue is needed by the dashboard.
export { Queue } from 'taskcluster-client-web';
