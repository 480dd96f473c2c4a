// Builds the prebuilt (federated) JupyterLab extension into ../xlalab/labextension.
//
// `jupyter labextension build` would do the same, but depending on the installed
// JupyterLab it looks up JupyterLab's core package metadata on the network. Here the
// metadata comes from the @jupyterlab/core-meta devDependency, so the build needs
// neither Python nor anything beyond `npm ci`.
//
// usage: node scripts/build-labextension.mjs [--development]
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const extensionDir = dirname(dirname(fileURLToPath(import.meta.url)));

// @jupyterlab/builder reads `<core path>/package.json`; core-meta ships that file as
// core.package.json.
const coreMeta = require.resolve('@jupyterlab/core-meta/core.package.json');
const corePath = join(extensionDir, 'node_modules', '.xlalab-core');
mkdirSync(corePath, { recursive: true });
copyFileSync(coreMeta, join(corePath, 'package.json'));

const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
const args = [builder, '--core-path', corePath, ...process.argv.slice(2), extensionDir];
const result = spawnSync(process.execPath, args, { cwd: extensionDir, stdio: 'inherit' });
process.exit(result.status ?? 1);
