// Drives the secrets and purge-cache services with the Node Taskcluster client's Secrets and
// PurgeCache (taskcluster-client, pinned in package.json), for tests/e2e/test_node_client.py.
//
// Usage: node node_secrets.js '<json>' where the JSON names rootUrl, root's credentials, a
// secret's name and value, and a worker pool. As root, the script sets the secret, reads and
// lists it, removes it and reads it again; purges a cache of the pool and reads the pool's
// purge requests and all of them. It prints one JSON object of what each call answered (a
// refusal: its HTTP status).
'use strict';

const { taskcluster, status, run } = require('./node_common.js');

async function main(input) {
  const { rootUrl, credentials, name, value, workerPoolId } = input;
  const secrets = new taskcluster.Secrets({ rootUrl, credentials, retries: 0 });
  const seen = {};
  seen.set = await secrets.set(name, { secret: value, expires: taskcluster.fromNow('1 day') });
  seen.got = await secrets.get(name);
  seen.listed = await secrets.list({ limit: 10 });
  seen.removed = await secrets.remove(name);
  seen.afterRemove = await status(() => secrets.get(name));
  const purgeCache = new taskcluster.PurgeCache({ rootUrl, credentials, retries: 0 });
  seen.purged = (await purgeCache.purgeCache(workerPoolId, { cacheName: 'node-cache' })) ?? null;
  seen.requests = await purgeCache.purgeRequests(workerPoolId, {
    since: new Date(0).toJSON(),
  });
  seen.all = await purgeCache.allPurgeRequests({ limit: 10 });
  return seen;
}

run(main);
