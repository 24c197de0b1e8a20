// Drives the auth service with the Node Taskcluster client's Auth (taskcluster-client, pinned
// in package.json), for tests/e2e/test_node_client.py.
//
// Usage: node node_auth.js '<json>' where the JSON names rootUrl, root's credentials, a
// clientId, a roleId and the role's scopes. As root, the script creates the role and a client
// assuming it, lists and reads them, then, as the new client, asks for its current scopes and
// for testAuthenticate; root resets the client's token, and the old token is tried again. It
// prints one JSON object of what each call answered (a refusal: its HTTP status).
'use strict';

const { taskcluster, status, run } = require('./node_common.js');

async function main(input) {
  const { rootUrl, clientId, roleId } = input;
  const root = new taskcluster.Auth({ rootUrl, credentials: input.credentials, retries: 0 });
  const seen = {};
  seen.role = await root.createRole(roleId, { description: 'from node', scopes: input.scopes });
  seen.created = await root.createClient(clientId, {
    description: 'from node',
    expires: taskcluster.fromNow('1 day'),
    scopes: [`assume:${roleId}`],
  });
  seen.client = await root.client(clientId);
  seen.clients = await root.listClients({ prefix: clientId.split('/')[0] });
  seen.roleIds = await root.listRoleIds();
  seen.expanded = await root.expandScopes({ scopes: [`assume:${roleId}`] });
  const old = { clientId, accessToken: seen.created.accessToken };
  const made = new taskcluster.Auth({ rootUrl, credentials: old, retries: 0 });
  seen.current = await made.currentScopes();
  seen.tested = await new taskcluster.Auth({
    rootUrl,
    credentials: { clientId: 'tester', accessToken: 'no-secret' },
    retries: 0,
  }).testAuthenticate({ clientScopes: ['test:*'], requiredScopes: ['test:a'] });
  await root.resetAccessToken(clientId);
  seen.oldAfterReset = await status(() => made.currentScopes());
  await root.deleteClient(clientId);
  await root.deleteRole(roleId);
  seen.afterDelete = await status(() => root.client(clientId));
  return seen;
}

run(main);
