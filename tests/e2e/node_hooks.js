// Drives the hooks service with the Node Taskcluster client's Hooks (taskcluster-client,
// pinned in package.json), for tests/e2e/test_node_client.py.
//
// Usage: node node_hooks.js '<json>' where the JSON names rootUrl, credentials, hookGroupId,
// hookId and the createHook body. The script creates the hook, reads it back (hook,
// listHooks, listHookGroups), triggers it with a payload and with its token, lists its last
// fires and its status, removes it and reads it again. It prints one JSON object of what each
// call answered (the last read: its HTTP status).
'use strict';

const { taskcluster, run } = require('./node_common.js');

async function main(input) {
  const { hookGroupId, hookId } = input;
  const hooks = new taskcluster.Hooks({
    rootUrl: input.rootUrl,
    credentials: input.credentials,
    retries: 0,
  });
  const seen = {};
  seen.created = await hooks.createHook(hookGroupId, hookId, input.body);
  seen.hook = await hooks.hook(hookGroupId, hookId);
  seen.listed = await hooks.listHooks(hookGroupId);
  seen.groups = await hooks.listHookGroups();
  seen.triggered = await hooks.triggerHook(hookGroupId, hookId, { colour: 'blue' });
  const { token } = await hooks.getTriggerToken(hookGroupId, hookId);
  const anonymous = new taskcluster.Hooks({ rootUrl: input.rootUrl, retries: 0 });
  seen.byToken = await anonymous.triggerHookWithToken(hookGroupId, hookId, token, { colour: 'green' });
  seen.lastFires = await hooks.listLastFires(hookGroupId, hookId);
  seen.status = await hooks.getHookStatus(hookGroupId, hookId);
  seen.removed = await hooks.removeHook(hookGroupId, hookId);
  try {
    await hooks.hook(hookGroupId, hookId);
    seen.afterRemove = 200;
  } catch (error) {
    seen.afterRemove = error.statusCode;
  }
  return seen;
}

run(main);
