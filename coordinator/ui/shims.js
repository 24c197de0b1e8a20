// Node globals the bundled packages expect, injected by esbuild where they are used.
import { Buffer } from 'buffer';
import process from 'process';

export { Buffer, process };
