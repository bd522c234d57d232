// End-to-end test of the demo page: headless Debian Chromium (never a downloaded browser) with WebGPU on
// SwiftShader opens the page served by `cargo xtask test`, waits for burn's self-check and reads the result.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;
const artifacts = process.env.KILN_ARTIFACTS ?? '.';

test('demo page runs burn on the WebGPU adapter and matches the host', { timeout: 600_000 }, async () => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    await page.goto(url);
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 540_000 });
    await page.screenshot({ path: join(artifacts, 'demo.png'), fullPage: true });
    const state = await page.evaluate(() => document.body.dataset.state);
    assert.equal(state, 'done', `page ended in state ${state}:\n${logs.join('\n')}`);

    const report = JSON.parse(await page.textContent('#report'));
    console.log('adapter:', JSON.stringify(report.device));
    console.log('check:', JSON.stringify(report.check));
    assert.equal(report.device.kind, 'gpu');
    assert.equal(report.device.backend, 'BrowserWebGpu');
    assert.equal(report.check.passed, true);
    assert.equal(report.check.mismatches, 0);
    assert.ok(report.check.maxAbsDiff <= 1e-4, `max abs diff ${report.check.maxAbsDiff}`);
    assert.ok(Number.isFinite(report.check.checksum));
    // What a person sees: the adapter table from navigator.gpu and the verdict.
    assert.match(await page.textContent('#adapter'), /maxBufferSize/);
    assert.match(await page.textContent('#check'), /passed/);
  } finally {
    await browser.close();
  }
});
