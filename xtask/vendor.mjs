// Bundles openai-node (the `openai` package, from node_modules) into one browser ES module for the demo's
// "use with openai-node" panel: `target/vendor/openai.js`, served at `/vendor/openai.js` (xtask/src/serve.rs).
// Run by `cargo xtask demo` and `cargo xtask test` after the package is built.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
await build({
  stdin: { contents: "export { default } from 'openai';", resolveDir: root, loader: 'js' },
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'chrome120',
  minify: true,
  outfile: `${root}target/vendor/openai.js`,
  logLevel: 'warning',
});
