// A file past 4 GiB through the Cache API, in headless Debian Chromium (issue 42): `Engine.load` of the Llama 3.1
// 8B shape (4.92 GB, tests/fixtures/make_llama_shape_files.py; `cargo xtask bench --big` writes it) on WebGPU with
// `cache: true`, which streams the download into the loader and into the cache at once; then the cached response
// read back whole (its byte count against the file's), and, with the server refusing the file from then on,
// `Engine.inspect` and `Engine.load` again from the cache alone, and one greedy token. Prints a JSON line; exits 1
// when a step fails or the cached bytes differ.
//
// The browser runs on a persistent profile (a fresh temporary directory, removed afterwards): Playwright's default
// contexts are incognito-like, where the Cache API refuses a response of this size ("Unexpected internal error",
// measured; the page's quota was 10 GiB either way).
//
//   node bench/big-cache.mjs [--pkg DIR (pkg)] [--dir DIR ($KILN_CACHE/big-shapes)] [--root DIR]
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { request, createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { opt, paths } from './options.mjs';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { root, cache } = paths(here);
const dir = opt('dir', join(cache, 'big-shapes'));
const FILE = 'llama-3.1-8b-instruct-random-q4_k_m.gguf';
const size = statSync(join(dir, FILE)).size;

// The files, behind a front that counts the model's fetches and refuses them once told to.
const files = await serve([['/pkg/', opt('pkg', join(root, 'pkg'))], ['/models/', dir], ['/', here]]);
let blocked = false;
let fetches = 0;
const front = createServer((req, res) => {
  if (req.url === '/block') {
    blocked = true;
    res.writeHead(200).end('ok');
    return;
  }
  if (req.url.startsWith('/models/')) {
    fetches += 1;
    if (blocked) {
      res.writeHead(503).end('refused: the file must come from the cache now');
      return;
    }
  }
  const upstream = request(files.base + req.url, { method: req.method, headers: req.headers }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  req.pipe(upstream);
});
await new Promise((ok) => front.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${front.address().port}`;

const profile = mkdtempSync(join(tmpdir(), 'kiln-big-cache-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--no-first-run', '--disable-background-networking'],
});
let result;
try {
  const page = await browser.newPage();
  await page.goto(`${base}/big.html`);
  result = await page.evaluate(async (file) => {
    const { Engine } = await import('/pkg/index.js');
    const url = new URL(`/models/${file}`, location.href).href;
    await caches.delete('kiln-models');
    const t0 = performance.now();
    let engine = await Engine.load({ model: 'big', source: url, device: 'webgpu', cache: true });
    const first = { ms: performance.now() - t0, weightBytes: engine.memory.weightBytes };
    await engine.unload();
    const hit = await (await caches.open('kiln-models')).match(url);
    let cachedBytes = 0;
    if (hit) {
      const reader = hit.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        cachedBytes += value.length;
      }
    }
    await fetch('/block');
    const t1 = performance.now();
    const inspected = await Engine.inspect(url, { device: 'webgpu', cache: true });
    const inspectMs = performance.now() - t1;
    const t2 = performance.now();
    engine = await Engine.load({ model: 'big', source: url, device: 'webgpu', cache: true });
    const second = { ms: performance.now() - t2, weightBytes: engine.memory.weightBytes };
    const token = (await engine.completions.create({ model: 'big', prompt: 'The capital of France is', max_tokens: 1, temperature: 0 })).choices[0].text;
    await engine.unload();
    return { first, cachedBytes, inspect: { ms: inspectMs, runs: inspected.device.runs }, second, token };
  }, FILE);
} catch (e) {
  result = { error: String(e?.message ?? e) };
} finally {
  await browser.close();
  front.close();
  files.server.close();
  rmSync(profile, { recursive: true, force: true });
}
Object.assign(result, { file: FILE, fileBytes: size, modelFetches: fetches });
console.log(JSON.stringify(result));
const ok = !result.error && result.cachedBytes === size && result.inspect?.runs && result.second?.weightBytes === result.first?.weightBytes && fetches === 1;
process.exit(ok ? 0 : 1);
