// Reads one artifact through a signed URL made by the Node Taskcluster client
// (taskcluster-client, pinned in package.json), for tests/e2e/test_node_client.py.
//
// Usage: node node_signed_url.js '<json>' where the JSON names rootUrl, credentials
// ({clientId, accessToken[, certificate]}), taskId, runId and name. The client builds the
// getArtifact URL with a bewit (buildSignedUrl); the script GETs it without following the
// redirect, then GETs the Location, then GETs the same signed URL with the bewit's MAC
// altered. It prints one JSON object: signedUrl, the signed GET's status, Location and JSON
// body, the followed GET's status, Content-Type and body (base64), and the tampered GET's
// status and JSON body. Every request gives up after 30 s.
'use strict';

// The package is an ES module compiled to CommonJS: its clients are on `default`.
const taskcluster = require('taskcluster-client').default;

const TIMEOUT_MS = 30000;

/** The bewit of a signed URL with one character of its MAC changed. */
function tampered(signedUrl) {
  const url = new URL(signedUrl);
  const bewit = url.searchParams.get('bewit');
  // A bewit is base64url('<id>\<exp>\<mac>\<ext>').
  const parts = Buffer.from(bewit, 'base64url').toString().split('\\');
  parts[2] = (parts[2][0] === 'A' ? 'B' : 'A') + parts[2].slice(1);
  url.searchParams.set('bewit', Buffer.from(parts.join('\\')).toString('base64url'));
  return url.toString();
}

async function get(url, redirect) {
  return fetch(url, { redirect, signal: AbortSignal.timeout(TIMEOUT_MS) });
}

async function main() {
  const input = JSON.parse(process.argv[2]);
  const queue = new taskcluster.Queue({
    rootUrl: input.rootUrl,
    credentials: input.credentials,
  });
  const signedUrl = queue.buildSignedUrl(queue.getArtifact, input.taskId, input.runId, input.name);

  const signed = await get(signedUrl, 'manual');
  const location = signed.headers.get('location');
  const signedBody = await signed.json();

  const followed = await get(location, 'follow');
  const bytes = Buffer.from(await followed.arrayBuffer());

  const forged = await get(tampered(signedUrl), 'manual');
  const forgedBody = await forged.json();

  process.stdout.write(JSON.stringify({
    signedUrl,
    signed: { status: signed.status, location, body: signedBody },
    followed: {
      status: followed.status,
      contentType: followed.headers.get('content-type'),
      body: bytes.toString('base64'),
    },
    tampered: { status: forged.status, body: forgedBody },
  }));
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
