// The browser half of the 7–8B benchmark (driven by bench/big.mjs in headless Chromium, one fresh browser per
// call sequence, so that wasm memory starts clean). kiln: `bigInspect` (`Engine.inspect`, headers only),
// `bigKilnLoad` (`Engine.load` of the URL on `webgpu` or `cpu`, single-threaded build, with the wasm memory
// before and after: it only grows, so after is the load's peak) then `bigKilnToken` (one greedy token).
// wllama (llama.cpp in wasm, its CPU path): `bigWllamaLoad` (the file fetched into a Blob and handed over, as
// bench/families-page.js does) then `bigWllamaToken`. Every step reports its wall time (performance.now() in
// the page) and, where it fails, the error's message and the time it took to fail.
//
// Timings only: nothing here asserts on them.

import { watchWorkerMemory } from './worker-memory.js';

const now = () => performance.now();
const log = (...args) => console.log('[big]', ...args);
const MB = (b) => `${(b / 1e6).toFixed(0)} MB`;
const wasmBytes = async () => (await (await import('/pkg/kiln.js')).default()).memory.buffer.byteLength;
const errorOf = (e) => ({ message: String(e?.message ?? e), status: e?.status ?? null, code: e?.code ?? null, param: e?.param ?? null });

/**
 * `Engine.inspect(url, { device })` (the CPU on the single-threaded build, as the load): its wall time and result,
 * and the wasm memory before and after (its peak).
 */
window.bigInspect = async ({ url, device }) => {
  const { Engine } = await import('/pkg/index.js');
  const before = await wasmBytes();
  const t0 = now();
  try {
    const result = await Engine.inspect(url, { device, threads: device === 'cpu' ? 1 : undefined });
    const ms = now() - t0;
    log(`inspect ${device}: ${ms.toFixed(0)} ms, device ${JSON.stringify(result.device)}`);
    return { ms, result, wasm_before: before, wasm_after: await wasmBytes() };
  } catch (e) {
    return { ms: now() - t0, error: errorOf(e), wasm_before: before, wasm_after: await wasmBytes() };
  }
};

let kiln = null;

/**
 * `Engine.load({ source: url, device, threads: 1 })`: the wall time to a usable engine (or to the refusal),
 * the last progress report of each phase (with its time), the wasm memory before and after, and what the
 * engine reports (`memory`, `context`, `device`).
 */
window.bigKilnLoad = async ({ url, device, contextLength }) => {
  const { Engine } = await import('/pkg/index.js');
  const wasm = await (await import('/pkg/kiln.js')).default();
  const before = wasm.memory.buffer.byteLength;
  // The bound of issue 42 is on what a load holds beyond the module and the tokenizer: an inspection of the
  // same headers first (the header parsed, the tokenizer built, both freed) grows the memory by what they
  // take, and the load's own header and tokenizer reuse that room. Its size after is the baseline.
  try {
    await Engine.inspect(url, { device, threads: device === 'cpu' ? 1 : undefined });
  } catch { /* the load reports its own error */ }
  const baseline = wasm.memory.buffer.byteLength;
  const label = `kiln ${device}`;
  const phases = {};
  // Where the wasm memory grew: its size at each progress report where it changed, with the bytes downloaded
  // and uploaded by then.
  const growth = [];
  let size = baseline;
  let nextLog = 0;
  const t0 = now();
  // Each phase's first and last report (the phases interleave: a tensor goes to the device as it arrives);
  // logged at a phase's first report and every 30 s.
  const onProgress = ({ phase, loaded, total }) => {
    const t = now() - t0;
    const first = !phases[phase];
    phases[phase] ??= { first_ms: t, reports: 0 };
    Object.assign(phases[phase], { last_ms: t, loaded, total, reports: phases[phase].reports + 1 });
    if (wasm.memory.buffer.byteLength !== size) {
      size = wasm.memory.buffer.byteLength;
      growth.push({ ms: t, phase, downloaded: phases.download?.loaded ?? 0, uploaded: phases.upload?.loaded ?? 0, bytes: size });
    }
    if (first || t >= nextLog) {
      log(`${label}: ${(t / 1000).toFixed(1)} s ${Object.entries(phases).map(([k, p]) => `${k} ${MB(p.loaded)} / ${MB(p.total)}`).join(', ')}`);
      nextLog = t + 30_000;
    }
  };
  log(`${label}: loading ${url} (wasm memory ${MB(before)}, ${MB(baseline)} after inspecting its headers)`);
  let engine;
  try {
    engine = await Engine.load({ model: 'big', source: url, device, threads: device === 'cpu' ? 1 : undefined, contextLength, onProgress });
  } catch (e) {
    const ms = now() - t0;
    const after = await wasmBytes();
    log(`${label}: failed after ${ms.toFixed(0)} ms: ${e.message}`);
    return { load_ms: ms, error: errorOf(e), downloaded: phases.download?.loaded ?? 0, phases, wasm_before: before, wasm_baseline: baseline, wasm_after: after, wasm_growth: growth };
  }
  const ms = now() - t0;
  // Wasm memory only grows: its size now is its peak during the load.
  const after = await wasmBytes();
  kiln = { engine, label };
  const out = {
    load_ms: ms, downloaded: phases.download?.loaded ?? null, phases, wasm_before: before, wasm_baseline: baseline, wasm_after: after, wasm_growth: growth,
    memory: engine.memory, context: engine.context, device: engine.device, threads: engine.threads,
  };
  log(`${label}: loaded in ${ms.toFixed(0)} ms; wasm memory ${MB(before)} -> ${MB(after)}; memory ${JSON.stringify(out.memory)}; context ${JSON.stringify(out.context)}`);
  return out;
};

/** One greedy token of `prompt` on the loaded kiln engine: its wall time, text and usage, and the wasm memory after. */
window.bigKilnToken = async ({ prompt }) => {
  const { engine, label } = kiln;
  const t0 = now();
  try {
    const r = await engine.completions.create({ model: 'big', prompt, max_tokens: 1, temperature: 0 });
    const ms = now() - t0;
    log(`${label}: one token in ${ms.toFixed(0)} ms: ${JSON.stringify(r.choices[0].text)}`);
    return { ms, text: r.choices[0].text, usage: r.usage, memory: engine.memory, wasm_after: await wasmBytes() };
  } catch (e) {
    return { ms: now() - t0, error: errorOf(e), wasm_after: await wasmBytes() };
  }
};

let wl = null;

/**
 * wllama's load, as bench/families-page.js does it: the URL fetched into a Blob, handed over as a File (no
 * OPFS cache), `n_threads` 1, `n_ctx` `nCtx`. The wall time covers the fetch and the load; the worker's wasm
 * memory comes from bench/worker-memory.js.
 */
window.bigWllamaLoad = async ({ url, nCtx }) => {
  const queryMemory = watchWorkerMemory('big-memory');
  const lines = [];
  const keep = (level) => (...args) => {
    const line = args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
    lines.push(line);
    if (level === 'error' || level === 'warn' || /error|failed|model buffer|kv_cache|compute buffer/i.test(line)) log(`wllama ${level}: ${line.slice(0, 300)}`);
  };
  const logger = { debug: keep('debug'), log: keep('log'), warn: keep('warn'), error: keep('error') };
  const t0 = now();
  let fetchMs = null;
  let blobBytes = null;
  let wllama = null;
  const failed = async (e, step) => {
    const why = lines.filter((l) => /error|failed|unknown|missing|wrong|alloc/i.test(l)).slice(-6);
    const message = `${step}: ${e?.message ?? e}${why.length ? `: ${why.join(' | ')}` : ''}`;
    log(`wllama: failed after ${(now() - t0).toFixed(0)} ms: ${message}`);
    const memory = wllama ? await queryMemory() : null;
    await wllama?.exit().catch(() => {});
    return { load_ms: now() - t0, fetch_ms: fetchMs, blob_bytes: blobBytes, error: { message }, wasm_memory: memory, log: lines.slice(-40) };
  };
  log(`wllama: loading ${url}`);
  const { Wllama } = await import('/wllama/esm/index.js');
  let file;
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const blob = await response.blob();
    blobBytes = blob.size;
    file = new File([blob], url.split('/').pop());
    fetchMs = now() - t0;
    log(`wllama: fetched ${MB(blobBytes)} into a Blob in ${fetchMs.toFixed(0)} ms`);
  } catch (e) {
    return failed(e, 'fetching the file into a Blob');
  }
  try {
    wllama = new Wllama({ default: '/wllama/esm/wasm/wllama.wasm' }, { logger });
    await wllama.loadModel([file], { n_ctx: nCtx, n_threads: 1, n_gpu_layers: 0, n_parallel: 1, log_level: 2 });
  } catch (e) {
    return failed(e, 'loadModel');
  }
  const ms = now() - t0;
  const memory = await queryMemory();
  wl = { wllama, lines, queryMemory };
  log(`wllama: loaded in ${ms.toFixed(0)} ms; worker wasm memory ${memory === null ? '?' : MB(memory)}`);
  return {
    load_ms: ms, fetch_ms: fetchMs, blob_bytes: blobBytes, wasm_memory: memory,
    info: { multithread: wllama.isMultithread(), threads: wllama.getNumThreads() },
    memory_log: lines.filter((l) => /model buffer|KV buffer|kv_cache|compute buffer|n_ctx/i.test(l)).slice(0, 20),
  };
};

/** One greedy token of `prompt` on the loaded wllama: its wall time and text, and the worker's wasm memory after. */
window.bigWllamaToken = async ({ prompt }) => {
  const { wllama, queryMemory } = wl;
  const t0 = now();
  try {
    const r = await wllama.createCompletion({ prompt, max_tokens: 1, temperature: 0, cache_prompt: false });
    const ms = now() - t0;
    const text = r.choices?.[0]?.text ?? null;
    log(`wllama: one token in ${ms.toFixed(0)} ms: ${JSON.stringify(text)}`);
    return { ms, text, usage: r.usage, timings: r.timings ?? null, wasm_memory: await queryMemory() };
  } catch (e) {
    return { ms: now() - t0, error: errorOf(e), wasm_memory: await queryMemory() };
  }
};

window.bigReady = true;
