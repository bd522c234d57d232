// End-to-end test of images in chat through the package's JavaScript API in headless Debian Chromium: the
// tiny random SmolVLM of tests/fixtures/golden/smolvlm/ (a Hugging Face directory with its
// preprocessor_config.json, loaded by URL) answers an OpenAI request whose image is a `data:` URL exactly
// as transformers does (make_golden_smolvlm_chat.py: the prompt's token count, the greedy completion), with
// `Engine` on the page and `WorkerEngine` in a Worker, on WebGPU and the CPU backend; a `blob:` URL gives
// the same answer, and `detail: "low"` the single-image one. Refused with a 400 naming the part: an image
// URL that cannot be fetched, bytes that are not an image, a header declaring more than 50 megapixels.
// The same model as llama.cpp's two files (`source: { model, mmproj }`) answers the same: through the JS
// API (with `onImages`), through openai-node on `engine.fetch` (a `data:` URL and an http URL of the test
// server), and through the Service Worker's `/v1/chat/completions`. Gemma 3 (a Hugging Face directory) and
// LLaVA (llama.cpp's GGUF + mlp mmproj) answer their own goldens (make_golden_gemma3_chat.py,
// make_golden_llava.py) on WebGPU and the CPU backend.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clientsBundle, launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;

/** Runs in the page. */
async function cases({ mode, device }) {
  const { Engine, WorkerEngine } = await import('/pkg/index.js');
  const dir = '/fixtures/golden/smolvlm/';
  const source = {
    config: `${dir}config.json`, tokenizer: `${dir}tokenizer.json`, tokenizerConfig: `${dir}tokenizer_config.json`,
    preprocessor: `${dir}preprocessor_config.json`, weights: [`${dir}model.safetensors`],
  };
  const options = { model: 'tiny-smolvlm', source, device };
  const worker = mode === 'worker' ? new Worker('/pkg/worker.js', { type: 'module' }) : null;
  const engine = worker ? await WorkerEngine.load(worker, options) : await Engine.load(options);
  try {
    const golden = await (await fetch(`${dir}chat.json`)).json();
    const answer = async (request) => {
      const out = await engine.chat.completions.create(request);
      return { text: out.choices[0].message.content, prompt: out.usage.prompt_tokens, completion: out.usage.completion_tokens };
    };
    const refused = (request) => engine.chat.completions.create(request).then(
      () => null,
      (e) => ({ status: e.status, param: e.param, code: e.code, message: e.message }),
    );
    const withUrl = (request, imageUrl) => {
      const r = structuredClone(request);
      r.messages[0].content[0].image_url.url = imageUrl;
      return r;
    };
    const dataUrl = golden.request.messages[0].content[0].image_url.url;
    const png = await (await fetch(dataUrl)).blob();
    const blobUrl = URL.createObjectURL(png);
    // A PNG header declaring 10 000 × 10 000 pixels, and nothing else.
    const huge = new Uint8Array(33);
    huge.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]);
    new DataView(huge.buffer).setUint32(16, 10000);
    new DataView(huge.buffer).setUint32(20, 10000);
    const hugeUrl = URL.createObjectURL(new Blob([huge], { type: 'image/png' }));
    return {
      vision: engine.vision,
      golden: {
        text: golden.completion_text.skip_special_tokens_true, prompt: golden.prompt_ids.length,
        textLow: golden.completion_text_low.skip_special_tokens_true, promptLow: golden.prompt_ids_low.length,
      },
      data: await answer(golden.request),
      blob: await answer(withUrl(golden.request, blobUrl)),
      low: await answer(golden.request_low),
      missing: await refused(withUrl(golden.request, '/fixtures/golden/smolvlm/no-such-image.png')),
      notImage: await refused(withUrl(golden.request, 'data:image/png;base64,aGVsbG8=')),
      huge: await refused(withUrl(golden.request, hugeUrl)),
    };
  } finally {
    await engine.unload();
    worker?.terminate();
  }
}

for (const [mode, device] of [['main', 'webgpu'], ['worker', 'cpu']]) {
  test(`images in chat (${mode === 'main' ? 'Engine' : 'WorkerEngine'}, ${device}): SmolVLM = transformers; bad images named`, { timeout: 600_000 }, async () => {
    assert.ok(url, 'KILN_DEMO_URL (cargo xtask test sets it)');
    const browser = await launch();
    try {
      const page = await browser.newPage();
      const logs = [];
      page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
      await page.goto(new URL('pkg/package.json', url).href);
      let r;
      try {
        r = await page.evaluate(cases, { mode, device });
      } catch (e) {
        throw new Error(`${e.message}\n${logs.join('\n')}`);
      }
      assert.deepEqual(r.vision, { images: true, imageSize: 64, tokensPerImage: 4 });
      for (const k of ['data', 'blob']) {
        assert.equal(r[k].text, r.golden.text, `${k}: transformers' greedy completion`);
        assert.equal(r[k].prompt, r.golden.prompt, `${k}: the prompt's tokens, image tokens included`);
        assert.equal(r[k].completion, 8);
      }
      assert.equal(r.low.text, r.golden.textLow, 'detail low: the single image');
      assert.equal(r.low.prompt, r.golden.promptLow);
      for (const [k, code] of [['missing', 'image_fetch_failed'], ['notImage', 'invalid_image'], ['huge', 'invalid_image']]) {
        assert.equal(r[k]?.status, 400, `${k}: ${JSON.stringify(r[k])}`);
        assert.equal(r[k].param, 'messages[0].content[0].image_url', k);
        assert.equal(r[k].code, code, k);
      }
      assert.match(r.missing.message, /HTTP 404/);
      assert.match(r.huge.message, /50 megapixels/);
    } finally {
      await browser.close();
    }
  });
}

const DIR = '/fixtures/golden/smolvlm/';
const PAIR = { model: '/fixtures/gguf/tiny-smolvlm.gguf', mmproj: '/fixtures/gguf/tiny-smolvlm-mmproj.gguf' };

/** Runs in the page: the GGUF pair through the JS API and openai-node. */
async function pairCases({ dir, pair }) {
  const { Engine } = await import('/pkg/index.js');
  const golden = await (await fetch(`${dir}chat.json`)).json();
  // The GGUF carries a ChatML template of its own; the checkpoint's is the one transformers used.
  const chatTemplate = (await (await fetch(`${dir}tokenizer_config.json`)).json()).chat_template;
  const engine = await Engine.load({ model: 'tiny-smolvlm', source: pair, device: 'webgpu', chatTemplate });
  try {
    const seen = [];
    const out = await engine.chat.completions.create(golden.request, { onImages: (info) => seen.push(info) });
    const { OpenAI } = globalThis.kilnClients;
    const openai = new OpenAI({ apiKey: 'unused', baseURL: 'http://kiln.invalid/v1', fetch: engine.fetch, dangerouslyAllowBrowser: true, maxRetries: 0 });
    const viaData = await openai.chat.completions.create(golden.request);
    const http = structuredClone(golden.request);
    http.messages[0].content[0].image_url.url = new URL(`${dir}chat.png`, location.href).href;
    const viaHttp = await openai.chat.completions.create(http);
    let streamed = '';
    for await (const c of await openai.chat.completions.create({ ...http, stream: true })) streamed += c.choices[0]?.delta?.content ?? '';
    return {
      vision: engine.vision,
      golden: { text: golden.completion_text.skip_special_tokens_true, prompt: golden.prompt_ids.length },
      api: { text: out.choices[0].message.content, prompt: out.usage.prompt_tokens },
      seen,
      viaData: { text: viaData.choices[0].message.content, prompt: viaData.usage.prompt_tokens },
      viaHttp: { text: viaHttp.choices[0].message.content, prompt: viaHttp.usage.prompt_tokens },
      streamed,
    };
  } finally {
    await engine.unload();
  }
}

test('llama.cpp\'s GGUF + mmproj: the JS API, openai-node on engine.fetch (data: and http URLs) and the Service Worker answer as transformers', { timeout: 600_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL (cargo xtask test sets it)');
  const browser = await launch();
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    await page.goto(new URL('pkg/package.json', url).href);
    await page.addScriptTag({ content: await clientsBundle() });
    let r;
    try {
      r = await page.evaluate(pairCases, { dir: DIR, pair: PAIR });
    } catch (e) {
      throw new Error(`${e.message}\n${logs.join('\n')}`);
    }
    assert.deepEqual(r.vision, { images: true, imageSize: 64, tokensPerImage: 4 });
    for (const k of ['api', 'viaData', 'viaHttp']) {
      assert.deepEqual(r[k], r.golden, `${k}: transformers' prompt length and greedy completion`);
    }
    assert.equal(r.streamed, r.golden.text, 'streamed through openai-node');
    assert.equal(r.seen.length, 1, 'onImages is called once');
    const [seen] = r.seen;
    assert.equal(seen.images, 1);
    // A 2 × 2 grid and the global image, 4 rows each.
    assert.equal(seen.tokens, 20);
    assert.ok(seen.encodeMs > 0, JSON.stringify(seen));

    // The Service Worker loads the same pair and answers plain fetch.
    const sw = await page.evaluate(async ({ dir, pair }) => {
      const { registerServiceWorker } = await import('/pkg/index.js');
      const golden = await (await fetch(`${dir}chat.json`)).json();
      const chatTemplate = (await (await fetch(`${dir}tokenizer_config.json`)).json()).chat_template;
      const loaded = await registerServiceWorker('/pkg/service-worker.js', { scope: '/', model: 'tiny-smolvlm', source: pair, device: 'cpu', chatTemplate });
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(golden.request) });
      const body = await res.json();
      return { model: loaded.model, status: res.status, text: body.choices?.[0]?.message?.content, prompt: body.usage?.prompt_tokens, body };
    }, { dir: DIR, pair: PAIR });
    assert.equal(sw.status, 200, JSON.stringify(sw.body));
    assert.deepEqual({ text: sw.text, prompt: sw.prompt }, r.golden, 'the Service Worker');
    await context.close();
  } finally {
    await browser.close();
  }
});

/** Runs in the page: Gemma 3 from its Hugging Face files and LLaVA from its GGUF + mmproj, on `device`. */
async function familyCases({ device }) {
  const { Engine } = await import('/pkg/index.js');
  const gemma = '/fixtures/golden/gemma3_vision/';
  const llava = '/fixtures/golden/llava/';
  const models = [
    {
      name: 'gemma3', dir: gemma,
      source: {
        config: `${gemma}config.json`, tokenizer: `${gemma}tokenizer.json`, tokenizerConfig: `${gemma}tokenizer_config.json`,
        preprocessor: `${gemma}preprocessor_config.json`, weights: [`${gemma}model.safetensors`],
      },
    },
    { name: 'llava', dir: llava, source: { model: '/fixtures/gguf/tiny-llava.gguf', mmproj: '/fixtures/gguf/tiny-llava-mmproj.gguf' } },
  ];
  const out = {};
  for (const m of models) {
    const golden = await (await fetch(`${m.dir}chat.json`)).json();
    const engine = await Engine.load({ model: golden.request.model, source: m.source, device });
    try {
      const r = await engine.chat.completions.create(golden.request);
      out[m.name] = {
        got: { text: r.choices[0].message.content, prompt: r.usage.prompt_tokens },
        want: { text: golden.completion_text.skip_special_tokens_true, prompt: golden.prompt_ids.length },
      };
    } finally {
      await engine.unload();
    }
  }
  return out;
}

for (const device of ['webgpu', 'cpu']) {
  test(`Gemma 3 (Hugging Face files) and LLaVA (GGUF + mmproj) answer as transformers (${device})`, { timeout: 600_000 }, async () => {
    assert.ok(url, 'KILN_DEMO_URL (cargo xtask test sets it)');
    const browser = await launch();
    try {
      const page = await browser.newPage();
      const logs = [];
      page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
      await page.goto(new URL('pkg/package.json', url).href);
      let r;
      try {
        r = await page.evaluate(familyCases, { device });
      } catch (e) {
        throw new Error(`${e.message}\n${logs.join('\n')}`);
      }
      for (const [name, { got, want }] of Object.entries(r)) assert.deepEqual(got, want, name);
    } finally {
      await browser.close();
    }
  });
}
