// Creates a task and reads its status with the Node Taskcluster client's Queue
// (taskcluster-client, pinned in package.json) over HTTPS, for tests/e2e/test_tls.py; the
// coordinator's private CA reaches Node through NODE_EXTRA_CA_CERTS.
//
// Usage: node node_tls.js '<json>' where the JSON names rootUrl, credentials, taskId and task.
// It prints one JSON object: the state createTask answered and the state status reads back.
'use strict';

const { taskcluster, run } = require('./node_common.js');

async function main(input) {
  const { rootUrl, credentials, taskId, task } = input;
  const queue = new taskcluster.Queue({ rootUrl, credentials, retries: 0 });
  const created = await queue.createTask(taskId, task);
  const read = await queue.status(taskId);
  return { created: created.status.state, read: read.status.state };
}

run(main);
