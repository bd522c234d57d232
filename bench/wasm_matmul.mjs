// The CPU matmul timings of `examples/cpu_matmul_bench.rs` in WebAssembly under V8 (node), the engine of
// Chromium: the example built for wasm32-unknown-unknown with the package's flags (simd128, release
// profile), bound with wasm-bindgen for node, then run.
//
//   node bench/wasm_matmul.mjs [m1,m2,… [TYPE,TYPE,…]]   (CARGO_TARGET_DIR is honoured)
//
// Timings only: nothing here asserts on them.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const target = path.resolve(root, process.env.CARGO_TARGET_DIR ?? 'target');
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });

run('cargo', ['build', '--quiet', '--release', '--example', 'cpu_matmul_bench', '--target', 'wasm32-unknown-unknown']);
const out = path.join(target, 'bench', 'wasm_matmul');
run('wasm-bindgen', [
  '--target', 'nodejs', '--out-dir', out,
  path.join(target, 'wasm32-unknown-unknown', 'release', 'examples', 'cpu_matmul_bench.wasm'),
]);
const bench = createRequire(import.meta.url)(path.join(out, 'cpu_matmul_bench.js'));
process.stdout.write(bench.run(process.argv.slice(2).join(' ')));
