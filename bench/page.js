// The browser half of `cargo xtask bench` (driven by bench/bench.mjs in headless Chromium). One fresh page
// runs one configuration: `window.benchKiln({ device: 'webgpu' | 'cpu', ... })` or `window.benchWllama({...})`.
// Both load the same GGUF over HTTP (timed from the start of loading to a usable engine, the wasm module's
// compilation included), then for each prompt (token ids, the same for both) run `warmup` + `runs` greedy
// streamed completions of `tokens` tokens with the end-of-generation ids biased away, and report each measured
// run's time to the first chunk, completion tokens and time from the first to the last chunk. Medians are
// taken by the caller. Timings only: nothing here asserts on them.

import { watchWorkerMemory } from './worker-memory.js';

const now = () => performance.now();
const log = (...args) => console.log('[bench]', ...args);

/** `b − a` of two `counts()` of kiln's device counters (`watchDevice`). */
function since(b, a) {
  const by_kernel = {};
  for (const [k, n] of Object.entries(b.by_kernel)) if (n > (a.by_kernel[k] ?? 0)) by_kernel[k] = n - (a.by_kernel[k] ?? 0);
  return { dispatches: b.dispatches - a.dispatches, reads: b.reads - a.reads, read_bytes: b.read_bytes - a.read_bytes, by_kernel };
}

/**
 * Reads a stream of completion chunks; times are relative to `t0`. With `probe` (kiln's device counters),
 * also what the prefill (up to the first chunk) and the decode steps (first to last chunk) cost the device.
 */
async function consume(iter, t0, probe) {
  const start = probe?.();
  let atFirst = null;
  let atLast = null;
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
      if (probe) {
        atLast = probe();
        atFirst ??= atLast;
      }
      chunks += 1;
      text += chunk.choices.map((c) => c.text ?? '').join('');
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.timings) timings = chunk.timings;
  }
  if (first === null) throw new Error('the stream had no chunk with a choice');
  const counts = probe ? { prefill_counts: since(atFirst, start), decode_counts: since(atLast, atFirst) } : {};
  return { first, last, usage, timings, chunks, text, counts };
}

/** Runs every prompt through `create(ids)` (which starts a streamed completion) and records the runs. */
async function runPrompts(label, { prompts, runs, warmup }, create, probe) {
  const out = {};
  for (const [size, ids] of Object.entries(prompts)) {
    const list = [];
    let text = '';
    for (let i = 0; i < warmup + runs; i++) {
      const warm = i < warmup;
      const t0 = now();
      const r = await consume(await create(ids, size), t0, probe);
      const completion = r.usage?.completion_tokens ?? r.chunks;
      const run = {
        ttft_ms: r.first,
        total_ms: r.last,
        decode_ms: r.last - r.first,
        prompt_tokens: r.usage?.prompt_tokens ?? ids.length,
        completion_tokens: completion,
        chunks: r.chunks,
      };
      if (r.timings) run.engine_timings = r.timings;
      if (probe) Object.assign(run, r.counts, { decode_steps: Math.max(completion - 1, 0) });
      log(`${label} prompt ${size} ${warm ? 'warm-up' : 'run'} ${warm ? i + 1 : i + 1 - warmup}: ttft ${r.first.toFixed(0)} ms, ${completion} tokens in ${r.last.toFixed(0)} ms`);
      if (!warm) list.push(run);
      text = r.text;
    }
    out[size] = { runs: list, text };
  }
  return out;
}

const biasOf = (stopIds) => Object.fromEntries(stopIds.map((id) => [String(id), -100]));

window.benchKiln = async ({ device, model, prompts, stopIds, tokens, runs, warmup, threads }) => {
  const label = device === 'cpu' ? `kiln cpu (threads ${threads ?? 'default'})` : `kiln ${device}`;
  log(`${label}: loading ${model}`);
  const t0 = now();
  const { Engine } = await import('/pkg/index.js');
  let lastPhase = '';
  const engine = await Engine.load({
    model: 'bench',
    source: model,
    device,
    // On the CPU backend: the threaded build on `threads` threads (1: the single-threaded build).
    threads: device === 'cpu' ? threads : undefined,
    // Every run prefills its prompt cold, as wllama's (`cache_prompt: false`); `benchChat` measures reuse.
    prefixCacheBytes: 0,
    onProgress: ({ phase }) => {
      if (phase !== lastPhase) log(`${label}: ${phase}`);
      lastPhase = phase;
    },
  });
  const loadMs = now() - t0;
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms on ${JSON.stringify(engine.device)}`);
  // The wasm-bindgen glue's default export returns the initialised module's exports once it has run.
  const glue = await import(engine.threads?.build === 'threads' ? '/pkg/threads/kiln.js' : '/pkg/kiln.js');
  const wasm = await glue.default();
  // Dispatches and reads, counted over every run (kiln's `engine::runtime::counters`; the engine runs on this page).
  const watch = glue.watchDevice();
  const bias = biasOf(stopIds);
  const results = await runPrompts(label, { prompts, runs, warmup }, (ids) => engine.completions.create({
    model: 'bench', prompt: ids, max_tokens: tokens, temperature: 0, logit_bias: bias,
    stream: true, stream_options: { include_usage: true },
  }), () => watch.counts());
  watch.free();
  // Wasm memory only grows: its size now is its peak.
  const memory = wasm.memory?.buffer?.byteLength ?? null;
  const info = { ...engine.device, build: engine.threads };
  const model_memory = engine.memory;
  await engine.unload();
  return { device: info, load_ms: loadMs, wasm_memory_bytes: memory, model_memory, prompts: results };
};

/**
 * A `turns`-turn chat (`userTexts[i]` the i-th user message, `tokens` greedy tokens per answer with the
 * end-of-generation ids biased away) on one engine, twice: keeping no prefixes (`prefixCacheBytes: 0`, every
 * turn prefills the whole conversation) and with the default prefix cache (each turn reuses the earlier ones).
 * Per turn: the time to the first chunk, prompt and cached tokens; and whether both runs answered alike.
 */
window.benchChat = async ({ device, model, userTexts, turns, tokens, stopIds }) => {
  const { Engine } = await import('/pkg/index.js');
  const bias = biasOf(stopIds);
  const out = { turns, tokens };
  const answers = {};
  for (const [mode, prefixCacheBytes] of [['cold', 0], ['reuse', undefined]]) {
    const engine = await Engine.load({ model: 'bench', source: model, device, prefixCacheBytes });
    const messages = [{ role: 'system', content: 'You are a helpful assistant.' }];
    const list = [];
    answers[mode] = [];
    for (let t = 0; t < turns; t++) {
      messages.push({ role: 'user', content: userTexts[t % userTexts.length] });
      const t0 = now();
      const iter = await engine.chat.completions.create({
        model: 'bench', messages, max_tokens: tokens, temperature: 0, logit_bias: bias,
        stream: true, stream_options: { include_usage: true },
      });
      let first = null;
      let text = '';
      let usage = null;
      for await (const chunk of iter) {
        if (chunk.choices?.length) {
          first ??= now() - t0;
          text += chunk.choices[0].delta?.content ?? '';
        }
        if (chunk.usage) usage = chunk.usage;
      }
      const total = now() - t0;
      const run = {
        turn: t + 1, ttft_ms: first, total_ms: total, prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completion_tokens: usage.completion_tokens,
      };
      log(`chat ${mode} turn ${t + 1}: ${run.prompt_tokens} prompt tokens (${run.cached_tokens} cached), ttft ${first.toFixed(0)} ms`);
      list.push(run);
      answers[mode].push(text);
      messages.push({ role: 'assistant', content: text });
    }
    out[mode] = list;
    out[`${mode}_memory`] = engine.memory;
    await engine.unload();
  }
  out.same_answers = answers.cold.every((a, i) => a === answers.reuse[i]);
  out.device = device;
  return out;
};


window.benchWllama = async ({ backend, model, prompts, texts, stopIds, tokens, runs, warmup, threads, nCtx }) => {
  const queryMemory = watchWorkerMemory('bench-memory');
  const lines = [];
  const keep = (level) => (...args) => {
    const line = args.map(String).join(' ');
    lines.push(line);
    if (level !== 'debug' || /webgpu|offload|backend|device|thread/i.test(line)) log(`wllama ${level}: ${line}`);
  };
  const logger = { debug: keep('debug'), log: keep('log'), warn: keep('warn'), error: keep('error') };
  const label = `wllama ${backend}`;
  log(`${label}: loading ${model}`);
  const t0 = now();
  const { Wllama } = await import('/wllama/esm/index.js');
  const wllama = new Wllama({ default: '/wllama/esm/wasm/wllama.wasm' }, { logger });
  // The same path as kiln's: the file fetched into memory, then handed over (no OPFS cache).
  const response = await fetch(model);
  if (!response.ok) throw new Error(`${model}: HTTP ${response.status}`);
  const file = new File([await response.blob()], model.split('/').pop());
  await wllama.loadModel([file], {
    n_ctx: nCtx,
    n_threads: threads,
    n_gpu_layers: backend === 'webgpu' ? 99999 : 0,
    n_parallel: 1,
    log_level: 2, // INFO: the backend and layer offload lines
  });
  const loadMs = now() - t0;
  const info = {
    backend,
    webgpu_available: wllama.isSupportWebGPU(),
    multithread: wllama.isMultithread(),
    threads: wllama.getNumThreads(),
    libllama: Wllama.getLibllamaVersion?.() ?? null,
    gpu_log: lines.filter((l) => /webgpu|offloaded|ggml_backend|using device|CPU_REPACK|model buffer/i.test(l)).slice(0, 20),
  };
  // Asking for WebGPU is not getting it: llama.cpp falls back to its CPU backend when ggml-webgpu registers no
  // device (as on SwiftShader). Its load log says where the weights went.
  if (backend === 'webgpu' && !lines.some((l) => /offloaded [1-9]\d*\/\d+ layers to GPU|WebGPU\S* model buffer/i.test(l))) {
    info.backend = 'cpu';
    info.note = 'WebGPU requested, but llama.cpp put no layer on a WebGPU device (its log shows only CPU buffers): it ran on its CPU path';
  }
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms ${JSON.stringify(info)}`);
  const bias = biasOf(stopIds);
  // wllama's completion takes text, not token ids: the prompt's tokens decoded, which llama.cpp tokenizes back
  // to the same ids (each run's `prompt_tokens` says how many it saw). No KV reuse between runs.
  const results = await runPrompts(label, { prompts, runs, warmup }, (ids, size) => wllama.createCompletion({
    prompt: texts[size], max_tokens: tokens, temperature: 0, logit_bias: bias, ignore_eos: true,
    cache_prompt: false, stream: true, stream_options: { include_usage: true },
  }));
  const memory = await queryMemory();
  await wllama.exit();
  return { device: info, load_ms: loadMs, wasm_memory_bytes: memory, prompts: results, log: lines.slice(0, 200) };
};

window.benchReady = true;
