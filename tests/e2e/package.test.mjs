// The npm package as a user gets it: `npm pack` of the built pkg/, installed from the tarball into the tiny
// app of tests/vite-app, bundled by Vite (the worker too), served, and run in headless Debian Chromium; and
// the same installed files imported from a plain `<script type="module">` with no bundler.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, createReadStream, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from './browser.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const artifacts = process.env.KILN_ARTIFACTS ?? tmpdir();

const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };

/** A static server: `mounts` maps URL prefixes to directories. */
function serve(mounts) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const [prefix, dir] = mounts.find(([p]) => path.startsWith(p)) ?? [];
    let file = dir && normalize(join(dir, path.slice(prefix.length)));
    if (file && existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
    if (!file || !file.startsWith(dir) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    // Cross-origin isolated, as tests/vite-app/vite.config.js serves it: kiln's threaded build can run.
    res.writeHead(200, {
      'content-type': types[extname(file)] ?? 'application/octet-stream', 'content-length': statSync(file).size,
      'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp',
    });
    createReadStream(file).pipe(res);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

async function open(browser, url, screenshot) {
  const page = await browser.newPage();
  const logs = [];
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 300_000 });
  await page.screenshot({ path: join(artifacts, screenshot) });
  const state = await page.evaluate(() => document.body.dataset.state);
  const out = await page.textContent('#out');
  assert.equal(state, 'done', `${url}: ${out}\n${logs.join('\n')}`);
  await page.close();
  return JSON.parse(out);
}

test('npm pack → install in a Vite app → vite build → runs in Chromium; and from a plain script module', { timeout: 600_000 }, async () => {
  const work = mkdtempSync(join(tmpdir(), 'kiln-pack-'));
  let server;
  const browser = await launch();
  try {
    const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: join(root, 'pkg'), encoding: 'utf8' }));
    const files = packed.files.map((f) => f.path);
    for (const f of ['package.json', 'index.js', 'index.d.ts', 'worker.js', 'worker.d.ts', 'kiln.js', 'kiln.d.ts', 'kiln_bg.wasm', 'api.d.ts', 'threads/kiln.js', 'threads/kiln_bg.wasm']) {
      assert.ok(files.includes(f), `the tarball has ${f} (has ${files.join(', ')})`);
    }
    const app = join(work, 'app');
    cpSync(join(root, 'tests/vite-app'), app, { recursive: true });
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', join(work, packed.filename)], { cwd: app, stdio: 'inherit' });
    execFileSync(process.execPath, [join(root, 'node_modules/vite/bin/vite.js'), 'build'], { cwd: app, stdio: 'inherit' });
    const assets = readdirSync(join(app, 'dist/assets'));
    assert.ok(assets.some((f) => f.endsWith('.wasm')), `Vite emitted the wasm (${assets.join(', ')})`);
    assert.ok(assets.filter((f) => f.endsWith('.js')).length >= 2, `Vite emitted the page and the worker (${assets.join(', ')})`);
    server = await serve([['/fixtures/', join(root, 'tests/fixtures')], ['/plain/', app], ['/', join(app, 'dist')]]);
    const base = `http://127.0.0.1:${server.address().port}`;

    const vite = await open(browser, `${base}/`, 'vite-app.png');
    const text = (r) => r.choices[0].message.content;
    assert.equal(vite.viaWorker.object, 'chat.completion');
    assert.equal(vite.viaWorker.usage.completion_tokens, 8);
    assert.equal(vite.streamed, text(vite.viaWorker), 'streamed from the worker = full');
    assert.equal(text(vite.direct), text(vite.viaWorker), 'CPU on the page = WebGPU in the worker');
    assert.deepEqual(vite.error, { kiln: true, param: 'top_p' });
    assert.equal(vite.threads.build, 'threads', `the bundled package runs its threaded build on the isolated page (${JSON.stringify(vite.threads)})`);

    const plain = await open(browser, `${base}/plain/plain.html`, 'plain-module.png');
    assert.equal(plain.object, 'text_completion');
    assert.equal(plain.usage.completion_tokens, 5);
  } finally {
    await browser.close();
    server?.close();
    rmSync(work, { recursive: true, force: true });
  }
});
