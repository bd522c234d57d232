// The image-encode benchmark of issue 40 in headless Debian Chromium (WebGPU on SwiftShader;
// tests/e2e/browser.mjs): kiln (CPU backend at 1 and 2 threads, WebGPU) beside wllama (llama.cpp in wasm, its
// CPU path at 1 and 2 threads) on the same GGUF pairs, the same PNG and the same one-image chat. Each
// configuration runs in a fresh browser context (its own wasm instance); bench/vision-page.js does the work.
//
//   node bench/vision.mjs [--dir DIR] [--out OUT.json] [--models smolvlm,gemma3 (none: the logits alone)]
//                         [--configs kiln-cpu-1,kiln-cpu-2,kiln-webgpu,wllama-cpu-1,wllama-cpu-2]
//                         [--runs 3] [--warmup 1] [--gemma3-runs N] [--gemma3-warmup N]
//                         [--webgpu-runs N] [--webgpu-warmup N] [--webgpu-detail low|auto]
//                         [--quiet-wait S (900)] [--quiet-cores C (0.25)] [--mmproj f16|q8_0]
//                         [--table OUT.json ...] (print the tables of earlier runs and exit)
//                         [--smolvlm-image 2048x512] [--gemma3-image 896x896] [--root DIR] [--pkg DIR]
//                         [--no-logits] (skip the logits comparison)
//
// DIR holds the files of tests/fixtures/make_vision_bench_files.py (default $KILN_CACHE/vision-bench).
// kiln-webgpu runs for SmolVLM only (SwiftShader is a CPU emulation: Gemma 3's 896² encode would take
// far too long), and by default on one tile (`detail: 'low'`, the global image alone: SwiftShader took over
// 40 minutes without finishing the five tiles of the default image on the 2-core machine). The SmolVLM image: its checkpoint resizes an image to a longest edge of 2048 and cuts it into
// 512² tiles plus a global one (kiln as transformers, llama.cpp's mtmd alike), so no image is one tile; the
// default 2048×512 is the fewest: 4 tiles + the global image = 5 encoder passes in both. Times per tile are
// the encode divided by that count. Gemma 3: one 896² pass for any image.
//
// Then the logits comparison (see the end of this file): both engines on an image neither resizes.
//
// `cargo xtask bench --vision` writes the files and the package, then runs this. Prints tables and writes
// every run to OUT (default target/bench/vision.json). Nothing asserts on the figures.
import { closeSync, mkdirSync, openSync, readFileSync, readSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import { launch } from '../tests/e2e/browser.mjs';
import { cpuSince, cpuSnapshot, quiet as quietFor } from './load.mjs';
import { args, opt, paths } from './options.mjs';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { root, cache } = paths(here);
const dir = opt('dir', join(cache, 'vision-bench'));
const outPath = opt('out', join(root, 'target', 'bench', 'vision.json'));
const pkgDir = opt('pkg', join(root, 'pkg'));
const runs = Number(opt('runs', 3));
const warmup = Number(opt('warmup', 1));
const models = opt('models', 'smolvlm,gemma3').split(',').filter((m) => m && m !== 'none');
const configs = opt('configs', 'kiln-cpu-1,kiln-cpu-2,kiln-webgpu,wllama-cpu-1,wllama-cpu-2').split(',');
const size = (s) => s.split('x').map(Number);
// `--mmproj q8_0`: the mmproj files written with `make_vision_bench_files.py --mmproj-type q8_0` instead
const mmprojType = opt('mmproj', 'f16');
const mmprojFile = (f) => (mmprojType === 'f16' ? f : f.replace('-f16.gguf', `-${mmprojType}.gguf`));
// Before each run, wait up to this many seconds for the others' CPU use to fall below `quietCores` cores
// (over a 5 s window): on a shared 2-core machine a compiler next door halves everything (0: never wait).
const quietWait = Number(opt('quiet-wait', 900));
const quietCores = Number(opt('quiet-cores', 0.25));

const MODELS = {
  smolvlm: {
    name: 'SmolVLM-256M-Instruct shape (SigLIP-B/16 @ 512, 12 layers; LM SmolLM2-135M shape)',
    lm: 'smolvlm-256m-bench.gguf', mmproj: mmprojFile('smolvlm-256m-bench-mmproj-f16.gguf'),
    image: size(opt('smolvlm-image', '2048x512')), rowsPerTile: 64, webgpu: true, runs, warmup,
    webgpuRuns: Number(opt('webgpu-runs', runs)), webgpuWarmup: Number(opt('webgpu-warmup', warmup)),
    // SwiftShader takes minutes per 512² tile: by default the WebGPU row encodes one (`detail: 'low'`)
    webgpuDetail: opt('webgpu-detail', 'low') === 'auto' ? undefined : opt('webgpu-detail', 'low'),
    // kiln and llama.cpp: longest edge to 2048, then 512² tiles + the global image
    tiles: ([w, h]) => {
      const long = 2048;
      const [rw, rh] = w >= h ? [long, Math.floor(long / (w / h))] : [Math.floor(long * (w / h)), long];
      const n = Math.ceil(rw / 512) * Math.ceil((rh + (rh % 2)) / 512);
      return n > 1 ? n + 1 : 1;
    },
  },
  // the committed tiny fixture pair: a seconds-long check of this script, not a benchmark
  tiny: {
    name: 'tests/fixtures/gguf/tiny-smolvlm (a check of the script)',
    lm: '/fixtures/gguf/tiny-smolvlm.gguf', mmproj: '/fixtures/gguf/tiny-smolvlm-mmproj.gguf',
    image: size(opt('smolvlm-image', '2048x512')), rowsPerTile: 4, webgpu: true, runs, warmup,
    webgpuRuns: runs, webgpuWarmup: warmup, webgpuDetail: 'low',
    // its ChatML template cannot take content parts; kiln gets SmolVLM's (make_vision_bench_files.py's)
    chatTemplate: "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
    tiles: ([w, h]) => {
      const [rw, rh] = w >= h ? [128, Math.floor(128 / (w / h))] : [Math.floor(128 * (w / h)), 128];
      const n = Math.ceil(rw / 64) * Math.ceil((rh + (rh % 2)) / 64);
      return n > 1 ? n + 1 : 1;
    },
  },
  gemma3: {
    name: 'Gemma 3 4B vision tower shape (SigLIP so400m/14 @ 896, 27 layers; LM 2 layers of width 2560)',
    lm: 'gemma3-4b-vision-bench.gguf', mmproj: mmprojFile('gemma3-4b-vision-bench-mmproj-f16.gguf'),
    image: size(opt('gemma3-image', '896x896')), rowsPerTile: 256, webgpu: false,
    runs: Number(opt('gemma3-runs', runs)), warmup: Number(opt('gemma3-warmup', warmup)),
    tiles: () => 1,
  },
};

/**
 * A deterministic RGB PNG: smooth gradients with some structure (no alpha); with `rowsOnly`, every row one
 * colour (a function of y alone).
 */
function png(width, height, { rowsOnly = false } = {}) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, 'ascii');
    data.copy(out, 8);
    out.writeUInt32BE(crc(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    const row = y * (width * 3 + 1);
    raw[row] = 0;
    for (let x = 0; x < width; x++) {
      const i = row + 1 + x * 3;
      if (rowsOnly) {
        raw[i] = Math.floor((255 * y) / height);
        raw[i + 1] = (y * 37) & 255;
        raw[i + 2] = Math.floor(y / 16) % 2 ? 200 : (y * 7) & 255;
        continue;
      }
      raw[i] = Math.floor((255 * x) / width);
      raw[i + 1] = Math.floor((255 * y) / height);
      raw[i + 2] = (Math.floor(x / 32) + Math.floor(y / 32)) % 2 ? 200 : (x * y) & 255;
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0)),
  ]);
}

// The table: a row per configuration; kiln's speed-up = llama.cpp's time / kiln's at equal threads.
function printTable(report) {
  const f = (x, d = 0) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));
  for (const [key, m] of Object.entries(report.models)) {
    console.log(`\n${m.name}\n  image ${m.image.width}x${m.image.height}, ${m.warmup} warm-up + ${m.runs} runs: medians (fastest run); others' cores: what other processes used during each run`);
    const head = ['configuration', 'encode ms', 'tiles', 'ms / tile (min)', 'TTFT ms (min)', 'load ms', 'runs', 'others\' cores per run', 'kiln speed-up per tile / TTFT'];
    const rows = [];
    for (const [c, r] of Object.entries(m.results)) {
      if (r.error || !r.median) {
        rows.push([c, `error: ${r.error ?? 'no runs'}`, '', '', '', '', '', '', '']);
        continue;
      }
      let speed = '';
      const [engine, , threads] = c.split('-');
      if (engine === 'kiln' && threads) {
        const w = m.results[`wllama-cpu-${threads}`];
        if (w?.median) {
          speed = `${f(w.median.encode_ms_per_tile / r.median.encode_ms_per_tile, 2)}x / ${f(w.median.ttft_ms / r.median.ttft_ms, 2)}x`
            + ` (min: ${f(w.min.encode_ms_per_tile / r.min.encode_ms_per_tile, 2)}x / ${f(w.min.ttft_ms / r.min.ttft_ms, 2)}x)`;
        }
      }
      const others = r.runs.map((x) => (x.cpu ? f(x.cpu.cpu_s_others / x.cpu.wall_s, 2) : '-')).join(' ');
      rows.push([c, f(r.median.encode_ms), f(r.median.tiles), `${f(r.median.encode_ms_per_tile)} (${f(r.min.encode_ms_per_tile)})`,
        `${f(r.median.ttft_ms)} (${f(r.min.ttft_ms)})`, f(r.load_ms), String(r.runs.length), others, speed]);
    }
    const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
    console.log(head.map((h, i) => h.padEnd(widths[i])).join(' | '));
    console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
    for (const r of rows) console.log(r.map((v, i) => String(v).padEnd(widths[i])).join(' | '));
  }
}

/**
 * The largest difference of a shared top log-probability this bench accepts between kiln and llama.cpp with
 * an f16 mmproj and a Q8_0 language model: llama.cpp rounds the encoder's activations to f16 for its f16
 * matrices and quantizes the language model's to 8 bits for its Q8_0 products, kiln keeps them in f32.
 */
const LOGPROB_TOLERANCE = 0.05;

/**
 * The two engines' top log-probabilities compared over the tokens both list (by their text): the largest
 * and the mean absolute difference, how many are shared, and whether both put the same token first.
 */
function compareTop(k, w, vocab) {
  if (!k?.top_logprobs || !w?.top_logprobs) return { error: 'no logprobs from ' + (k?.top_logprobs ? 'wllama' : 'kiln') };
  // kiln's logprobs are OpenAI's (a token's text); llama.cpp's carry its id: kiln's text looked up in the
  // GGUF's vocabulary (a text that is not one token's stays unmatched).
  if (vocab) for (const t of k.top_logprobs) if (!Number.isInteger(t.id) && vocab.has(t.token)) t.id = vocab.get(t.token);
  const byId = k.top_logprobs.every((t) => Number.isInteger(t.id)) && w.top_logprobs.every((t) => Number.isInteger(t.id));
  const key = (t) => (byId ? t.id : t.token);
  const theirs = new Map();
  for (const t of w.top_logprobs) if (!theirs.has(key(t))) theirs.set(key(t), t.logprob);
  const diffs = [];
  for (const t of k.top_logprobs) {
    const l = theirs.get(key(t));
    if (l !== undefined) diffs.push({ token: t.token, id: t.id, kiln: t.logprob, llama_cpp: l, diff: t.logprob - l });
  }
  const abs = diffs.map((d) => Math.abs(d.diff));
  return {
    prompt_tokens: { kiln: k.prompt_tokens, llama_cpp: w.prompt_tokens },
    shared: diffs.length, listed: { kiln: k.top_logprobs.length, llama_cpp: w.top_logprobs.length },
    matched_by: byId ? 'token id' : 'token text',
    same_first: key(k.top_logprobs[0] ?? {}) === key(w.top_logprobs[0] ?? {}),
    max_abs_diff: abs.length ? Math.max(...abs) : null,
    tolerance: LOGPROB_TOLERANCE,
    within: abs.length > 0 && Math.max(...abs) <= LOGPROB_TOLERANCE,
    mean_abs_diff: abs.length ? abs.reduce((a, b) => a + b, 0) / abs.length : null,
    first: { kiln: k.top_logprobs[0], llama_cpp: w.top_logprobs[0] },
    tokens: diffs,
  };
}

/** `tokenizer.ggml.tokens` of a GGUF file as a map from each token's text to its id (the first id). */
function ggufVocab(path) {
  const fd = openSync(path, 'r');
  const buf = Buffer.alloc(16 << 20);
  const n = readSync(fd, buf, 0, buf.length, 0);
  closeSync(fd);
  let at = 0;
  const u32 = () => { const v = buf.readUInt32LE(at); at += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(at)); at += 8; return v; };
  const str = () => { const len = u64(); const v = buf.toString('utf8', at, at + len); at += len; return v; };
  const SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (type) => {
    if (type === 8) str();
    else if (type === 9) {
      const [t, count] = [u32(), u64()];
      for (let i = 0; i < count; i++) skip(t);
    } else at += SIZES[type];
  };
  if (buf.toString('ascii', 0, 4) !== 'GGUF') return null;
  at = 8;
  u64();
  const kvs = u64();
  for (let i = 0; i < kvs && at < n; i++) {
    const key = str();
    const type = u32();
    if (key === 'tokenizer.ggml.tokens' && type === 9) {
      const [, count] = [u32(), u64()];
      const vocab = new Map();
      for (let id = 0; id < count; id++) {
        const t = str();
        if (!vocab.has(t)) vocab.set(t, id);
      }
      return vocab;
    }
    skip(type);
  }
  return null;
}

function printLogits(l) {
  const c = l.comparison;
  console.log(`\nLogits of the first generated position, SmolVLM-256M shape, a ${l.image.width}x${l.image.height} image of one colour per row (the same pixels in both), kiln CPU vs llama.cpp (wllama) CPU:`);
  if (c.error) {
    console.log(`  ${c.error}`);
    return;
  }
  console.log(`  prompt tokens: kiln ${c.prompt_tokens.kiln}, llama.cpp ${c.prompt_tokens.llama_cpp}`);
  console.log(`  top-${l.top} tokens listed by both (by ${c.matched_by}): ${c.shared}; the same first token: ${c.same_first} (kiln ${JSON.stringify(c.first.kiln)}, llama.cpp ${JSON.stringify(c.first.llama_cpp)})`);
  console.log(`  |log-prob difference| over those: max ${c.max_abs_diff?.toFixed(4)}, mean ${c.mean_abs_diff?.toFixed(4)}: ${c.within ? 'within' : 'NOT within'} the tolerance ${c.tolerance}`);
}

const median = (xs) => {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
};
const summarize = (r, expectTiles) => {
  if (!r?.runs?.length) return;
  r.median = {
    encode_ms: median(r.runs.map((x) => x.encode_ms)),
    encode_ms_per_tile: median(r.runs.map((x) => x.encode_ms / (x.tiles ?? expectTiles))),
    ttft_ms: median(r.runs.map((x) => x.ttft_ms)),
    tiles: median(r.runs.map((x) => x.tiles)),
    others_cpu_s: median(r.runs.map((x) => x.cpu?.cpu_s_others)),
  };
  // On a shared machine the fastest run is the least disturbed one: reported beside the medians.
  r.min = {
    encode_ms: Math.min(...r.runs.map((x) => x.encode_ms)),
    encode_ms_per_tile: Math.min(...r.runs.map((x) => x.encode_ms / (x.tiles ?? expectTiles))),
    ttft_ms: Math.min(...r.runs.map((x) => x.ttft_ms)),
  };
};

// `--table FILE...`: print the tables of earlier runs' JSON (several files: their models side by side).
if (args.includes('--table')) {
  const files = args.slice(args.indexOf('--table') + 1).filter((x) => !x.startsWith('--'));
  const merged = { models: {} };
  for (const file of files) {
    const r = JSON.parse(readFileSync(file, 'utf8'));
    for (const [k, m] of Object.entries(r.models)) {
      for (const x of Object.values(m.results)) summarize(x, m.expected_tiles);
      merged.models[k] = m;
    }
  }
  printTable(merged);
  process.exit(0);
}

const mounts = [
  ['/pkg/', pkgDir],
  ['/models/', dir],
  ['/bench/', join(root, 'bench')],
  ['/fixtures/', join(root, 'tests', 'fixtures')],
  ['/wllama/', join(root, 'node_modules', '@wllama', 'wllama')],
];
const { base, server } = await serve(mounts);
console.error(`vision bench: serving on ${base}; files from ${dir}; pkg ${pkgDir}; ${models.map((k) => `${k}: ${MODELS[k].warmup} warm-up + ${MODELS[k].runs} runs`).join(', ')}`);

/** Waits for a quieter machine before a timed run (bench/load.mjs). */
const quiet = (name) => quietFor(`vision bench: ${name}`, { wait: quietWait, cores: quietCores });

const browser = await launch();
async function inFreshPage(name, fn, fnArgs) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('console', (m) => console.error(`  ${name} | ${m.text()}`));
  page.on('pageerror', (e) => console.error(`  ${name} | page error: ${e.message}`));
  const q = quietWait > 0 ? await quiet(name) : null;
  const started = Date.now();
  const cpu0 = cpuSnapshot();
  try {
    await page.goto(`${base}/bench/vision.html`);
    await page.waitForFunction(() => window.visionReady === true);
    const result = await page.evaluate(([f, a]) => window[f](a), [fn, fnArgs]);
    result.cpu = cpuSince(cpu0);
    result.quiet = q;
    console.error(`vision bench: ${name} done in ${((Date.now() - started) / 1000).toFixed(0)} s; CPU ${JSON.stringify(result.cpu)}`);
    return result;
  } catch (e) {
    console.error(`vision bench: ${name} failed: ${e.message}`);
    return { error: e.message.split('\n')[0] };
  } finally {
    await context.close();
  }
}


/**
 * kiln and wllama at `threads` threads, paired: each in its own fresh browser context, both loaded, then their
 * runs alternate (kiln first on even rounds, wllama first on odd ones), so that whatever else the machine does
 * meanwhile weighs on both alike. Each run carries the CPU time others took during it.
 */
async function paired(key, kArgs, wArgs, { warmup: nWarm, runs: nRuns }) {
  const sides = [
    { name: `${key} kiln-cpu-${kArgs.threads}`, prefix: 'visionKiln', args: kArgs },
    { name: `${key} wllama-cpu-${wArgs.threads}`, prefix: 'visionWllama', args: wArgs },
  ];
  const cpu0 = cpuSnapshot();
  try {
    for (const s of sides) {
      s.context = await browser.newContext();
      s.page = await s.context.newPage();
      s.page.on('console', (m) => console.error(`  ${s.name} | ${m.text()}`));
      s.page.on('pageerror', (e) => console.error(`  ${s.name} | page error: ${e.message}`));
      await s.page.goto(`${base}/bench/vision.html`);
      await s.page.waitForFunction(() => window.visionReady === true);
      try {
        s.result = await s.page.evaluate(([f, a]) => window[f](a), [`${s.prefix}Load`, s.args]);
        s.result.runs = [];
      } catch (e) {
        console.error(`vision bench: ${s.name} failed to load: ${e.message}`);
        s.result = { error: e.message.split('\n')[0] };
      }
    }
    for (let i = 0; i < nWarm + nRuns; i++) {
      const warm = i < nWarm;
      const order = i % 2 ? [...sides].reverse() : sides;
      for (const s of order) {
        if (s.result.error) continue;
        const q = quietWait > 0 ? await quiet(s.name) : null;
        const c = cpuSnapshot();
        try {
          const run = await s.page.evaluate(([f, a]) => window[f](a), [`${s.prefix}Run`, { warm, index: warm ? i + 1 : i + 1 - nWarm }]);
          run.cpu = cpuSince(c);
          run.quiet = q;
          run.round = i + 1;
          if (!warm) s.result.runs.push(run);
          console.error(`vision bench: ${s.name} ${warm ? 'warm-up' : 'run'}: encode ${run.encode_ms?.toFixed(0)} ms, ttft ${run.ttft_ms?.toFixed(0)} ms; others' CPU ${run.cpu.cpu_s_others?.toFixed(0)} s in ${run.cpu.wall_s.toFixed(0)} s`);
        } catch (e) {
          console.error(`vision bench: ${s.name} failed: ${e.message}`);
          s.result = { ...s.result, error: e.message.split('\n')[0] };
        }
      }
    }
    for (const s of sides) {
      if (s.result.error) continue;
      Object.assign(s.result, await s.page.evaluate((f) => window[f](), `${s.prefix}Done`));
    }
    // before the pages close: their renderers are still this bench's processes
    const cpu = cpuSince(cpu0);
    for (const s of sides) s.result.cpu = cpu;
  } finally {
    for (const s of sides) await s.context?.close();
  }
  return sides.map((s) => s.result);
}

const prompt = 'Describe this image.';
const report = {
  chromium: browser.version(),
  wllama_version: JSON.parse(readFileSync(join(root, 'node_modules', '@wllama', 'wllama', 'package.json'), 'utf8')).version,
  cores: (await import('node:os')).cpus().length,
  pkg: { dir: pkgDir, kiln_bg_wasm_mtime: statSync(join(pkgDir, 'kiln_bg.wasm')).mtime, threads_wasm_mtime: statSync(join(pkgDir, 'threads', 'kiln_bg.wasm')).mtime },
  models: {},
};
for (const key of models) {
  const m = MODELS[key];
  const image = png(...m.image);
  const common = {
    lm: m.lm.startsWith('/') ? m.lm : `/models/${m.lm}`, mmproj: m.mmproj.startsWith('/') ? m.mmproj : `/models/${m.mmproj}`, image: image.toString('base64'), prompt,
    runs: m.runs, warmup: m.warmup, maxTokens: 1,
  };
  const expectTiles = m.tiles(m.image);
  const kilnArgs = (device, threads) => ({ ...common, device, threads, rowsPerTile: m.rowsPerTile, chatTemplate: m.chatTemplate });
  const wllamaArgs = (threads) => ({ ...common, backend: 'cpu', threads, nCtx: 4096, tilesHint: expectTiles });
  const results = {};
  const done = new Set();
  for (const c of configs) {
    if (done.has(c)) continue;
    const [engine, device, threads] = c.split('-');
    if (engine === 'kiln' && device === 'webgpu' && !m.webgpu) continue;
    const partner = engine === 'kiln' ? `wllama-cpu-${threads}` : `kiln-cpu-${threads}`;
    if (device === 'cpu' && configs.includes(partner) && !done.has(partner)) {
      const t = Number(threads);
      console.error(`\nvision bench: ${key} kiln-cpu-${t} + wllama-cpu-${t}, paired`);
      const [k, w] = await paired(key, kilnArgs('cpu', t), wllamaArgs(t), m);
      results[`kiln-cpu-${t}`] = k;
      results[`wllama-cpu-${t}`] = w;
      done.add(c).add(partner);
      continue;
    }
    console.error(`\nvision bench: ${key} ${c}`);
    if (engine === 'kiln') {
      const webgpu = device === 'webgpu';
      results[c] = await inFreshPage(`${key} ${c}`, 'visionKiln', {
        ...kilnArgs(device, webgpu ? undefined : Number(threads)),
        ...(webgpu ? { runs: m.webgpuRuns, warmup: m.webgpuWarmup, detail: m.webgpuDetail } : {}),
      });
    } else {
      results[c] = await inFreshPage(`${key} ${c}`, 'visionWllama', wllamaArgs(Number(threads)));
    }
    done.add(c);
  }
  for (const r of Object.values(results)) summarize(r, expectTiles);
  report.models[key] = { name: m.name, files: { lm: m.lm, mmproj: m.mmproj }, image: { width: m.image[0], height: m.image[1], png_bytes: image.length }, expected_tiles: expectTiles, warmup: m.warmup, runs: m.runs, results };
  // written after each model, so a long run leaves what it has
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
}
// The logits of both engines on the same pixels. SmolVLM's preprocessing differs between them where
// either resizes: transformers (kiln) resamples with LANCZOS, llama.cpp bilinearly; and llama.cpp always
// adds the global image, even to a single tile. So the image is 2048×512, already the longest edge the
// checkpoint resizes to (no resize in either), cut into four 512² tiles in both, and its global image
// (2048×512 → 512²) shrinks only along x, where every row is one colour: any filter whose weights sum to
// one gives each row its colour, so the global image is the same too. One non-streamed chat each (2
// threads), its prompt token count and the top log-probabilities of the first generated position; the
// tokens both list are compared by id where both give one, else by text. The weights are random (the
// files are for timing), so the distribution is flat-ish and only the values mean anything.
if (!args.includes('--no-logits')) {
  const top = 20;
  const [width, height] = [2048, 512];
  const image = png(width, height, { rowsOnly: true });
  const m = MODELS.smolvlm;
  const common = {
    lm: `/models/${m.lm}`, mmproj: `/models/${m.mmproj}`, image: image.toString('base64'), prompt, top, maxTokens: 1,
  };
  console.error(`\nvision bench: logits, kiln-cpu-2 and wllama-cpu-2 on a ${width}x${height} image of one colour per row`);
  const k = await inFreshPage('logits kiln-cpu-2', 'visionKilnLogits', { ...common, device: 'cpu', threads: 2, rowsPerTile: 64 });
  const w = await inFreshPage('logits wllama-cpu-2', 'visionWllamaLogits', { ...common, backend: 'cpu', threads: 2, nCtx: 4096 });
  report.logits = { files: { lm: common.lm, mmproj: common.mmproj }, image: { width, height, rows_only: true }, top, kiln: k, wllama: w, comparison: compareTop(k, w, ggufVocab(join(dir, m.lm))) };
}
await browser.close();
server.close();

mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);

printTable(report);
if (report.logits) printLogits(report.logits);
console.log(`\nwritten: ${outPath}`);
