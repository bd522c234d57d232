// Gemma 3 270M (the real file: Google's base model as llama.cpp's Q4_K_M, `cargo xtask fetch` puts it in the
// cache) against llama.cpp in the same headless Debian Chromium: wllama (`@wllama/wllama`, llama.cpp in wasm,
// its CPU path, one thread) is the reference; kiln's `Engine` on its CPU backend, then on WebGPU (SwiftShader),
// must give the same greedy text and the same prompt token count for every prompt.
//
// The prompts are plain completions (the base model has no chat template): English prose, code, a list, a
// question and non-ASCII text (French and Japanese), each with the BOS token the file asks for
// (`tokenizer.ggml.add_bos_token`), MAX_TOKENS greedy tokens (temperature 0), ended early only by the model's
// own end of generation. Per-prompt timings are printed; nothing asserts on them.
//
// Time on the 2-core development machine (2026-12-01, with a compile beside it): wllama loads in 6-11 s and
// takes 8-10 s a prompt (32 tokens; ~1 s for a tokenizer-only one), 60 s in all. kiln's CPU backend runs all
// of them. SwiftShader is ~150x slower than kiln's CPU backend, so WebGPU runs one prompt by default (the
// French one); KILN_GEMMA3_WEBGPU=all runs all five there, KILN_GEMMA3_WEBGPU=0 none.
//
// Serves what it needs itself (like bench/bench.mjs): `/pkg/` (the built package), `/models/` ($KILN_CACHE,
// default .cache/kiln), `/wllama/` (node_modules/@wllama/wllama), with the cross-origin isolation headers.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from './browser.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const cache = resolve(process.env.KILN_CACHE ?? join(root, '.cache', 'kiln'));
const MODEL_FILE = 'gemma3/gemma-3-270m-q4_k_m.gguf';
const MODEL = `/models/${MODEL_FILE}`;
const MAX_TOKENS = 32;

// Chosen among candidates for a clear greedy path: the smallest gap between llama.cpp's two most likely tokens
// over the 32 steps is 0.13 (prose), 0.15 (code), 0.73 (list), 0.23 (question), 0.81 (non-ASCII) nats, well
// above the rounding differences between two correct implementations (llama.cpp's CPU path rounds the
// activations to 8 bits for its K-quant dot products). Prompts tried and left out for near-ties (gaps under
// 0.04): "Question: What is the boiling point of water at sea level?\nAnswer:" (0.006 at the first token),
// "Ingredients for simple pancakes:\n1. Flour\n2." (0.015), a French + Japanese sentence (0.015).
const PROMPTS = [
  { name: 'prose', text: 'The quick brown fox jumps over the lazy dog. The quick brown' },
  { name: 'code', text: 'function add(a, b) {\n' },
  { name: 'list', text: 'The planets of the solar system, in order from the Sun:\n1. Mercury\n2.' },
  { name: 'question', text: 'Q: What is the capital of France?\nA:' },
  { name: 'non-ascii', text: "Les mois de l'année : janvier, février," },
];
// Tokenizer only (one generated token, its prompt count compared): scripts and spacing the five above miss.
const TOKENIZER_ONLY = [
  '日本の首都は東京です。東京は',
  'Привет! Меня зовут Анна, и я живу в',
  '中华人民共和国的首都是',
  'Emoji 🦀🔥 and   three spaces,\ttabs\n\n\nand newlines',
  ' leading space, trailing space ',
].map((text, i) => ({ name: `tokenizer-${i + 1}`, text, tokens: 1, tokenizerOnly: true }));
const ALL_PROMPTS = [...PROMPTS, ...TOKENIZER_ONLY];

const webgpuMode = process.env.KILN_GEMMA3_WEBGPU ?? 'first';
// By default the French prompt on WebGPU: the widest greedy margin (0.81), 12 prompt tokens, non-ASCII output.
const WEBGPU_PROMPTS = webgpuMode === 'all' ? PROMPTS
  : ['0', 'off', 'none'].includes(webgpuMode) ? [] : PROMPTS.filter((p) => p.name === 'non-ascii');

const types = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json', '.wasm': 'application/wasm',
};
const mounts = [
  ['/pkg/', join(root, 'pkg')],
  ['/models/', cache],
  ['/wllama/', join(root, 'node_modules', '@wllama', 'wllama')],
];

function resolveFile(url) {
  let path;
  try {
    path = decodeURIComponent(new URL(url, 'http://x').pathname);
  } catch {
    return null;
  }
  for (const [prefix, dir] of mounts) {
    if (!path.startsWith(prefix)) continue;
    const file = normalize(join(dir, path.slice(prefix.length)));
    if (!file.startsWith(dir + sep)) return null;
    return existsSync(file) && statSync(file).isFile() ? file : null;
  }
  return null;
}

const isolation = {
  'Cache-Control': 'no-cache',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cross-Origin-Resource-Policy': 'cross-origin',
};
const server = createServer((req, res) => {
  if (new URL(req.url, 'http://x').pathname === '/') {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', ...isolation }).end('<!doctype html><title>gemma3</title>');
    return;
  }
  const file = resolveFile(req.url);
  if (!file) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'Content-Type': types[extname(file)] ?? 'application/octet-stream', 'Content-Length': statSync(file).size, ...isolation });
  createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}/`;
const browser = await launch();
after(async () => {
  await browser.close();
  server.close();
});

/** A fresh page (its own context) with its console kept; `fn(args)` runs in it. */
async function inPage(fn, args) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const logs = [];
  page.on('console', (m) => {
    logs.push(`[${m.type()}] ${m.text()}`);
    if (m.text().startsWith('[gemma3]')) console.log(`  ${m.text()}`);
  });
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  try {
    await page.goto(base);
    return { result: await page.evaluate(fn, args), logs };
  } catch (e) {
    throw new Error(`${e.message}\n${logs.slice(-40).join('\n')}`);
  } finally {
    await context.close();
  }
}

/** In the page: wllama (llama.cpp, CPU path, one thread) on every prompt, greedy, not streamed. */
async function wllamaRun({ model, prompts, maxTokens }) {
  const log = (...a) => console.log('[gemma3]', ...a);
  const lines = [];
  const keep = (...a) => lines.push(a.map(String).join(' '));
  const { Wllama } = await import('/wllama/esm/index.js');
  const wllama = new Wllama({ default: '/wllama/esm/wasm/wllama.wasm' }, {
    logger: { debug: keep, log: keep, warn: keep, error: keep },
  });
  const t0 = performance.now();
  const response = await fetch(model);
  if (!response.ok) throw new Error(`${model}: HTTP ${response.status}`);
  const file = new File([await response.blob()], model.split('/').pop());
  await wllama.loadModel([file], { n_ctx: 512, n_threads: 1, n_gpu_layers: 0, n_parallel: 1 });
  const loadMs = performance.now() - t0;
  log(`wllama: loaded in ${loadMs.toFixed(0)} ms (libllama ${Wllama.getLibllamaVersion?.()})`);
  const info = {
    load_ms: loadMs, bos: wllama.getBOS(), eos: wllama.getEOS(), eot: wllama.getEOT(),
    add_bos: wllama.mustAddBosToken(), threads: wllama.getNumThreads(), libllama: Wllama.getLibllamaVersion?.() ?? null,
    metadata: Object.fromEntries(Object.entries(wllama.getModelMetadata().meta ?? {})
      .filter(([k]) => /^(general\.architecture|tokenizer\.ggml\.(model|add_bos_token|add_eos_token|add_space_prefix|bos_token_id|eos_token_id|pre))$/.test(k))),
  };
  const results = [];
  for (const { name, text, tokens } of prompts) {
    const started = performance.now();
    const r = await wllama.createCompletion({
      prompt: text, max_tokens: tokens ?? maxTokens, temperature: 0, cache_prompt: false, logprobs: 2,
    });
    const ms = performance.now() - started;
    const choice = r.choices[0];
    // The gap between the two most likely tokens at each step (natural log): a small one is a near-tie that
    // rounding can flip.
    const content = choice.logprobs?.content ?? null;
    const gaps = Array.isArray(content) ? content.map((c) => {
      const top = (c.top_logprobs ?? []).map((t) => t.logprob).sort((a, b) => b - a);
      return top.length >= 2 ? top[0] - top[1] : Infinity;
    }) : null;
    const margin = gaps ? Math.min(...gaps) : null;
    const out = {
      name, prompt: text, tokenizerOnly: tokens === 1, text: choice.text, finish_reason: choice.finish_reason, usage: r.usage, ms, margin,
      completion_ids: Array.isArray(content) ? content.map((c) => c.id ?? null) : null,
      pieces: Array.isArray(content) ? content.map((c) => c.token) : null, gaps,
      timings: r.timings ?? null,
    };
    log(`wllama ${name}: ${r.usage.prompt_tokens} prompt + ${r.usage.completion_tokens} tokens in ${ms.toFixed(0)} ms: ${JSON.stringify(choice.text)}`);
    results.push(out);
  }
  await wllama.exit();
  return { info, results };
}

/** In the page: kiln's `Engine` on `device`, the same requests. A load error comes back as `{ loadError }`. */
async function kilnRun({ model, prompts, maxTokens, device }) {
  const log = (...a) => console.log('[gemma3]', ...a);
  const { Engine } = await import('/pkg/index.js');
  const t0 = performance.now();
  let engine;
  try {
    engine = await Engine.load({ model: 'gemma3', source: model, device });
  } catch (e) {
    return { loadError: { name: e.name, message: e.message, status: e.status, code: e.code, param: e.param } };
  }
  const loadMs = performance.now() - t0;
  // Read before `unload`, after which the engine has no model.
  const onDevice = engine.device;
  log(`kiln ${device}: loaded in ${loadMs.toFixed(0)} ms on ${JSON.stringify(onDevice)}`);
  const results = [];
  try {
    for (const { name, text, tokens } of prompts) {
      const started = performance.now();
      const r = await engine.completions.create({ model: 'gemma3', prompt: text, max_tokens: tokens ?? maxTokens, temperature: 0 });
      const ms = performance.now() - started;
      const choice = r.choices[0];
      log(`kiln ${device} ${name}: ${r.usage.prompt_tokens} prompt + ${r.usage.completion_tokens} tokens in ${ms.toFixed(0)} ms: ${JSON.stringify(choice.text)}`);
      results.push({ name, text: choice.text, finish_reason: choice.finish_reason, usage: r.usage, ms });
    }
  } finally {
    await engine.unload();
  }
  return { device: onDevice, load_ms: loadMs, results };
}

let reference = null;

test(`wllama (llama.cpp) reference: Gemma 3 270M Q4_K_M, ${PROMPTS.length} greedy completions of ${MAX_TOKENS} tokens (+ ${TOKENIZER_ONLY.length} prompt counts)`, { timeout: 900_000 }, async () => {
  assert.ok(existsSync(join(cache, MODEL_FILE)), `${join(cache, MODEL_FILE)} is missing: run \`cargo xtask fetch\``);
  const { result } = await inPage(wllamaRun, { model: MODEL, prompts: ALL_PROMPTS, maxTokens: MAX_TOKENS });
  console.log(`wllama: ${JSON.stringify(result.info)}`);
  assert.equal(result.info.add_bos, true, 'the file asks for BOS');
  for (const r of result.results) {
    console.log(`wllama ${r.name}: ${(r.ms / 1000).toFixed(1)} s, ${r.usage.prompt_tokens} prompt tokens, ${r.usage.completion_tokens} generated (${r.finish_reason}), smallest top-2 gap ${r.margin?.toFixed(3)}, ids ${JSON.stringify(r.completion_ids)}: ${JSON.stringify(r.text)}`);
    assert.ok(r.usage.completion_tokens > 0 && r.text.length > 0, `${r.name}: wllama generated nothing`);
    assert.equal(divergence(r, r.text), r.pieces ? ' (kiln went on after llama.cpp\'s last token)' : '', `${r.name}: llama.cpp's pieces spell its text`);
  }
  reference = result.results;
});

/** Where `text` leaves llama.cpp's tokens, and how close llama.cpp's top two were there (a near-tie or not). */
function divergence(want, text) {
  if (!want.pieces) return '';
  let at = 0;
  for (let i = 0; i < want.pieces.length; i++) {
    const next = at + want.pieces[i].length;
    if (text.slice(at, next) !== want.pieces[i]) {
      return ` (first differs at generated token ${i}, ${JSON.stringify(want.pieces[i])}; llama.cpp's top-2 gap there ${want.gaps[i].toFixed(3)} nats)`;
    }
    at = next;
  }
  return ' (kiln went on after llama.cpp\'s last token)';
}

/** Runs kiln on `device` over `prompts` and compares with the reference, prompt by prompt. */
async function compare(device, prompts) {
  assert.ok(reference, 'the wllama reference test failed');
  const { result } = await inPage(kilnRun, { model: MODEL, prompts, maxTokens: MAX_TOKENS, device });
  if (result.loadError) {
    assert.fail(`kiln refused the file on ${device}: ${JSON.stringify(result.loadError)}`);
  }
  for (const r of result.results) {
    const want = reference.find((w) => w.name === r.name);
    console.log(`kiln ${device} ${r.name}: ${(r.ms / 1000).toFixed(1)} s (wllama ${(want.ms / 1000).toFixed(1)} s), ${r.usage.prompt_tokens} prompt tokens, ${r.usage.completion_tokens} generated (${r.finish_reason})`);
  }
  for (const r of result.results) {
    const want = reference.find((w) => w.name === r.name);
    assert.equal(r.usage.prompt_tokens, want.usage.prompt_tokens, `${r.name}: prompt tokens, kiln ${device} vs llama.cpp (${JSON.stringify(want.prompt)})`);
    if (want.tokenizerOnly) continue;
    assert.equal(r.text, want.text, `${r.name}: greedy text, kiln ${device} vs llama.cpp${divergence(want, r.text)}`);
    assert.equal(r.usage.completion_tokens, want.usage.completion_tokens, `${r.name}: completion tokens`);
    assert.equal(r.finish_reason, want.finish_reason, `${r.name}: finish_reason`);
  }
  return result;
}

test(`kiln CPU backend = llama.cpp on all ${PROMPTS.length} prompts (greedy text, prompt tokens) and ${TOKENIZER_ONLY.length} prompt counts`, { timeout: 900_000 }, async () => {
  const r = await compare('cpu', ALL_PROMPTS);
  assert.equal(r.device.kind, 'cpu');
});

test(`kiln WebGPU (SwiftShader) = llama.cpp on ${WEBGPU_PROMPTS.length} prompt(s) (KILN_GEMMA3_WEBGPU=${webgpuMode})`, { timeout: 1_800_000, skip: WEBGPU_PROMPTS.length === 0 }, async () => {
  const r = await compare('webgpu', WEBGPU_PROMPTS);
  assert.equal(r.device.kind, 'gpu');
});
