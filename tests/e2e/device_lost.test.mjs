// End-to-end test of a lost WebGPU device (a driver reset, a GPU process crash, a tab moved off its GPU) in
// headless Chromium on SwiftShader: the page keeps the GPUDevice kiln asks for (wrapping
// `GPUAdapter.prototype.requestDevice`) and destroys it in the middle of a stream, which is how the WebGPU
// spec lets a page lose a device on purpose (`GPUDevice.lost` resolves with reason "destroyed"). The stream
// must end with a clear error (a KilnError, 503 `device_lost`, saying the device was lost and what to do;
// not a hang or a wasm trap), a further request on that engine must fail the same way, and `Engine.load`
// must work again on a new device, giving the greedy text it gave before the loss.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;

/** Runs in the page. */
async function loseTheDevice() {
  const { Engine, KilnError } = await import('/pkg/index.js');
  const devices = [];
  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (...args) {
    const device = await requestDevice.apply(this, args);
    devices.push(device);
    return device;
  };
  const describe = (e) => ({
    kiln: e instanceof KilnError, name: e.name, message: String(e.message), status: e.status, type: e.error?.type,
    code: e.error?.code,
  });
  const source = '/fixtures/gguf/tiny-llama.gguf';
  const req = {
    model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, temperature: 0,
    logit_bias: { 0: -100, 1: -100, 2: -100 },
  };
  const text = (r) => r.choices[0].message.content;
  const engine = await Engine.load({ model: 'tiny', source, device: 'webgpu' });
  const before = text(await engine.chat.completions.create(req));
  const devicesBefore = devices.length;
  let chunks = 0;
  let streamError = null;
  try {
    for await (const c of await engine.chat.completions.create({ ...req, max_tokens: 40, stream: true })) {
      void c;
      chunks += 1;
      if (chunks === 3) devices.at(-1).destroy();
    }
  } catch (e) {
    streamError = describe(e);
  }
  let nextError = null;
  try {
    await engine.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 4, temperature: 0 });
  } catch (e) {
    nextError = describe(e);
  }
  await engine.unload();
  const again = await Engine.load({ model: 'tiny', source, device: 'webgpu' });
  const after = text(await again.chat.completions.create(req));
  const device = again.device;
  await again.unload();
  return { before, after, chunks, streamError, nextError, devicesBefore, devicesAfter: devices.length, device };
}

test('a WebGPU device lost mid-stream: the stream ends with a clear error, and the engine loads again on a new device', { timeout: 300_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  try {
    const page = await browser.newPage();
    await page.goto(new URL('pkg/package.json', url).href);
    const r = await page.evaluate(loseTheDevice);
    console.log('device lost:', JSON.stringify(r));
    assert.ok(r.before.length > 0, 'the first engine answered');
    assert.equal(r.devicesBefore, 1, 'kiln asked for one device');
    assert.ok(r.chunks >= 3 && r.chunks < 40, `the stream stopped after the loss (${r.chunks} chunks)`);
    for (const [what, e] of [['the stream', r.streamError], ['the next request', r.nextError]]) {
      assert.ok(e, `${what} failed`);
      assert.ok(e.kiln, `${what}: a KilnError (${JSON.stringify(e)})`);
      assert.deepEqual([e.status, e.type, e.code], [503, 'server_error', 'device_lost'], what);
      assert.match(e.message, /device was lost \(Destroyed: /, `${what}: the message says the device was lost, and why`);
      assert.match(e.message, /load the model again/, `${what}: the message says what to do`);
    }
    assert.equal(r.devicesAfter, 2, 'the new load asked for a new device');
    assert.equal(r.device.kind, 'gpu');
    assert.equal(r.after, r.before, 'the reloaded engine gives the same greedy text');
  } finally {
    await browser.close();
  }
});
