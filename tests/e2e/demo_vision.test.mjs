// End-to-end test of the demo app's images (www/), in headless Debian Chromium as demo.test.mjs: the tiny
// random SmolVLM as llama.cpp's two files (tests/fixtures/gguf/tiny-smolvlm.gguf and its mmproj, served at
// /fixtures/ by the xtask server) typed into the model field turns the attach button on; an image attached
// through the file input (a PNG made here) shows as a thumbnail, goes with the message as an `image_url` part
// (a data: URL), shows in the history, and its tokens and encode time show in the reply's stats; a later turn
// sends the same image again (its KV state comes from the prefix cache). A text model leaves the button off
// (its title says why) and refuses a dropped image with a note; sending a conversation that holds an image
// to a text model shows kiln's 400 as the demo shows errors.
//
// The fixture's GGUF carries a ChatML chat template of its own that cannot place images (tests/vision_chat.rs
// replaces it the same way): the chat runs with the checkpoint's template (its tokenizer_config.json), given
// through the model field's JSON form `{ "source": "<lm.gguf> <mmproj.gguf>", "chatTemplate": "…" }`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;
const artifacts = process.env.KILN_ARTIFACTS ?? '.';

const TEXT_MODEL = '/fixtures/gguf/tiny-llama.gguf';
const PAIR = '/fixtures/gguf/tiny-smolvlm.gguf /fixtures/gguf/tiny-smolvlm-mmproj.gguf';
const TEMPLATE = JSON.parse(readFileSync(new URL('../fixtures/golden/smolvlm/tokenizer_config.json', import.meta.url), 'utf8')).chat_template;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------------
// A PNG, made here (RGB, 8 bits, no interlace)
// ---------------------------------------------------------------------------------------------------------

function crc32(bytes) {
  let crc = 0xffffffff;
  for (const b of bytes) {
    crc ^= b;
    for (let k = 0; k < 8; k += 1) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function pngChunk(type, data) {
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const out = Buffer.alloc(8 + data.length + 4);
  out.writeUInt32BE(data.length, 0);
  body.copy(out, 4);
  out.writeUInt32BE(crc32(body), 8 + data.length);
  return out;
}

/** A `width`×`height` PNG whose pixel (x, y) is `pixel(x, y)` = [r, g, b]. */
function png(width, height, pixel) {
  const raw = Buffer.alloc(height * (1 + 3 * width));
  for (let y = 0; y < height; y += 1) {
    const row = y * (1 + 3 * width); // filter byte 0 (none), then the row's pixels
    for (let x = 0; x < width; x += 1) raw.set(pixel(x, y), row + 1 + 3 * x);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // bit depth 8, colour type 2 (RGB), deflate, no filter method, no interlace
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

// A gradient with a red square, and a plain blue one.
const SQUARE = png(48, 32, (x, y) => (x >= 16 && x < 32 && y >= 8 && y < 24 ? [220, 30, 30] : [x * 5, y * 7, 128]));
const BLUE = png(20, 20, () => [20, 40, 200]);

// ---------------------------------------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------------------------------------

/** A page on the demo with `model` in its model field (`?model=`), once it has loaded (or failed to). */
async function openDemo(browser, model, logs) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  page.on('requestfailed', (r) => logs.push(`[requestfailed] ${r.url()} ${r.failure()?.errorText}`));
  const address = new URL(url);
  address.searchParams.set('model', model);
  await page.goto(address.href);
  await settled(page);
  return page;
}

/** Waits until the page is no longer loading a model; its state. */
async function settled(page) {
  await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 240_000, polling: 100 });
  return page.evaluate(() => document.body.dataset.state);
}

/** Loads `spec` through the model field and the Load button; the page's state after. */
async function loadThroughField(page, spec) {
  await page.fill('[data-testid=model-url]', spec);
  await page.click('[data-testid=model-load]');
  return settled(page);
}

/** Sends `text` (with whatever is attached) and waits for the reply to end: `{ status, text, stats, error }`. */
async function ask(page, text) {
  const before = await page.locator('[data-testid=assistant-message]').count();
  await page.fill('[data-testid=chat-input]', text);
  await page.press('[data-testid=chat-input]', 'Enter');
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll('[data-testid=assistant-message]');
    return all.length > n && all[all.length - 1].dataset.status !== 'streaming' && document.body.dataset.busy === 'false';
  }, before, { timeout: 240_000, polling: 100 });
  const reply = page.locator('[data-testid=assistant-message]').last();
  const error = reply.locator('[data-testid=error]');
  return {
    status: await reply.getAttribute('data-status'),
    text: await reply.locator('.markdown').allTextContents().then((t) => t.join('')),
    stats: await reply.locator('[data-testid=message-stats]').textContent(),
    error: (await error.count()) ? await error.textContent() : null,
  };
}

/** Drops `bytes` as the image file `name` on the chat (a synthetic drag and drop, as a person's would be). */
async function dropImage(page, bytes, name) {
  await page.evaluate(({ b64, name }) => {
    const data = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([data], name, { type: 'image/png' }));
    const target = document.querySelector('[data-testid=messages]');
    for (const type of ['dragenter', 'dragover', 'drop']) {
      target.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
    }
  }, { b64: bytes.toString('base64'), name });
}

const IMAGE_STATS = /\bimage: (\d+) tokens · encode (\d+(?:\.\d+)?) ms/;

// ---------------------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------------------

test('demo app, text model: the attach button is off and says why; a dropped image is refused', { timeout: 300_000 }, async (t) => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  const logs = [];
  const why = (what) => `${what}\n--- page console (last 60) ---\n${logs.slice(-60).join('\n')}`;
  try {
    const page = await openDemo(browser, TEXT_MODEL, logs);
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready', why(`load: ${await page.textContent('#load-text')}`));
    assert.equal(await page.isDisabled('[data-testid=attach-button]'), true, why('the attach button is off for a text model'));
    assert.equal(await page.isDisabled('[data-testid=attach-input]'), true);
    const title = await page.getAttribute('[data-testid=attach-button]', 'title');
    t.diagnostic(`attach button: ${title}`);
    assert.match(title, /tiny-llama is a text model and takes no images/, why(`title: ${title}`));

    await dropImage(page, SQUARE, 'square.png');
    const note = page.locator('[data-testid=composer-note]');
    await note.waitFor({ state: 'visible', timeout: 5_000 });
    assert.match(await note.textContent(), /takes no images/);
    assert.equal(await page.locator('[data-testid=attachment-thumb]').count(), 0, 'no thumbnail for a refused image');
  } catch (e) {
    if (!String(e.message).includes('--- page console')) e.message = why(e.message);
    throw e;
  } finally {
    await browser.close();
  }
});

test('demo app, vision: SmolVLM from its GGUF + mmproj; attach, send, thumbnails, image stats, a later turn, a text model refuses', { timeout: 570_000 }, async (t) => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const started = Date.now();
  const browser = await launch();
  const logs = [];
  const why = (what) => `${what}\n--- page console (last 60) ---\n${logs.slice(-60).join('\n')}`;
  try {
    // --- The two files, as typed in the model field: a vision-language model, the attach button on.
    const page = await openDemo(browser, PAIR, logs);
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready', why(`load: ${await page.textContent('#load-text')}`));
    assert.match(await page.textContent('#load-text'), /tiny-smolvlm ready/);
    assert.equal(await page.isEnabled('[data-testid=attach-button]'), true, why('the attach button is on for a vision-language model'));
    const title = await page.getAttribute('[data-testid=attach-button]', 'title');
    t.diagnostic(`loaded in ${((Date.now() - started) / 1000).toFixed(1)} s; attach button: ${title}`);
    assert.match(title, /Attach images.*64×64 pixels, 4 tokens a tile/, why(`title: ${title}`));

    // --- The same files with the checkpoint's chat template (the GGUF's own ChatML one places no images).
    const options = JSON.stringify({ source: PAIR, chatTemplate: TEMPLATE });
    assert.equal(await loadThroughField(page, options), 'ready', why(`load: ${await page.textContent('#load-text')}`));
    assert.equal(await page.isEnabled('[data-testid=attach-button]'), true);

    await page.fill('[data-testid=set-temperature]', '0');
    await page.fill('[data-testid=set-max_tokens]', '8');

    // --- Attach through the file input; a second image dropped, then removed: one thumbnail stays.
    await page.setInputFiles('[data-testid=attach-input]', { name: 'square.png', mimeType: 'image/png', buffer: SQUARE });
    const thumbs = page.locator('[data-testid=attachment-thumb]');
    await thumbs.first().waitFor({ timeout: 5_000 });
    await dropImage(page, BLUE, 'blue.png');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid=attachment-thumb]').length === 2, null, { timeout: 5_000 });
    await thumbs.last().locator('[data-testid=attachment-remove]').click();
    assert.equal(await thumbs.count(), 1, 'the removed thumbnail is gone');
    assert.match(await thumbs.first().getAttribute('title'), /square\.png/);

    // --- Send: the image goes with the text; the history shows it; the stats give its tokens and encode time.
    const first = await ask(page, 'What is in this image?');
    t.diagnostic(`first reply: ${JSON.stringify(first)}`);
    assert.equal(first.status, 'done', why(`reply: ${JSON.stringify(first)}`));
    const userMessage = page.locator('[data-testid=user-message]').last();
    const shown = userMessage.locator('[data-testid=message-image]');
    assert.equal(await shown.count(), 1, why('the image shows in the history'));
    assert.match(await shown.getAttribute('src'), /^data:image\/png;base64,/);
    assert.ok(await shown.evaluate((img) => img.complete && img.naturalWidth === 48 && img.naturalHeight === 32), 'the thumbnail is the image');
    assert.match(await userMessage.textContent(), /What is in this image\?/);
    assert.equal(await thumbs.count(), 0, 'sent: no attachment waits any more');
    const image = first.stats.match(IMAGE_STATS);
    assert.ok(image, why(`the reply's stats give the image's tokens and encode time: ${first.stats}`));
    const imageTokens = Number(image[1]);
    const prompt = Number(first.stats.match(/(\d+) prompt/)?.[1]);
    assert.ok(imageTokens > 0 && prompt > imageTokens, why(`${imageTokens} image tokens of ${prompt} prompt tokens: ${first.stats}`));
    const panel = await page.textContent('[data-testid=stats] [data-stat=image]');
    assert.match(panel, IMAGE_STATS, `the side panel: ${panel}`);
    await page.screenshot({ path: join(artifacts, 'demo-vision.png') });

    // --- A later turn, text only: the conversation sends the image again, whose KV state is reused.
    const second = await ask(page, 'And its colours?');
    t.diagnostic(`second reply: ${JSON.stringify(second)}`);
    assert.equal(second.status, 'done', why(`reply: ${JSON.stringify(second)}`));
    assert.equal(Number(second.stats.match(IMAGE_STATS)?.[1]), imageTokens, why(`the same image, again: ${second.stats}`));
    const cached = Number(second.stats.match(/(\d+) cached/)?.[1] ?? 0);
    assert.ok(cached >= imageTokens, why(`the second turn reuses the first's KV state (${cached} cached tokens): ${second.stats}`));

    // --- A text model: the button goes off; the conversation's image is kiln's 400, shown as an error.
    assert.equal(await loadThroughField(page, TEXT_MODEL), 'ready', why(`load: ${await page.textContent('#load-text')}`));
    assert.equal(await page.isDisabled('[data-testid=attach-button]'), true);
    const refused = await ask(page, 'Hi');
    t.diagnostic(`to a text model: ${JSON.stringify(refused)}`);
    assert.equal(refused.status, 'error', why(`reply: ${JSON.stringify(refused)}`));
    assert.match(refused.error, /400/, why(`error: ${refused.error}`));
    assert.match(refused.error, /unsupported_content|text-only/, why(`error: ${refused.error}`));
    assert.match(await page.getAttribute('[data-testid=user-message] >> nth=-1', 'class'), /unsent/);
    t.diagnostic(`total ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } catch (e) {
    if (!String(e.message).includes('--- page console')) e.message = why(e.message);
    throw e;
  } finally {
    await browser.close();
  }
});
