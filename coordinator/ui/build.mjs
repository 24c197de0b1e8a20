// Bundles taskcluster-client-web's Queue, Hooks, Auth and Index for the browser into
// vendor/taskcluster-client.js.
// The client ships ES source importing bare package names, and hawk needs Node's crypto and
// url: those are filled in with browser packages (all pinned in package.json).
// Run from the repository root: `node coordinator/ui/build.mjs` (scripts/lib/setup.sh does).
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const shims = path.join(here, 'shims.js');

await build({
  entryPoints: [path.join(here, 'entry.js')],
  outfile: path.join(here, 'vendor', 'taskcluster-client.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2020'],
  minify: true,
  legalComments: 'eof',
  alias: {
    crypto: 'crypto-browserify',
    stream: 'stream-browserify',
    url: 'url',
    buffer: 'buffer',
    events: 'events',
  },
  inject: [shims],
  define: { global: 'globalThis', 'process.env.NODE_DEBUG': 'false' },
  logLevel: 'warning',
});
