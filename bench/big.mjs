// The 7–8B benchmark in headless Debian Chromium (WebGPU on SwiftShader; tests/e2e/browser.mjs): can a tab load
// Llama 3.2 1B, Llama 3.2 3B and Llama 3.1 8B (Q4_K_M), what does it cost in wasm memory, and what does one token
// take? The files are random-weight GGUFs of the real shapes (tests/fixtures/make_llama_shape_files.py: 0.81,
// 2.02 and 4.92 GB, the 8B one with tensors past 4 GiB), served over HTTP by bench/serve.mjs;
// bench/big-page.js does the work in the page.
//
//   node bench/big.mjs [--models 1b,3b,8b] [--configs kiln-webgpu,kiln-cpu,wllama-cpu] [--timeout S (3600)]
//                      [--dir DIR ($KILN_CACHE/big-shapes)] [--out OUT.json (target/bench/big.json)]
//                      [--pkg DIR (pkg)] [--context N] [--root DIR]
//                      [--table OUT.json] (print the tables of an earlier run and exit)
//
// Every page below is a fresh browser (so the wasm memory, and SwiftShader's, starts clean), given `--timeout`
// seconds for all its steps; a step past it is recorded as timed out and the browser closed. Per model:
//
// - `kiln-webgpu` / `kiln-cpu`: first a page that runs `Engine.inspect(url, { device })` (the headers only): its
//   wall time, what it says the device would do (`device.runs`, `.error`, `.weightBytes`, `.contextLength`) and
//   the wasm memory after it (its peak; the CPU on the single-threaded build, `threads: 1`, as below).
//   Then a page that runs `Engine.load({ source: url, device })` (the CPU backend on its single-threaded build,
//   `threads: 1`; `contextLength` only with `--context`): the wall time to a usable engine or to the refusal,
//   the bytes downloaded by then (the last `download` progress report), the wasm memory
//   (`(await import('/pkg/kiln.js')).default()).memory.buffer.byteLength`) before the load and after it (wasm
//   memory only grows: after is the load's peak), `engine.memory` (weightBytes, deviceBytesInUse) and
//   `engine.context` (the granted length, the model's, KV bytes per position, what bounds it), and where the wasm
//   memory grew (its size at each progress report where it changed, with the bytes downloaded and uploaded by
//   then: `wasm_growth` in the JSON, printed for WebGPU); then ONE greedy token (`completions.create({ prompt:
//   'The capital of France is', max_tokens: 1, temperature: 0 })`): its wall time. The CPU backend refuses the 8B file from its headers ("does not fit the CPU backend"): the
//   refusal's message, time and bytes downloaded are the row.
// - `wllama-cpu`: wllama (llama.cpp in wasm, node_modules/@wllama/wllama) as bench/families-page.js loads it:
//   the URL fetched into a Blob, handed over as a File, 1 thread, n_ctx 512; the wall time of fetch + load, the
//   worker's wasm memory (bench/worker-memory.js) after the load and after one greedy token, the token's wall
//   time; where it cannot load, the error (the 4.9 GB file: Chromium's fetch of it into a Blob fails, "Failed to
//   fetch", before llama.cpp sees a byte; llama.cpp's wasm32 heap could not hold it either).
//
// Beside them, per file, from its header (read here, in Node): the largest tensor and the bound of issue 42,
// "largest tensor + 64 MiB" beyond the module and the tokenizer, against kiln WebGPU's wasm memory growth during
// the load past its baseline (the load page first runs `Engine.inspect` on the same URL, which parses the header
// and builds the tokenizer and frees both; the memory after it is the baseline, and the load's own header and
// tokenizer reuse that room; `wasm_baseline` in the JSON): on
// WebGPU each tensor goes to the device as it arrives, so the file is never whole in wasm memory. (On the CPU
// backend the weights live in wasm memory: its growth is shown against weights + that bound, for information.)
//
// Nothing asserts on a timing (a bench; SwiftShader is a CPU emulation: its WebGPU times say nothing of a GPU's).
// The exit status is 1 when a kiln WebGPU load fails or times out, or its wasm growth exceeds the bound (the
// reasons are printed): that makes `cargo xtask bench --big` the issue's check in Chromium. Results go to
// `--out` (written after every page) and a table is printed.
//
// `cargo xtask bench --big` writes the files when missing and builds the package, then runs this.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, statSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from '../tests/e2e/browser.mjs';
import { args, opt, paths } from './options.mjs';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { root, cache } = paths(here);
const dir = opt('dir', join(cache, 'big-shapes'));
const outPath = opt('out', join(root, 'target', 'bench', 'big.json'));
const pkgDir = opt('pkg', join(root, 'pkg'));
const timeout = Number(opt('timeout', 3600));
const contextLength = opt('context', null) === null ? undefined : Number(opt('context'));
const models = opt('models', '1b,3b,8b').split(',').filter(Boolean);
const CONFIGS = ['kiln-webgpu', 'kiln-cpu', 'wllama-cpu'];
const configs = opt('configs', CONFIGS.join(',')).split(',').filter(Boolean);
const PROMPT = 'The capital of France is';
const WLLAMA_N_CTX = 512;
const MiB = 2 ** 20;
/** Issue 42's bound on the wasm memory a streamed WebGPU load may add: the largest tensor + this. */
const SLACK = 64 * MiB;

const MODELS = {
  '1b': { file: 'llama-3.2-1b-instruct-random-q4_k_m.gguf', name: 'Llama 3.2 1B Instruct shape, Q4_K_M (16 layers, width 2048, tied embeddings)' },
  '3b': { file: 'llama-3.2-3b-instruct-random-q4_k_m.gguf', name: 'Llama 3.2 3B Instruct shape, Q4_K_M (28 layers, width 3072, tied embeddings)' },
  '8b': { file: 'llama-3.1-8b-instruct-random-q4_k_m.gguf', name: 'Llama 3.1 8B Instruct shape, Q4_K_M (32 layers, width 4096; tensors past 4 GiB)' },
};

for (const c of configs) if (!CONFIGS.includes(c)) throw new Error(`unknown config ${c} (known: ${CONFIGS.join(', ')})`);
for (const m of models) if (!MODELS[m]) throw new Error(`unknown model ${m} (known: ${Object.keys(MODELS).join(', ')})`);

// --------------------------------------------------------------------------------------------------------------
// The GGUF header (metadata skipped, tensor infos read), from the start of the file: the largest tensor.

/** ggml types: [values per block, bytes per block]. */
const GGML = {
  0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34], 9: [32, 36],
  10: [256, 84], 11: [256, 110], 12: [256, 144], 13: [256, 176], 14: [256, 210], 15: [256, 292], 30: [1, 2],
};

function ggufTensors(path) {
  const fd = openSync(path, 'r');
  let buf = Buffer.alloc(0);
  const ensure = (end) => {
    if (end <= buf.length) return;
    const size = Math.max(end, buf.length * 2, 16 * MiB);
    const next = Buffer.alloc(size);
    const n = readSync(fd, next, 0, size, 0);
    if (n < end) throw new Error(`${path}: the header runs past the end of the file`);
    buf = next;
  };
  let at = 0;
  const take = (n) => { ensure(at + n); const s = at; at += n; return s; };
  const u32 = () => buf.readUInt32LE(take(4));
  const u64 = () => Number(buf.readBigUInt64LE(take(8)));
  const str = () => { const len = u64(); const s = take(len); return buf.toString('utf8', s, s + len); };
  const SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) { take(u64()); return; }
    if (type !== 9) { take(SIZE[type]); return; }
    const [t, count] = [u32(), u64()];
    if (t !== 8 && t !== 9) { take(SIZE[t] * count); return; }
    for (let i = 0; i < count; i++) skip(t);
  };
  try {
    ensure(24);
    if (buf.toString('ascii', 0, 4) !== 'GGUF') throw new Error(`${path}: not a GGUF file`);
    at = 8;
    const [count, kvs] = [u64(), u64()];
    for (let i = 0; i < kvs; i++) {
      str();
      skip(u32());
    }
    const tensors = [];
    for (let i = 0; i < count; i++) {
      const name = str();
      const dims = Array.from({ length: u32() }, u64);
      const type = u32();
      u64(); // offset
      const elements = dims.reduce((a, b) => a * b, 1);
      const [block, bytes] = GGML[type] ?? [null, null];
      tensors.push({ name, dims, type, bytes: block ? (elements / block) * bytes : null });
    }
    return tensors;
  } finally {
    closeSync(fd);
  }
}

// --------------------------------------------------------------------------------------------------------------
// Tables

const f = (x, d = 0) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));
const mib = (b) => f(b == null ? null : b / MiB);
const sec = (ms) => f(ms == null ? null : ms / 1000, 1);
const short = (s, n = 110) => (s && s.length > n ? `${s.slice(0, n - 1)}…` : s ?? '');

function table(head, rows) {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  console.log(head.map((h, i) => h.padEnd(widths[i])).join(' | '));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const r of rows) console.log(r.map((v, i) => String(v).padEnd(widths[i])).join(' | '));
}

const ctxText = (c) => (c ? `${c.length}/${c.modelLength} (${c.bound})` : '-');

function printTables(report) {
  console.log(`\nChromium ${report.chromium}, wllama ${report.wllama_version}, ${report.cores} cores; WebGPU = SwiftShader (a CPU emulation); one greedy token of ${JSON.stringify(report.prompt)}; each row a fresh browser; MiB = 2^20 bytes`);
  const inspectRows = [];
  const loadRows = [];
  for (const m of Object.values(report.models)) {
    for (const c of ['kiln-webgpu', 'kiln-cpu']) {
      const i = m.results[c]?.inspect;
      if (!i) continue;
      const d = i.result?.device;
      inspectRows.push([
        m.key, c, f(i.ms), i.error ? 'error' : String(d?.runs), mib(d?.weightBytes), f(d?.contextLength), mib(i.wasm_after),
        i.result ? `${i.result.largestTensor?.name} ${mib(i.result.largestTensor?.bytes)}` : '-',
        short(i.error?.message ?? d?.error ?? i.timeout ?? '', 90),
      ]);
    }
    for (const c of configs) {
      const r = m.results[c];
      if (!r) continue;
      if (c === 'wllama-cpu') {
        const l = r.load ?? {};
        const t = r.token ?? {};
        loadRows.push([
          m.key, c, sec(l.load_ms), f(l.blob_bytes == null ? null : l.blob_bytes / 1e6), '-', mib(l.wasm_memory), '-', '-', '-', '-', '-',
          sec(t.ms), short(r.timeout ?? l.error?.message ?? t.error?.message ?? (t.text != null ? `token ${JSON.stringify(t.text)}; worker wasm after it ${mib(t.wasm_memory)} MiB` : '')),
        ]);
        continue;
      }
      const l = r.load ?? {};
      const t = r.token ?? {};
      // Beyond the module and the tokenizer (the page's memory after inspecting the headers: big-page.js).
      const growth = l.wasm_after != null ? l.wasm_after - (l.wasm_baseline ?? l.wasm_before) : null;
      const bound = c === 'kiln-webgpu' ? m.bound : l.memory ? m.bound + l.memory.weightBytes : null;
      loadRows.push([
        m.key, c, sec(l.load_ms), f(l.downloaded == null ? null : l.downloaded / 1e6), `${mib(l.wasm_before)} / ${mib(l.wasm_baseline)}`, mib(l.wasm_after),
        mib(growth), bound == null ? '-' : `${mib(bound)}${c === 'kiln-cpu' ? ' (w+b)' : ''} ${growth <= bound ? 'ok' : 'OVER'}`,
        mib(l.memory?.weightBytes), mib(l.memory?.deviceBytesInUse), ctxText(l.context), sec(t.ms),
        short(r.timeout ?? l.error?.message ?? t.error?.message ?? (t.text != null ? `token ${JSON.stringify(t.text)}` : '')),
      ]);
    }
  }
  console.log('\nEngine.inspect (headers only):');
  table(['model', 'device', 'ms', 'runs', 'weights MiB', 'context', 'wasm after MiB', 'largest tensor MiB', 'error'], inspectRows);
  console.log('\nLoads (wasm memory of the page: kiln\'s module; wllama: its worker\'s, after the load) and one token:');
  table(['model', 'config', 'load s', 'downloaded MB', 'wasm: module / + tokenizer MiB', 'wasm after MiB', 'growth beyond the tokenizer MiB', 'bound MiB', 'weights MiB', 'device in use MiB', 'context (bound)', 'token s', 'error / note'], loadRows);
  console.log('\nThe bound of issue 42 (largest tensor + 64 MiB) against kiln WebGPU\'s wasm growth during the load:');
  for (const m of Object.values(report.models)) {
    const l = m.results['kiln-webgpu']?.load;
    const growth = l?.wasm_after != null ? l.wasm_after - (l.wasm_baseline ?? l.wasm_before) : null;
    console.log(`  ${m.key}: ${m.file} ${f(m.file_bytes / 1e9, 2)} GB; largest tensor ${m.largest_tensor.name} ${mib(m.largest_tensor.bytes)} MiB; bound ${mib(m.bound)} MiB; kiln WebGPU growth ${l ? (growth == null ? 'n/a' : `${mib(growth)} MiB (${growth <= m.bound ? 'within' : 'OVER'})`) : 'not run'}${l?.error ? ` — load failed: ${short(l.error.message, 200)}` : ''}`);
    // where it grew: the memory's size at the first progress report after each growth (MB downloaded / uploaded by then)
    if (l?.wasm_growth?.length) console.log(`      grew to: ${l.wasm_growth.map((g) => `${mib(g.bytes)} MiB (${f(g.downloaded / 1e6)} / ${f(g.uploaded / 1e6)} MB)`).join(', ')}; after the load ${mib(l.wasm_after)} MiB`);
  }
  if (report.failures?.length) {
    console.log('\nFAILED:');
    for (const x of report.failures) console.log(`  ${x}`);
  }
}

if (args.includes('--table')) {
  printTables(JSON.parse(readFileSync(opt('table'), 'utf8')));
  process.exit(0);
}

// --------------------------------------------------------------------------------------------------------------
// The pages

for (const m of models) {
  const path = join(dir, MODELS[m].file);
  if (!existsSync(path)) throw new Error(`${path} is missing: \`cargo xtask bench --big\` writes it (tests/fixtures/make_llama_shape_files.py)`);
}

const mounts = [
  ['/pkg/', pkgDir],
  ['/models/', dir],
  ['/bench/', join(root, 'bench')],
  ['/wllama/', join(root, 'node_modules', '@wllama', 'wllama')],
];
const { base, server } = await serve(mounts);
console.error(`big bench: serving on ${base}; files from ${dir}; pkg ${pkgDir}; models ${models.join(', ')}; configs ${configs.join(', ')}; ${timeout} s a page`);

const started = Date.now();
const stamp = () => `${((Date.now() - started) / 1000).toFixed(0).padStart(5)} s`;

/**
 * A fresh browser with the bench page, and `call(fn, arg)`: `window[fn](arg)` in the page, given up when the
 * page's deadline (`timeout` s from its opening) passes, or at the page's first uncaught error or crash.
 */
async function openPage(name) {
  const browser = await launch();
  const page = await browser.newPage();
  page.on('console', (m) => console.error(`  ${stamp()} ${name} | ${m.text()}`));
  page.on('pageerror', (e) => console.error(`  ${stamp()} ${name} | page error: ${e.message}`));
  await page.goto(`${base}/bench/big.html`);
  await page.waitForFunction(() => window.bigReady === true);
  const deadline = Date.now() + timeout * 1000;
  const call = async (fn, arg) => {
    let timer;
    let onError;
    let onCrash;
    const limit = new Promise((_, no) => {
      timer = setTimeout(() => no(Object.assign(new Error(`timed out after ${timeout} s (in ${fn})`), { timedOut: true })), Math.max(0, deadline - Date.now()));
      onError = (e) => no(new Error(`page error in ${fn}: ${e.message}`));
      onCrash = () => no(new Error(`the page crashed in ${fn} (out of memory?)`));
      page.on('pageerror', onError);
      page.on('crash', onCrash);
    });
    try {
      return await Promise.race([page.evaluate(([f2, a]) => window[f2](a), [fn, arg]), limit]);
    } finally {
      clearTimeout(timer);
      page.off('pageerror', onError);
      page.off('crash', onCrash);
    }
  };
  return { browser, page, call, close: () => browser.close().catch(() => {}), version: browser.version() };
}

/** Runs `steps(call)` in a fresh page; an error (a timeout among them) lands in `into.timeout` / `into.error`. */
async function inPage(name, into, steps) {
  console.error(`\nbig bench: ${stamp()} ${name}`);
  let p = null;
  try {
    p = await openPage(name);
    report.chromium ??= p.version;
    await steps(p.call);
  } catch (e) {
    const message = e.message.split('\n')[0];
    console.error(`big bench: ${name}: ${message}`);
    if (e.timedOut) into.timeout = message;
    else into.error = message;
  } finally {
    await p?.close();
  }
}

const report = {
  chromium: null,
  wllama_version: JSON.parse(readFileSync(join(root, 'node_modules', '@wllama', 'wllama', 'package.json'), 'utf8')).version,
  cores: cpus().length,
  date: new Date().toISOString(),
  pkg: { dir: pkgDir, kiln_bg_wasm_mtime: statSync(join(pkgDir, 'kiln_bg.wasm')).mtime },
  prompt: PROMPT, timeout_s: timeout, context_length_option: contextLength ?? null, wllama_n_ctx: WLLAMA_N_CTX,
  models: {},
  failures: [],
};
const save = () => {
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
};

for (const key of models) {
  const spec = MODELS[key];
  const path = join(dir, spec.file);
  const tensors = ggufTensors(path);
  const largest = tensors.reduce((a, t) => (t.bytes > a.bytes ? t : a));
  const entry = {
    key, name: spec.name, file: spec.file, file_bytes: statSync(path).size, tensors: tensors.length,
    tensor_bytes: tensors.reduce((n, t) => n + t.bytes, 0), largest_tensor: { name: largest.name, bytes: largest.bytes },
    bound: largest.bytes + SLACK, results: {},
  };
  report.models[key] = entry;
  const url = `/models/${spec.file}`;
  console.error(`\nbig bench: ${key}: ${spec.file}, ${(entry.file_bytes / 1e9).toFixed(2)} GB, ${tensors.length} tensors; largest ${largest.name} ${(largest.bytes / MiB).toFixed(1)} MiB; bound ${(entry.bound / MiB).toFixed(1)} MiB`);
  for (const config of configs) {
    const r = {};
    entry.results[config] = r;
    if (config === 'wllama-cpu') {
      await inPage(`${key} wllama-cpu`, r, async (call) => {
        r.load = await call('bigWllamaLoad', { url, nCtx: WLLAMA_N_CTX });
        if (!r.load.error) r.token = await call('bigWllamaToken', { prompt: PROMPT });
      });
    } else {
      const device = config === 'kiln-webgpu' ? 'webgpu' : 'cpu';
      r.inspect = {};
      await inPage(`${key} ${config} inspect`, r.inspect, async (call) => {
        Object.assign(r.inspect, await call('bigInspect', { url, device }));
      });
      await inPage(`${key} ${config}`, r, async (call) => {
        r.load = await call('bigKilnLoad', { url, device, contextLength });
        if (!r.load.error) r.token = await call('bigKilnToken', { prompt: PROMPT });
      });
      if (config === 'kiln-webgpu') {
        const l = r.load;
        if (!l) report.failures.push(`${key} kiln-webgpu: no load result (${r.timeout ?? r.error})`);
        else if (l.error) report.failures.push(`${key} kiln-webgpu: the load failed after ${sec(l.load_ms)} s: ${l.error.message}`);
        else if (l.wasm_after - (l.wasm_baseline ?? l.wasm_before) > entry.bound) {
          report.failures.push(`${key} kiln-webgpu: wasm memory grew ${mib(l.wasm_after - (l.wasm_baseline ?? l.wasm_before))} MiB beyond the module and the tokenizer during the load, more than the largest tensor + 64 MiB = ${mib(entry.bound)} MiB`);
        }
      }
    }
    save();
  }
}
server.close();
report.wall_s = (Date.now() - started) / 1000;
save();
printTables(report);
console.log(`\nwritten: ${outPath} (${f(report.wall_s / 60, 1)} min)`);
if (report.failures.length) process.exitCode = 1;
