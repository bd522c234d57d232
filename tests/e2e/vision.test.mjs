// End-to-end test of images in chat through the package's JavaScript API in headless Debian Chromium: the
// tiny random SmolVLM of tests/fixtures/golden/smolvlm/ (a Hugging Face directory with its
// preprocessor_config.json, loaded by URL) answers an OpenAI request whose image is a `data:` URL exactly
// as transformers does (make_golden_smolvlm_chat.py: the prompt's token count, the greedy completion), with
// `Engine` on the page and `WorkerEngine` in a Worker, on WebGPU and the CPU backend; a `blob:` URL gives
// the same answer, and `detail: "low"` the single-image one. Refused with a 400 naming the part: an image
// URL that cannot be fetched, bytes that are not an image, a header declaring more than 50 megapixels.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from './browser.mjs';

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
