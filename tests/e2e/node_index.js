// Drives the index service with the Node Taskcluster client's Index (taskcluster-client,
// pinned in package.json), for tests/e2e/test_node_client.py.
//
// Usage: node node_index.js '<json>' where the JSON names rootUrl, credentials holding
// index:*, and two taskIds. The script inserts the first at <ns>.first (rank 2) and the second
// at <ns>.first (rank 1, outranked) and <ns>.sub.second, then finds, lists and deletes them. It
// prints one JSON object of what each call answered (a refusal: its HTTP status).
'use strict';

const { taskcluster, status, run } = require('./node_common.js');

async function main(input) {
  const { rootUrl, credentials, taskIds } = input;
  const index = new taskcluster.Index({ rootUrl, credentials, retries: 0 });
  const entry = (taskId, rank) => ({
    taskId,
    rank,
    data: { from: 'node' },
    expires: taskcluster.fromNow('1 day'),
  });
  const seen = {};
  seen.inserted = await index.insertTask('node.first', entry(taskIds[0], 2));
  seen.outranked = await index.insertTask('node.first', entry(taskIds[1], 1));
  await index.insertTask('node.sub.second', entry(taskIds[1], 0));
  seen.found = await index.findTask('node.first');
  seen.top = await index.listNamespaces('');
  seen.namespaces = await index.listNamespaces('node');
  seen.tasks = await index.listTasks('node', { limit: 1 });
  seen.atIndexes = await index.findTasksAtIndex({
    indexes: ['node.sub.second', 'node.none', 'node.first'],
  });
  seen.deleted = await index.deleteTask('node.first');
  seen.afterDelete = await status(() => index.findTask('node.first'));
  return seen;
}

run(main);
