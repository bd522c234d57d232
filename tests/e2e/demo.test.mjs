// End-to-end test of the demo app (www/): headless Debian Chromium (never a downloaded browser), whose only
// WebGPU adapter is SwiftShader (software, so the demo's `device: 'auto'` runs kiln's CPU backend and says
// why), opens the page served by `cargo xtask test` and uses it as a person would: waits for
// SmolLM2-135M to load in the worker, sets greedy sampling in the settings panel, asks a question and watches
// the answer stream in, starts a long story and stops it, sees an invalid setting reported with kiln's
// message, then runs a raw completion with logprobs and reads the heat view's tooltip, and last runs the
// "Use with openai-node" panel (the real `openai` client on `engine.fetch`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { launch } from './browser.mjs';

const url = process.env.KILN_DEMO_URL;
const artifacts = process.env.KILN_ARTIFACTS ?? '.';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('demo app: load, streamed chat, stop, settings error, completions with logprobs', { timeout: 570_000 }, async (t) => {
  assert.ok(url, 'KILN_DEMO_URL is set by cargo xtask test');
  const started = Date.now();
  const browser = await launch();
  const logs = [];
  const why = (what) => `${what}\n--- page console (last 60) ---\n${logs.slice(-60).join('\n')}`;
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    page.on('requestfailed', (r) => logs.push(`[requestfailed] ${r.url()} ${r.failure()?.errorText}`));
    await page.goto(url);

    // --- Loading: the progress bar goes through its phases, then the page is ready on WebGPU.
    const phases = new Set();
    while (await page.evaluate(() => document.body.dataset.state) === 'loading') {
      const phase = await page.getAttribute('#load', 'data-phase');
      if (phase) phases.add(phase);
      assert.ok(Date.now() - started < 240_000, why('the model did not load within 4 minutes'));
      await sleep(250);
    }
    const state = await page.evaluate(() => document.body.dataset.state);
    assert.equal(state, 'ready', why(`page ended in state ${state}: ${await page.textContent('#load-text')}`));
    assert.ok(phases.has('download') || phases.has('upload'), why(`progress phases seen: ${[...phases]}`));
    const device = await page.textContent('[data-testid=device]');
    t.diagnostic(`loaded in ${((Date.now() - started) / 1000).toFixed(0)} s; device: ${device}; phases seen: ${[...phases]}`);
    // Chromium's only WebGPU adapter here is SwiftShader, a software one: `device: 'auto'` runs the CPU
    // backend instead, and the page says why.
    assert.match(device, /software adapter .*swiftshader/i, why(`device line: ${device}`));
    assert.match(device, /CPU backend/, why(`device line: ${device}`));
    assert.equal(await page.getAttribute('[data-testid=device]', 'data-kind'), 'cpu');

    // --- Greedy, short: set through the settings panel.
    await page.fill('[data-testid=set-temperature]', '0');
    await page.fill('[data-testid=set-max_tokens]', '12');
    assert.ok(await page.isChecked('[data-testid=set-stream]'));
    assert.ok(await page.isChecked('[data-testid=set-include_usage]'));

    // --- Ask; the answer streams in (its text grows across observations before it completes). The page
    // records every length the streaming answer shows (a MutationObserver, so a fast machine that writes
    // the whole answer between two polls of this test is still seen chunk by chunk).
    await page.evaluate(() => {
      window.kilnTestLengths = [];
      new MutationObserver(() => {
        const all = document.querySelectorAll('[data-testid=assistant-message]');
        const li = all[all.length - 1];
        if (!li || li.dataset.status !== 'streaming') return;
        const n = li.querySelector('.markdown')?.textContent.length ?? 0;
        if (n && n !== window.kilnTestLengths.at(-1)) window.kilnTestLengths.push(n);
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    await page.fill('[data-testid=chat-input]', 'What is the capital of France?');
    await page.press('[data-testid=chat-input]', 'Enter');
    const answer = page.locator('[data-testid=assistant-message]').last();
    await answer.waitFor({ timeout: 10_000 });
    assert.ok(await page.isVisible('[data-testid=stop]'), why('the stop button shows while generating'));
    let status;
    const askedAt = Date.now();
    for (;;) {
      status = await answer.getAttribute('data-status');
      if (status !== 'streaming') break;
      assert.ok(Date.now() - askedAt < 240_000, why('the answer did not finish within 4 minutes'));
      await sleep(100);
    }
    const lengths = await page.evaluate(() => window.kilnTestLengths);
    const text = await answer.locator('.markdown').textContent();
    t.diagnostic(`answer in ${((Date.now() - askedAt) / 1000).toFixed(1)} s: ${JSON.stringify(text)}; lengths while streaming: ${lengths}`);
    assert.equal(status, 'done', why(`answer ended as ${status}: ${await answer.textContent()}`));
    assert.match(text, /Paris/, why(`answer: ${text}`));
    assert.ok(lengths.length >= 2, why(`the text grew across ${lengths.length} observation(s) only (${lengths}): it did not stream`));
    const stats = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#stats dd')].map((d) => [d.dataset.stat, d.textContent])));
    t.diagnostic(`stats: ${JSON.stringify(stats)}`);
    assert.match(stats.ttft, /\d s$/, why(`stats ${JSON.stringify(stats)}`));
    assert.match(stats.prefill, /tok\/s/, why(`stats ${JSON.stringify(stats)}`));
    assert.match(stats.decode, /tok\/s/, why(`stats ${JSON.stringify(stats)}`));
    assert.match(stats.tokens, /^\d+ prompt \+ \d+ completion$/, why(`stats ${JSON.stringify(stats)}`));
    assert.equal(await page.isVisible('[data-testid=stop]'), false);
    await page.screenshot({ path: join(artifacts, 'demo-chat.png') });

    // --- A long generation, stopped with the stop button.
    await page.fill('[data-testid=set-max_tokens]', '200');
    await page.fill('[data-testid=chat-input]', 'Write a long story about a dragon.');
    await page.click('[data-testid=send]');
    const story = page.locator('[data-testid=assistant-message]').last();
    await page.waitForFunction(() => {
      const all = document.querySelectorAll('[data-testid=assistant-message]');
      const li = all[all.length - 1];
      return all.length >= 2 && (li.querySelector('.markdown')?.textContent.trim().length > 0 || li.dataset.status !== 'streaming');
    }, null, { timeout: 150_000, polling: 100 });
    assert.equal(await story.getAttribute('data-status'), 'streaming', why('the story ended before it could be stopped'));
    await page.click('[data-testid=stop]');
    await page.waitForFunction(() => document.body.dataset.busy === 'false', null, { timeout: 60_000 });
    assert.equal(await story.getAttribute('data-status'), 'stopped', why('the story was stopped'));
    assert.equal(await page.isVisible('[data-testid=stop]'), false, 'the stop button is gone after stopping');
    const storyStats = await story.locator('[data-testid=message-stats]').textContent();
    const storyTokens = Number(storyStats.match(/(\d+) completion/)?.[1]);
    t.diagnostic(`stopped story: ${storyTokens} tokens (${storyStats})`);
    assert.ok(storyTokens > 0 && storyTokens < 200, why(`stopped early: ${storyStats}`));
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready');
    assert.equal(await page.isEnabled('[data-testid=send]'), true, 'a new message can be sent');
    assert.equal(await page.isEnabled('[data-testid=chat-input]'), true);

    // --- An invalid setting: kiln's message, naming the field, in the conversation; no crash.
    await page.fill('[data-testid=set-temperature]', '7');
    await page.fill('[data-testid=chat-input]', 'Hi');
    await page.press('[data-testid=chat-input]', 'Enter');
    const error = page.locator('[data-testid=assistant-message]').last().locator('[data-testid=error]');
    await error.waitFor({ timeout: 30_000 });
    const errorText = await error.textContent();
    t.diagnostic(`invalid setting: ${errorText}`);
    assert.match(errorText, /temperature/, why(`error: ${errorText}`));
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready');
    await page.fill('[data-testid=set-temperature]', '0');

    // --- Completions: echo and logprobs, as a heat view with the alternatives on hover.
    await page.click('[data-testid=tab-completions]');
    await page.fill('[data-testid=prompt]', 'The capital of France is');
    await page.fill('[data-testid=set-max_tokens]', '3');
    await page.fill('[data-testid=logprobs]', '3');
    await page.check('[data-testid=echo]');
    await page.click('[data-testid=run]');
    await page.waitForFunction(() => ['done', 'error', 'stopped'].includes(document.querySelector('[data-testid=completion-output]').dataset.status),
      null, { timeout: 200_000 });
    const output = await page.textContent('[data-testid=completion-output]');
    assert.equal(await page.getAttribute('[data-testid=completion-output]', 'data-status'), 'done', why(`completion: ${output}`));
    const tokens = page.locator('[data-testid=logprob-token]');
    const count = await tokens.count();
    const joined = (await tokens.allTextContents()).join('');
    t.diagnostic(`completion: ${count} tokens: ${JSON.stringify(joined)}`);
    assert.ok(joined.startsWith('The capital of France is'), why(`echoed text: ${JSON.stringify(joined)}`));
    assert.ok(count >= 6, why(`${count} logprob tokens`));
    // A generated token (the last is often a line break): " Paris" when greedy, else the second to last.
    const paris = tokens.filter({ hasText: 'Paris' });
    const last = (await paris.count()) ? paris.last() : tokens.nth(count - 2);
    assert.ok(Number.isFinite(Number(await last.getAttribute('data-logprob'))), 'a generated token has its logprob');
    const alternatives = JSON.parse(await last.getAttribute('data-alternatives'));
    assert.ok(alternatives.length >= 2 && alternatives.length <= 3, `alternatives: ${JSON.stringify(alternatives)}`);
    assert.match(await last.getAttribute('aria-label'), /alternatives: .+%/);
    await last.hover();
    const tooltip = page.locator('[data-testid=token-tooltip]');
    await tooltip.waitFor({ state: 'visible', timeout: 5_000 });
    const tip = await tooltip.textContent();
    t.diagnostic(`tooltip: ${tip}`);
    assert.ok((tip.match(/%/g) ?? []).length >= 3, why(`tooltip lists the alternatives with probabilities: ${tip}`));
    assert.equal(await tooltip.locator('tr').count(), alternatives.length);
    await page.screenshot({ path: join(artifacts, 'demo-completions.png') });

    // --- The "Use with openai-node" panel: the code it shows is what it runs, the real client on engine.fetch.
    await page.click('[data-testid=openai-details] summary');
    const snippet = await page.textContent('[data-testid=openai-code]');
    assert.match(snippet, /new OpenAI\(/);
    assert.match(snippet, /fetch: engine\.fetch/);
    await page.click('[data-testid=openai-run]');
    await page.waitForFunction(() => ['done', 'failed'].includes(document.querySelector('[data-testid=openai-output]').dataset.state),
      null, { timeout: 120_000 });
    const fromClient = await page.textContent('[data-testid=openai-output]');
    assert.equal(await page.getAttribute('[data-testid=openai-output]', 'data-state'), 'done', why(`openai-node: ${fromClient}`));
    assert.ok(fromClient.trim().length > 0, why('openai-node streamed no text'));
    t.diagnostic(`openai-node on engine.fetch: ${JSON.stringify(fromClient)}`);
    await page.screenshot({ path: join(artifacts, 'demo-openai.png') });
    t.diagnostic(`total ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } catch (e) {
    if (!String(e.message).includes('--- page console')) e.message = why(e.message);
    throw e;
  } finally {
    await browser.close();
  }
});
