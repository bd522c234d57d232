// The browser half of the 2026-families benchmark (driven by bench/families.mjs in headless Chromium). kiln
// (`familiesKiln*`: its CPU backend at `threads`, or WebGPU) and wllama (`familiesWllama*`: llama.cpp's CPU path at
// `threads`) load the same GGUF over HTTP (timed from the start of loading to a usable engine), then run streamed
// greedy completions of the same prompt text (wllama's server code takes text only; kiln tokenizes it as
// llama.cpp does, special tokens included, and each run reports the count its engine saw), `tokens` tokens with
// the end-of-generation ids biased away. Each run reports the time to the first chunk (the prompt prefilled and
// the first token sampled), the time from the first to the last chunk, and the token counts each engine reports;
// wllama's own timings ride along.
//
// Each engine in three steps, so that the driver can keep a kiln page and a wllama page loaded side by side and
// alternate their runs: `...Load(args)`, `...Run(args)` any number of times, `...Done()`. `familiesKilnMemory` runs
// a prompt in a page whose engine keeps states in its prefix cache and says how many bytes its kept state added
// (`engine.memory.prefixCacheBytes`); `familiesKilnCount` counts a text's tokens without running it (see there).
//
// Timings only: nothing here asserts on them.

import { watchWorkerMemory } from './worker-memory.js';

const now = () => performance.now();
const log = (...args) => console.log('[families]', ...args);

/** Reads a stream of completion chunks; times are relative to `t0`. */
async function consume(iter, t0) {
  let first = null;
  let last = null;
  let usage = null;
  let timings = null;
  let chunks = 0;
  let text = '';
  for await (const chunk of iter) {
    const t = now() - t0;
    if (chunk.choices?.length) {
      first ??= t;
      last = t;
      chunks += 1;
      text += chunk.choices.map((c) => c.text ?? '').join('');
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.timings) timings = chunk.timings;
  }
  if (first === null) throw new Error('the stream had no chunk with a choice');
  return { first, last, usage, timings, chunks, text };
}

/** One run's figures from a consumed stream. */
function figures(r) {
  const completion = r.usage?.completion_tokens ?? r.chunks;
  const prompt = r.timings?.prompt_n ?? r.usage?.prompt_tokens ?? null;
  const decodeMs = r.last - r.first;
  return {
    ttft_ms: r.first,
    total_ms: r.last,
    decode_ms: decodeMs,
    prompt_tokens: prompt,
    cached_tokens: r.usage?.prompt_tokens_details?.cached_tokens ?? null,
    completion_tokens: completion,
    chunks: r.chunks,
    // the first chunk carries the first token: what follows it is `completion − 1` decode steps
    prefill_tok_s: (prompt / r.first) * 1000,
    decode_tok_s: completion > 1 && decodeMs > 0 ? ((completion - 1) / decodeMs) * 1000 : null,
    text: r.text,
  };
}

const biasOf = (stopIds) => Object.fromEntries(stopIds.map((id) => [String(id), -100]));

let kiln = null;

window.familiesKilnLoad = async ({ device, threads, model, prefixCacheBytes }) => {
  const label = device === 'cpu' ? `kiln cpu (threads ${threads})` : `kiln ${device}`;
  log(`${label}: loading ${model}`);
  const t0 = now();
  const { Engine } = await import('/pkg/index.js');
  let lastPhase = '';
  const engine = await Engine.load({
    model: 'bench',
    source: model,
    device,
    threads: device === 'cpu' ? threads : undefined,
    prefixCacheBytes,
    onProgress: ({ phase }) => {
      if (phase !== lastPhase) log(`${label}: ${phase}`);
      lastPhase = phase;
    },
  });
  const loadMs = now() - t0;
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms on ${JSON.stringify(engine.device)}; memory ${JSON.stringify(engine.memory)}`);
  kiln = { engine, label };
  return { engine: 'kiln', device: { ...engine.device, build: engine.threads }, load_ms: loadMs, memory_at_load: engine.memory };
};

/**
 * The number of tokens kiln makes of `text` (BOS included where the model adds one), without running them: a
 * completion asking for more tokens than any context holds is refused before anything runs, and the refusal
 * (`context_length_exceeded`) says how many tokens the prompt has.
 */
window.familiesKilnCount = async ({ text }) => {
  try {
    await kiln.engine.completions.create({ model: 'bench', prompt: text, max_tokens: 2 ** 30 });
  } catch (e) {
    const m = /has (\d+) tokens/.exec(e.message);
    if (m) return Number(m[1]);
    throw e;
  }
  throw new Error('a completion of 2^30 tokens was not refused');
};

window.familiesKilnRun = async ({ prompt, tokens, stopIds, warm, index }) => {
  const { engine, label } = kiln;
  const t0 = now();
  const iter = await engine.completions.create({
    model: 'bench', prompt, max_tokens: tokens, temperature: 0, logit_bias: biasOf(stopIds),
    stream: true, stream_options: { include_usage: true },
  });
  const run = figures(await consume(iter, t0));
  run.memory_after = engine.memory;
  log(`${label} ${warm ? 'warm-up' : 'run'} ${index}: ${run.prompt_tokens} prompt tokens (${run.cached_tokens} cached) in ${run.ttft_ms.toFixed(0)} ms = ${run.prefill_tok_s.toFixed(1)} tok/s; ${run.completion_tokens} tokens, decode ${run.decode_tok_s?.toFixed(2)} tok/s; kept states ${run.memory_after?.prefixCacheBytes} B`);
  return run;
};

/** One more kept state, of `prompt` and the one token generated: the bytes it added. */
window.familiesKilnMemory = async ({ prompt, stopIds }) => {
  const { engine, label } = kiln;
  const before = engine.memory;
  const t0 = now();
  const iter = await engine.completions.create({
    model: 'bench', prompt, max_tokens: 1, temperature: 0, logit_bias: biasOf(stopIds),
    stream: true, stream_options: { include_usage: true },
  });
  const run = figures(await consume(iter, t0));
  const after = engine.memory;
  log(`${label} memory prompt of ${run.prompt_tokens} tokens: kept states ${before.prefixCacheBytes} -> ${after.prefixCacheBytes} B`);
  return { prompt_tokens: run.prompt_tokens, completion_tokens: run.completion_tokens, cached_tokens: run.cached_tokens, ttft_ms: run.ttft_ms, before, after, added_bytes: after.prefixCacheBytes - before.prefixCacheBytes };
};

window.familiesKilnDone = async () => {
  const { engine } = kiln;
  const glue = await import(engine.threads?.build === 'threads' ? '/pkg/threads/kiln.js' : '/pkg/kiln.js');
  const wasm = await glue.default();
  // Wasm memory only grows: its size now is its peak.
  const out = { wasm_memory_bytes: wasm.memory?.buffer?.byteLength ?? null, model_memory: engine.memory };
  await engine.unload();
  kiln = null;
  return out;
};


let wl = null;

window.familiesWllamaLoad = async ({ threads, model, nCtx }) => {
  const queryMemory = watchWorkerMemory('families-memory');
  const lines = [];
  const keep = (level) => (...args) => {
    const line = args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
    lines.push(line);
    if (level === 'error' || level === 'warn' || /arch|unknown|error|kv_cache|memory_recurrent|model buffer|thread/i.test(line)) log(`wllama ${level}: ${line.slice(0, 300)}`);
  };
  const logger = { debug: keep('debug'), log: keep('log'), warn: keep('warn'), error: keep('error') };
  const label = `wllama cpu (threads ${threads})`;
  log(`${label}: loading ${model}`);
  const t0 = now();
  const { Wllama } = await import('/wllama/esm/index.js');
  const wllama = new Wllama({ default: '/wllama/esm/wasm/wllama.wasm' }, { logger });
  // The same path as kiln's: the file fetched into memory, then handed over (no OPFS cache).
  const response = await fetch(model);
  if (!response.ok) throw new Error(`${model}: HTTP ${response.status}`);
  const file = new File([await response.blob()], model.split('/').pop());
  try {
    await wllama.loadModel([file], { n_ctx: nCtx, n_threads: threads, n_gpu_layers: 0, n_parallel: 1, log_level: 2 });
  } catch (e) {
    // llama.cpp's reason is in its log (an unknown architecture, a tensor it does not expect, ...)
    const why = lines.filter((l) => /error|failed|unknown|missing|wrong/i.test(l)).slice(-6);
    throw new Error(`${e.message}${why.length ? `: ${why.join(' | ')}` : ''}`);
  }
  const loadMs = now() - t0;
  const info = { multithread: wllama.isMultithread(), threads: wllama.getNumThreads(), libllama: Wllama.getLibllamaVersion?.() ?? null };
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms ${JSON.stringify(info)}`);
  wl = { wllama, lines, label, queryMemory };
  return { engine: 'wllama', device: info, load_ms: loadMs };
};

window.familiesWllamaRun = async ({ prompt, tokens, stopIds, warm, index }) => {
  const { wllama, label } = wl;
  const t0 = now();
  const iter = await wllama.createCompletion({
    prompt, max_tokens: tokens, temperature: 0, logit_bias: biasOf(stopIds), ignore_eos: true,
    cache_prompt: false, stream: true, stream_options: { include_usage: true },
  });
  const r = await consume(iter, t0);
  const run = figures(r);
  if (r.timings) run.engine_timings = r.timings;
  log(`${label} ${warm ? 'warm-up' : 'run'} ${index}: ${run.prompt_tokens} prompt tokens (${r.timings?.prompt_n} for llama.cpp) in ${run.ttft_ms.toFixed(0)} ms = ${run.prefill_tok_s.toFixed(1)} tok/s (llama.cpp: ${r.timings?.prompt_per_second?.toFixed(1)}); ${run.completion_tokens} tokens, decode ${run.decode_tok_s?.toFixed(2)} tok/s (llama.cpp: ${r.timings?.predicted_per_second?.toFixed(2)})`);
  return run;
};

window.familiesWllamaDone = async () => {
  const { wllama, lines, queryMemory } = wl;
  const memory = await queryMemory();
  await wllama.exit();
  wl = null;
  return {
    wasm_memory_bytes: memory,
    // llama.cpp's own account of its caches (`llama_kv_cache: size = ...`, the recurrent states' buffers)
    memory_log: lines.filter((l) => /kv_cache|kv cache|memory_recurrent|recurrent|KV buffer|RS buffer|compute buffer|model buffer|n_ctx/i.test(l)).slice(0, 40),
    load_log: lines.slice(0, 300),
  };
};

window.familiesReady = true;
