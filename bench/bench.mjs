// The browser half of `cargo xtask bench`: serves the package, the model, wllama's files and bench/ (with the
// cross-origin isolation headers), opens headless Debian Chromium (WebGPU on SwiftShader; tests/e2e/browser.mjs)
// and runs each configuration in a fresh browser context (a cold page: its own HTTP cache, its own wasm
// instance), then measures the packages' sizes (raw and brotli). Usage (xtask writes the config):
//
//   node bench/bench.mjs CONFIG.json OUT.json
//
// CONFIG: { root, cache, model (path under the cache), prompts (the file examples/bench.rs --tokenize wrote),
//           tokens, runs, warmup, configs: ['kiln-webgpu', 'kiln-cpu', 'wllama', 'kiln-chat'],
//           wllama: 'auto'|'webgpu'|'cpu', threads, chat_turns, chat_tokens }
// Timings only: nothing here asserts on them.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { brotliCompressSync } from 'node:zlib';
import { writeFileSync } from 'node:fs';
import { launch } from '../tests/e2e/browser.mjs';
import { serve } from './serve.mjs';

const [configPath, outPath] = process.argv.slice(2);
if (!configPath || !outPath) {
  console.error('usage: node bench/bench.mjs CONFIG.json OUT.json');
  process.exit(2);
}
const config = JSON.parse(readFileSync(configPath, 'utf8'));
const { root, cache } = config;
const { prompts, texts, stop_ids: stopIds } = JSON.parse(readFileSync(config.prompts, 'utf8'));
const wllamaDir = join(root, 'node_modules', '@wllama', 'wllama');

const mounts = [
  ['/pkg/', join(root, 'pkg')],
  ['/models/', cache],
  ['/bench/', join(root, 'bench')],
  ['/wllama/', wllamaDir],
];
const { base, server } = await serve(mounts);
const model = `/models/${config.model}`;
console.error(`bench: serving on ${base}; prompts of ${Object.keys(prompts).join(', ')} tokens, ${config.tokens} decoded, ${config.warmup} warm-up + ${config.runs} runs`);

const browser = await launch();
const common = { model, prompts, texts, stopIds, tokens: config.tokens, runs: config.runs, warmup: config.warmup };
const maxPrompt = Math.max(...Object.values(prompts).map((p) => p.length));

/** Runs `fn(args)` (a page function's name) in a fresh context; returns its result or `{ error }`. */
async function inFreshPage(name, fn, args) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('console', (m) => console.error(`  ${name} | ${m.text()}`));
  page.on('pageerror', (e) => console.error(`  ${name} | page error: ${e.message}`));
  const started = Date.now();
  try {
    await page.goto(`${base}/bench/index.html`);
    await page.waitForFunction(() => window.benchReady === true);
    const result = await page.evaluate(([f, a]) => window[f](a), [fn, args]);
    console.error(`bench: ${name} done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    return result;
  } catch (e) {
    console.error(`bench: ${name} failed: ${e.message}`);
    return { error: e.message.split('\n')[0] };
  } finally {
    await context.close();
  }
}

const results = {};
for (const name of config.configs) {
  console.error(`\nbench: ${name} (browser)`);
  if (name === 'kiln-webgpu' || name === 'kiln-cpu') {
    const cpu = name === 'kiln-cpu';
    results[name] = await inFreshPage(name, 'benchKiln', { ...common, device: cpu ? 'cpu' : 'webgpu', threads: cpu ? config.threads ?? 1 : undefined });
  } else if (name === 'kiln-chat') {
    // ~60-token user turns: consecutive 45-word pieces of bench/text.txt.
    const words = readFileSync(join(root, 'bench', 'text.txt'), 'utf8').split(/\s+/).filter(Boolean);
    const userTexts = Array.from({ length: config.chat_turns }, (_, i) => words.slice(i * 45, (i + 1) * 45).join(' '));
    results[name] = await inFreshPage(name, 'benchChat', {
      model, device: 'cpu', userTexts, turns: config.chat_turns, tokens: config.chat_tokens, stopIds,
    });
  } else if (name === 'wllama') {
    const wanted = config.wllama ?? 'auto';
    const args = { ...common, threads: config.threads ?? 1, nCtx: Math.max(1024, maxPrompt + config.tokens + 16) };
    let r = null;
    if (wanted !== 'cpu') {
      r = await inFreshPage('wllama-webgpu', 'benchWllama', { ...args, backend: 'webgpu' });
      if (r.error && wanted === 'auto') {
        console.error('bench: wllama on WebGPU failed; its CPU path instead');
        const webgpuError = r.error;
        r = await inFreshPage('wllama-cpu', 'benchWllama', { ...args, backend: 'cpu' });
        r.webgpu_error = webgpuError;
      }
    } else {
      r = await inFreshPage('wllama-cpu', 'benchWllama', { ...args, backend: 'cpu' });
    }
    results[name] = r;
  } else {
    results[name] = { error: `unknown configuration ${name}` };
  }
}
await browser.close();
server.close();

/** Raw and brotli sizes of each file, and their sums. */
function sizes(files) {
  const out = { files: {}, raw: 0, brotli: 0 };
  for (const [label, path] of files) {
    const bytes = readFileSync(path);
    const brotli = brotliCompressSync(bytes).length;
    out.files[label] = { raw: bytes.length, brotli };
    out.raw += bytes.length;
    out.brotli += brotli;
  }
  return out;
}
const packages = {
  kiln: sizes(['kiln_bg.wasm', 'kiln.js', 'index.js'].map((f) => [f, join(root, 'pkg', f)])),
  wllama: sizes([
    ['esm/wasm/wllama.wasm', join(wllamaDir, 'esm', 'wasm', 'wllama.wasm')],
    ['esm/index.js', join(wllamaDir, 'esm', 'index.js')],
  ]),
};
const wllamaVersion = JSON.parse(readFileSync(join(wllamaDir, 'package.json'), 'utf8')).version;
const chromium = browser.version();
writeFileSync(outPath, `${JSON.stringify({ chromium, wllama_version: wllamaVersion, packages, results }, null, 2)}\n`);
console.error(`bench: browser results in ${outPath}`);
