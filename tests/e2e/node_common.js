// What the Node client scripts of tests/e2e/test_node_client.py share: the official client
// (taskcluster-client, pinned in package.json), a call's HTTP status, and running a script's
// main: its JSON input from argv[2], its answers as one JSON object on stdout, a failure's
// stack and error body on stderr with exit status 1.
'use strict';

// The package is an ES module compiled to CommonJS: its clients are on `default`.
const taskcluster = require('taskcluster-client').default;

// 200 when the call succeeds, else the status it was refused with.
async function status(call) {
  try {
    await call();
    return 200;
  } catch (error) {
    return error.statusCode;
  }
}

function run(main) {
  main(JSON.parse(process.argv[2]))
    .then(seen => process.stdout.write(JSON.stringify(seen)))
    .catch(error => {
      process.stderr.write(`${error.stack}\n${JSON.stringify(error.body ?? null)}\n`);
      process.exit(1);
    });
}

module.exports = { taskcluster, status, run };
