// End-to-end test of the package's `Engine` API (js/index.js over the wasm module) in headless Debian
// Chromium with WebGPU on SwiftShader, as a web app uses it: load a GGUF from a URL with progress, the full
// and streaming paths of both endpoints, validation errors as KilnError, abort mid-stream followed by an
// exact request, two concurrent requests (FIFO), and the CPU backend giving WebGPU's greedy text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;

test('Engine: load, create (full, stream), errors, abort, concurrency, CPU = WebGPU', { timeout: 600_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    await page.goto(new URL('pkg/package.json', url).href);
    const result = await page.evaluate(async () => {
      const { Engine, KilnError } = await import('/pkg/index.js');
      const progress = [];
      const engine = await Engine.load({
        model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'webgpu',
        onProgress: (p) => progress.push(p),
      });
      const noSpecial = { 0: -100, 1: -100, 2: -100 };
      const req = { model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, temperature: 0, logit_bias: noSpecial };
      const full = await engine.chat.completions.create(req);
      let streamed = '';
      let chunks = 0;
      for await (const c of await engine.chat.completions.create({ ...req, stream: true })) {
        chunks += 1;
        streamed += c.choices[0]?.delta?.content ?? '';
      }
      const completion = await engine.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 6, temperature: 0, logit_bias: noSpecial });
      let completionStreamed = '';
      for await (const c of await engine.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 6, temperature: 0, logit_bias: noSpecial, stream: true })) {
        completionStreamed += c.choices[0]?.text ?? '';
      }
      let error;
      try {
        await engine.chat.completions.create({ model: 'tiny', messages: [], temperature: 7 });
      } catch (e) {
        error = { isKilnError: e instanceof KilnError, name: e.name, status: e.status, param: e.param, code: e.code, type: e.error?.type };
      }
      // Abort in mid-stream, then a request whose output must be exact.
      const controller = new AbortController();
      let aborted = null;
      let seen = 0;
      try {
        for await (const c of await engine.chat.completions.create({ ...req, max_tokens: 40, stream: true }, { signal: controller.signal })) {
          seen += 1;
          if (seen === 3) controller.abort();
          void c;
        }
      } catch (e) {
        aborted = e.name;
      }
      const after = await engine.chat.completions.create(req);
      // Two concurrent requests complete, in order, each correct.
      const [a, b] = await Promise.all([
        engine.chat.completions.create(req),
        engine.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 6, temperature: 0, logit_bias: noSpecial }),
      ]);
      const cpu = await Engine.load({ model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu' });
      const onCpu = await cpu.chat.completions.create(req);
      await cpu.unload();
      return {
        progress, device: engine.device, full, streamed, chunks, completion, completionStreamed, error,
        aborted, seen, after, a, b, onCpu,
      };
    });
    const text = (r) => r.choices[0].message.content;
    console.log('device:', JSON.stringify(result.device), 'text:', JSON.stringify(text(result.full)));
    assert.equal(result.device.kind, 'gpu', logs.join('\n'));
    const downloads = result.progress.filter((p) => p.phase === 'download');
    assert.ok(downloads.length >= 2);
    assert.ok(downloads.every((p, i) => i === 0 || p.loaded >= downloads[i - 1].loaded), 'monotonic bytes');
    assert.equal(downloads.at(-1).loaded, downloads.at(-1).total, 'progress reaches the total');
    assert.equal(result.full.object, 'chat.completion');
    assert.equal(result.full.usage.completion_tokens, 10);
    assert.equal(result.streamed, text(result.full), 'streamed = full');
    assert.ok(result.chunks >= 3);
    assert.equal(result.completion.object, 'text_completion');
    assert.equal(result.completionStreamed, result.completion.choices[0].text);
    assert.deepEqual(result.error, { isKilnError: true, name: 'KilnError', status: 422, param: result.error.param, code: result.error.code, type: 'invalid_request_error' });
    assert.ok(result.error.param, 'the error names the field');
    assert.equal(result.aborted, 'AbortError');
    assert.equal(result.seen, 3, 'no chunk after the abort');
    assert.equal(text(result.after), text(result.full), 'the request after an abort is exact');
    assert.equal(text(result.a), text(result.full));
    assert.equal(result.b.choices[0].text, result.completion.choices[0].text);
    assert.equal(text(result.onCpu), text(result.full), 'the CPU backend gives the same greedy text');
  } finally {
    await browser.close();
  }
});
