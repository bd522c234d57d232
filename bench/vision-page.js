// The browser half of the image-encode benchmark (driven by bench/vision.mjs in headless Chromium; issue 40).
// kiln (`visionKiln*`: its CPU backend at `threads`, or WebGPU) and wllama (`visionWllama*`: llama.cpp's CPU
// path at `threads`) load the same GGUF pair (language model + mmproj) over HTTP, then answer one-image chats
// (the same PNG bytes, the same text, `max_tokens` 1, greedy, no prompt reuse); each run reports:
//
// - encode_ms: kiln: `onImages`' `encodeMs` (from the request to the image rows on the device: the PNG
//   decode, the preprocessing and the vision tower + projector of every tile); wllama: the sum of llama.cpp's
//   "<kind> slice encoded in N ms" log lines (mtmd_helper_eval_chunk_single: mtmd_encode_chunk alone) where
//   the build logs them, else (wllama 3.13) the sum over the image's chunks of the time before each chunk's
//   "decoding image batch" line (see visionWllamaRun);
// - tiles: encoder passes (kiln: image rows / rows per tile; llama.cpp: image chunks decoded);
// - ttft_ms: from the call to the first chunk that carries a choice (`max_tokens` 1: the image encoded, the
//   whole prompt prefilled and one token sampled); end_ms: to the end of the stream.
//
// Timings only: nothing here asserts on them.

const now = () => performance.now();
const log = (...args) => console.log('[vision]', ...args);

const b64ToBytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));

/** Drains a stream of chat chunks; times relative to `t0`. */
async function drain(iter, t0) {
  let first = null;
  let firstContent = null;
  let usage = null;
  let text = '';
  let timings = null;
  for await (const chunk of iter) {
    const t = now() - t0;
    if (chunk.choices?.length) {
      first ??= t;
      const d = chunk.choices[0].delta?.content;
      if (d) {
        firstContent ??= t;
        text += d;
      }
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.timings) timings = chunk.timings;
  }
  return { first, firstContent, end: now() - t0, usage, text, timings };
}

// Each engine in three steps, so that the driver can keep a kiln page and a wllama page loaded side by side
// and alternate their runs (both then share whatever else the machine is doing alike): `...Load(args)`,
// `...Run({ warm, index })` any number of times, `...Done()`. `visionKiln(args)` / `visionWllama(args)` do it
// all for one configuration alone.
let kiln = null;

window.visionKilnLoad = async ({ device, threads, lm, mmproj, image, prompt, maxTokens, rowsPerTile, detail, chatTemplate }) => {
  const label = device === 'cpu' ? `kiln cpu (threads ${threads})` : `kiln ${device}`;
  log(`${label}: loading ${lm} + ${mmproj}`);
  const t0 = now();
  const { Engine } = await import('/pkg/index.js');
  const seen = new Set();
  const engine = await Engine.load({
    model: 'bench',
    source: { model: lm, mmproj },
    device,
    threads: device === 'cpu' ? threads : undefined,
    chatTemplate,
    // Every run prefills (and encodes) cold.
    prefixCacheBytes: 0,
    onProgress: ({ phase }) => {
      if (!seen.has(phase)) log(`${label}: ${phase}`);
      seen.add(phase);
    },
  });
  const loadMs = now() - t0;
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms on ${JSON.stringify(engine.device)}; vision ${JSON.stringify(engine.vision)}`);
  kiln = { engine, label, url: `data:image/png;base64,${image}`, prompt, maxTokens, rowsPerTile, detail };
  return { engine: 'kiln', device: { ...engine.device, build: engine.threads }, vision: engine.vision, load_ms: loadMs };
};

window.visionKilnRun = async ({ warm, index }) => {
  const { engine, label, url, prompt, maxTokens, rowsPerTile, detail } = kiln;
  let info = null;
  const t = now();
  const iter = await engine.chat.completions.create({
    model: 'bench',
    // `detail: 'low'`: SmolVLM's global image alone, one tile (kiln's preprocessing without splitting)
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: detail ? { url, detail } : { url } }, { type: 'text', text: prompt }] }],
    max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  }, { onImages: (x) => { info = { ...x, at_ms: now() - t }; } });
  const r = await drain(iter, t);
  const tiles = info ? Math.round(info.tokens / rowsPerTile) : null;
  const run = {
    encode_ms: info?.encodeMs ?? null, detail: detail ?? null, tiles, images: info?.images ?? null, image_tokens: info?.tokens ?? null,
    ttft_ms: r.first, first_content_ms: r.firstContent, end_ms: r.end,
    prompt_tokens: r.usage?.prompt_tokens ?? null, completion_tokens: r.usage?.completion_tokens ?? null,
  };
  log(`${label} ${warm ? 'warm-up' : 'run'} ${index}: encode ${run.encode_ms?.toFixed(0)} ms (${tiles} tiles), ttft ${r.first?.toFixed(0)} ms, ${run.prompt_tokens} prompt tokens`);
  return run;
};

window.visionKilnDone = async () => {
  const { engine } = kiln;
  const glue = await import(engine.threads?.build === 'threads' ? '/pkg/threads/kiln.js' : '/pkg/kiln.js');
  const wasm = await glue.default();
  const out = { wasm_memory_bytes: wasm.memory?.buffer?.byteLength ?? null, model_memory: engine.memory };
  await engine.unload();
  kiln = null;
  return out;
};

let wl = null;

window.visionWllamaLoad = async ({ threads, lm, mmproj, image, prompt, maxTokens, nCtx, backend = 'cpu', tilesHint, logLevel = 2 }) => {
  const lines = [];
  const keep = (level) => (...args) => {
    const text = args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
    lines.push({ t: now(), level, text });
    if (/slice|encod|decod|image|mtmd|clip|error|warn/i.test(text) && !/^\s*$/.test(text)) log(`wllama ${level}: ${text.slice(0, 300)}`);
  };
  const logger = { debug: keep('debug'), log: keep('log'), warn: keep('warn'), error: keep('error') };
  const label = `wllama ${backend} (threads ${threads})`;
  log(`${label}: loading ${lm} + ${mmproj}`);
  const t0 = now();
  const { Wllama } = await import('/wllama/esm/index.js');
  const wllama = new Wllama({ default: '/wllama/esm/wasm/wllama.wasm' }, { logger });
  const files = [];
  for (const u of [lm, mmproj]) {
    const response = await fetch(u);
    if (!response.ok) throw new Error(`${u}: HTTP ${response.status}`);
    files.push(new File([await response.blob()], u.split('/').pop()));
  }
  await wllama.loadModel(files, {
    n_ctx: nCtx, n_threads: threads, n_gpu_layers: backend === 'webgpu' ? 99999 : 0, n_parallel: 1,
    log_level: logLevel, // 2, INFO: mtmd's decode lines; 1, DEBUG: the logits run's prompt
  });
  const loadMs = now() - t0;
  const info = {
    backend, multithread: wllama.isMultithread(), threads: wllama.getNumThreads(),
    image_input: wllama.supportInputModality('image'),
  };
  log(`${label}: loaded in ${loadMs.toFixed(0)} ms ${JSON.stringify(info)}`);
  wl = { wllama, lines, label, bytes: b64ToBytes(image), prompt, maxTokens, tilesHint, runLogs: [] };
  return { engine: 'wllama', device: info, load_ms: loadMs };
};

window.visionWllamaRun = async ({ warm, index }) => {
  const { wllama, lines, label, bytes, prompt, maxTokens, tilesHint, runLogs } = wl;
  const from = lines.length;
  const t = now();
  const iter = await wllama.createChatCompletion({
    messages: [{ role: 'user', content: [{ type: 'image', data: bytes.slice().buffer }, { type: 'text', text: prompt }] }],
    max_tokens: maxTokens, temperature: 0, stream: true, cache_prompt: false,
  });
  const r = await drain(iter, t);
  const mine = lines.slice(from).map((l) => ({ ...l, t: l.t - t }));
  // llama.cpp's own encode time (mtmd-helper.cpp's "image slice encoded in N ms"), when this build logs it.
  const encoded = mine.map((l) => /(\w+) slice encoded in (\d+) ms/.exec(l.text)).filter(Boolean);
  // Else (wllama 3.13 logs only the decode lines): llama.cpp encodes each tile as its own chunk, then decodes
  // its rows into the LM ("decoding image batch 1/N ..." .. "image decoded (batch N/N) in M ms"), tile after
  // tile. A tile's encode is the gap from the end of the previous tile's decode (the request, for the first:
  // so it also counts parsing the request, the PNG decode, the preprocessing and the text before the image,
  // as kiln's encodeMs counts its PNG decode and preprocessing) to the start of its own decode.
  const gaps = [];
  let prevEnd = 0;
  let decodeMs = 0;
  for (const l of mine) {
    let m = /decoding \w+ batch 1\/\d+/.exec(l.text);
    if (m) gaps.push(l.t - prevEnd);
    m = /\w+ decoded \(batch (\d+)\/(\d+)\) in (\d+) ms/.exec(l.text);
    if (m) {
      decodeMs += Number(m[3]);
      if (m[1] === m[2]) prevEnd = l.t;
    }
  }
  const run = {
    encode_ms: encoded.length ? encoded.reduce((s, x) => s + Number(x[2]), 0) : gaps.length ? gaps.reduce((s, x) => s + x, 0) : null,
    encode_source: encoded.length ? 'log: slice encoded in' : gaps.length ? 'log timestamps: sum of the gaps before each image chunk\'s decode' : null,
    tile_encode_ms: encoded.length ? encoded.map((x) => Number(x[2])) : gaps,
    image_decode_ms: decodeMs,
    tiles: encoded.length || gaps.length || tilesHint || null,
    ttft_ms: r.first, first_content_ms: r.firstContent, end_ms: r.end,
    prompt_tokens: r.timings?.prompt_n ?? r.usage?.prompt_tokens ?? null,
    engine_timings: r.timings,
  };
  log(`${label} ${warm ? 'warm-up' : 'run'} ${index}: encode ${run.encode_ms?.toFixed?.(0)} ms over ${run.tiles} tiles [${run.tile_encode_ms.map((x) => x.toFixed(0)).join(', ')}], LM decode of the image rows ${decodeMs} ms, ttft ${r.first?.toFixed(0)} ms`);
  runLogs.push(mine.filter((l) => !/^\s*$/.test(l.text)).slice(0, 80));
  return run;
};

window.visionWllamaDone = async () => {
  const { wllama, lines, runLogs } = wl;
  await wllama.exit();
  wl = null;
  return { run_logs: runLogs, load_log: lines.slice(0, 400).map((l) => l.text) };
};

// The logits comparison: one non-streamed chat with `logprobs` (the top `top` tokens of the first
// generated position, as each engine reports them: kiln from its logits, llama.cpp's server code from
// the softmax of its logits over the whole vocabulary), and the prompt's token count.
const topOf = (response) => response.choices?.[0]?.logprobs?.content?.[0]?.top_logprobs?.map(({ id, token, logprob }) => ({ id, token, logprob })) ?? null;

window.visionKilnLogits = async (args) => {
  const out = await window.visionKilnLoad(args);
  const { engine, url, prompt } = kiln;
  const r = await engine.chat.completions.create({
    model: 'bench',
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: prompt }] }],
    max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: args.top,
  });
  await window.visionKilnDone();
  return { ...out, prompt_tokens: r.usage?.prompt_tokens ?? null, content: r.choices?.[0]?.message?.content ?? null, top_logprobs: topOf(r) };
};

window.visionWllamaLogits = async (args) => {
  const out = await window.visionWllamaLoad({ ...args, logLevel: 1 });
  const { wllama, bytes, prompt, lines } = wl;
  const r = await wllama.createChatCompletion({
    messages: [{ role: 'user', content: [{ type: 'image', data: bytes.slice().buffer }, { type: 'text', text: prompt }] }],
    max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: args.top, cache_prompt: false,
  });
  const log = lines.map((l) => l.text).filter((t) => /prompt|token|templ|<image>|fake_token/i.test(t)).slice(0, 200);
  await window.visionWllamaDone();
  return {
    ...out, log, prompt_tokens: r.timings?.prompt_n ?? r.usage?.prompt_tokens ?? null,
    content: r.choices?.[0]?.message?.content ?? null, top_logprobs: topOf(r),
  };
};

/** One configuration alone: load, `warmup` + `runs` runs, done. */
async function alone(prefix, args) {
  const out = await window[`${prefix}Load`](args);
  out.runs = [];
  for (let i = 0; i < args.warmup + args.runs; i++) {
    const warm = i < args.warmup;
    const run = await window[`${prefix}Run`]({ warm, index: warm ? i + 1 : i + 1 - args.warmup });
    if (!warm) out.runs.push(run);
  }
  return { ...out, ...(await window[`${prefix}Done`]()) };
}
window.visionKiln = (args) => alone('visionKiln', args);
window.visionWllama = (args) => alone('visionWllama', args);

window.visionReady = true;
