// The 2026-families benchmark in headless Debian Chromium (WebGPU on SwiftShader; tests/e2e/browser.mjs): kiln
// (CPU backend at 1 and 2 threads, WebGPU) beside wllama (llama.cpp in wasm, its CPU path at 1 and 2 threads) on
// the same random-weight GGUF files of real shapes (tests/fixtures/make_family_bench_files.py): Qwen3.5-0.8B,
// LFM2-350M, the dense Qwen3-0.6B, and Gemma-4-E2B (text) twice: with its vocabulary cut to 98,304, and at its real
// size, which neither engine loads in Chromium here (the file's docs say why; its rows record the errors). bench/families-page.js does the work in the page.
//
//   node bench/families.mjs [--dir DIR] [--out OUT.json] [--models qwen35,lfm2,qwen3,gemma4-98k,gemma4]
//                           [--configs kiln-cpu-1,wllama-cpu-1,kiln-cpu-2,wllama-cpu-2,kiln-webgpu]
//                           [--runs 2] [--warmup 1] [--prompt 128] [--tokens 32] [--memory-prompt 300]
//                           [--webgpu-prompt 32] [--webgpu-tokens 8] [--webgpu-timeout 1800] [--timeout 3600]
//                           [--quiet-wait S (30)] [--quiet-cores C (0.5)] [--root DIR] [--pkg DIR]
//                           [--table OUT.json] (print the tables of an earlier run and exit)
//
// The workload, per model: prompts of `--prompt` tokens of bench/text.txt (wllama's server code takes text only,
// so both engines get the same text and tokenize it, BOS included where the model adds one; its length is found
// with kiln's tokenizer, the largest run of words that makes at most `--prompt` tokens, and each run reports the
// count its engine saw), a different passage for every run so that no run reuses another's state, `--tokens`
// greedy tokens with the control tokens (end of generation among them) biased away, `--warmup` + `--runs` runs. kiln's and
// wllama's CPU configurations at equal threads are paired: both pages loaded, their runs alternating (kiln first on
// even rounds, wllama first on odd ones), so that whatever else the machine does weighs on both alike. Prefill tok/s
// is the prompt's tokens over the time to the first chunk; decode tok/s the tokens after the first over the time
// from the first chunk to the last (both wall clock in the page, the same for both engines; llama.cpp's own
// timings are in the JSON too). WebGPU here is SwiftShader, a CPU emulation that checks correctness, not speed:
// one cold run (shader compilation included) of a shorter prompt, its greedy text set beside kiln CPU's on the
// same prompt.
//
// Memory: after the timed runs (which keep nothing: `prefixCacheBytes: 0`, every prompt prefilled cold as wllama's
// `cache_prompt: false`), one more kiln CPU page keeps its states in the prefix cache (`engine.memory.
// prefixCacheBytes`) and runs two prompts of token ids (no BOS, different first ids: nothing shared, so each adds
// its own kept state, which holds exactly its positions), of 64 and `--memory-prompt` ids, one token each. The
// difference of the two states over the difference of their positions is the bytes per position; what the shorter
// one holds beyond its positions is the fixed part (the recurrent layers' states of the sequence, with the one
// snapshot each kept state carries). That page also runs the WebGPU check's prompt on the CPU.
// Beside it, what the file's metadata says (f32 keys and values per owning layer; the DeltaNet / conv states), and
// llama.cpp's own account of its caches from wllama's load log. Nothing asserts on any figure.
//
// `cargo xtask bench --families` writes the files and the package, then runs this.
import { closeSync, mkdirSync, openSync, readFileSync, readSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch } from '../tests/e2e/browser.mjs';
import { cpuSince, cpuSnapshot, quiet as quietFor } from './load.mjs';
import { args, opt, paths } from './options.mjs';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { root, cache } = paths(here);
const dir = opt('dir', join(cache, 'family-bench'));
const outPath = opt('out', join(root, 'target', 'bench', 'families.json'));
const pkgDir = opt('pkg', join(root, 'pkg'));
const runs = Number(opt('runs', 2));
const warmup = Number(opt('warmup', 1));
const promptLen = Number(opt('prompt', 128));
const tokens = Number(opt('tokens', 32));
const memoryPrompt = Number(opt('memory-prompt', 300));
const webgpuPrompt = Number(opt('webgpu-prompt', 32));
const webgpuTokens = Number(opt('webgpu-tokens', 8));
const webgpuTimeout = Number(opt('webgpu-timeout', 1800));
const timeout = Number(opt('timeout', 3600));
const models = opt('models', 'qwen35,lfm2,qwen3,gemma4-98k,gemma4').split(',').filter(Boolean);
const configs = opt('configs', 'kiln-cpu-1,wllama-cpu-1,kiln-cpu-2,wllama-cpu-2,kiln-webgpu').split(',').filter(Boolean);
// Before each run, wait up to this many seconds for the others' CPU use to fall below `quietCores` cores (over a
// 5 s window; on a machine that is never quiet a longer wait buys nothing); what others took during each run is
// recorded either way, and the paired runs share it alike.
const quietWait = Number(opt('quiet-wait', 30));
const quietCores = Number(opt('quiet-cores', 0.5));
/** Kept states' budget of kiln's CPU pages: room for every run's state and the longer one. */
const KEEP_BYTES = 2 ** 31;
/** The prompts' source: bench/text.txt's words (Lewis Carroll's *Alice's Adventures in Wonderland*). */
const WORDS = readFileSync(join(root, 'bench', 'text.txt'), 'utf8').split(/\s+/).filter(Boolean);

const MODELS = {
  qwen35: { file: 'qwen35-0.8b-bench.gguf', name: 'Qwen3.5-0.8B shape (qwen35: 18 Gated DeltaNet + 6 gated attention layers)' },
  'gemma4-98k': { file: 'gemma4-e2b-vocab98k-bench.gguf', name: 'Gemma-4-E2B text layers, vocabulary cut to 98,304 (gemma4: 35 layers, 20 sharing KV, per-layer embeddings; 1.9 GB)' },
  // the real size: neither engine loads it in Chromium here (see tests/fixtures/make_family_bench_files.py)
  gemma4: { file: 'gemma4-e2b-bench.gguf', name: 'Gemma-4-E2B text shape, real size (gemma4: 35 layers, 20 sharing KV, per-layer embeddings; 2.96 GB)' },
  lfm2: { file: 'lfm2-350m-bench.gguf', name: 'LFM2-350M shape (lfm2: 10 short-conv + 6 attention layers)' },
  qwen3: { file: 'qwen3-0.6b-bench.gguf', name: 'Qwen3-0.6B shape (qwen3: dense, 28 attention layers), the dense comparison' },
};

// --------------------------------------------------------------------------------------------------------------
// GGUF metadata (the key-value section only), read from the start of the file.

function ggufMeta(path) {
  const fd = openSync(path, 'r');
  let buf = Buffer.alloc(0);
  const ensure = (end) => {
    if (end <= buf.length) return;
    const size = Math.max(end, buf.length * 2, 16 << 20);
    const next = Buffer.alloc(size);
    const n = readSync(fd, next, 0, size, 0);
    if (n < end) throw new Error(`${path}: metadata runs past the end of the file`);
    buf = next;
  };
  let at = 0;
  const take = (n) => { ensure(at + n); const s = at; at += n; return s; };
  const u32 = () => buf.readUInt32LE(take(4));
  const u64 = () => Number(buf.readBigUInt64LE(take(8)));
  const str = () => { const len = u64(); const s = take(len); return buf.toString('utf8', s, s + len); };
  const scalar = {
    0: () => buf.readUInt8(take(1)), 1: () => buf.readInt8(take(1)), 2: () => buf.readUInt16LE(take(2)),
    3: () => buf.readInt16LE(take(2)), 4: () => buf.readUInt32LE(take(4)), 5: () => buf.readInt32LE(take(4)),
    6: () => buf.readFloatLE(take(4)), 7: () => buf.readUInt8(take(1)) !== 0, 8: str,
    10: () => Number(buf.readBigUInt64LE(take(8))), 11: () => Number(buf.readBigInt64LE(take(8))),
    12: () => buf.readDoubleLE(take(8)),
  };
  const value = (type) => {
    if (type !== 9) return scalar[type]();
    const [t, count] = [u32(), u64()];
    const out = new Array(count);
    for (let i = 0; i < count; i++) out[i] = value(t);
    return out;
  };
  try {
    ensure(24);
    if (buf.toString('ascii', 0, 4) !== 'GGUF') throw new Error(`${path}: not a GGUF file`);
    at = 8;
    u64();
    const kvs = u64();
    const meta = {};
    for (let i = 0; i < kvs; i++) {
      const key = str();
      meta[key] = value(u32());
    }
    return meta;
  } finally {
    closeSync(fd);
  }
}

/**
 * What the metadata says kiln's cache holds: f32 keys and values of every layer that owns them, per position, and
 * the recurrent layers' states of one sequence (model::layers::state).
 */
function expectedCache(meta) {
  const arch = meta['general.architecture'];
  const m = (k) => meta[`${arch}.${k}`];
  const n = m('block_count');
  const perLayer = (v, i) => (Array.isArray(v) ? v[i] : v);
  const kvHeads = (i) => perLayer(m('attention.head_count_kv'), i);
  const headDim = m('attention.key_length') ?? m('embedding_length') / m('attention.head_count');
  let perPosition = 0;
  let state = 0;
  const kinds = [];
  for (let i = 0; i < n; i++) {
    if (arch === 'qwen35' && m('attention.recurrent_layers')[i]) {
      const [dk, hk, hv, inner, w] = [m('ssm.state_size'), m('ssm.group_count'), m('ssm.time_step_rank'), m('ssm.inner_size'), m('ssm.conv_kernel')];
      state += 4 * ((w - 1) * (2 * hk * dk + inner) + hv * dk * (inner / hv));
      kinds.push('delta');
    } else if (arch === 'lfm2' && kvHeads(i) === 0) {
      state += 4 * (m('shortconv.l_cache') - 1) * m('embedding_length');
      kinds.push('conv');
    } else if (arch === 'gemma4' && i >= n - (m('attention.shared_kv_layers') ?? 0)) {
      kinds.push('shared');
    } else {
      const sliding = arch === 'gemma4' && m('attention.sliding_window_pattern')[i];
      const d = sliding ? m('attention.key_length_swa') : headDim;
      perPosition += 4 * 2 * kvHeads(i) * d;
      kinds.push(sliding ? 'kv-sliding' : 'kv');
    }
  }
  const count = (k) => kinds.filter((x) => x === k).length;
  return {
    bytes_per_position: perPosition, state_bytes: state,
    layers: { kv: count('kv'), kv_sliding: count('kv-sliding'), shared: count('shared'), delta: count('delta'), conv: count('conv') },
  };
}

/** Token ids for the memory prompts: normal tokens of the vocabulary, a different sequence for each `seed`. */
function promptIds(normal, length, seed) {
  const n = normal.length;
  const start = (seed * 7919 + 17) % n;
  return Array.from({ length }, (_, i) => normal[(start + i * 104729 + ((i * i) % 1013)) % n]);
}

/** The memory measurement's shorter prompt, in ids. */
const MEMORY_SHORT = 64;

/**
 * The largest run of `WORDS` from `offset` that kiln makes into at most `target` tokens (`count(text)`, through a
 * kiln page); without a kiln page, 3/4 of a word per token, a guess.
 */
async function promptOf(count, target, offset) {
  // the words from `offset` on, from the start again past the end (the text has 1,117)
  const text = (k) => Array.from({ length: k }, (_, j) => WORDS[(offset + j) % WORDS.length]).join(' ');
  if (!count) return { text: text(Math.round(target * 0.75)), kiln_tokens: null };
  let lo = 1;
  let hi = target;
  while ((await count(text(hi))) <= target) {
    hi *= 2;
    if (hi > 64 * target) throw new Error(`${hi} words make at most ${target} tokens?`);
  }
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if ((await count(text(mid))) <= target) lo = mid;
    else hi = mid - 1;
  }
  return { text: text(lo), words: lo, kiln_tokens: await count(text(lo)) };
}

// --------------------------------------------------------------------------------------------------------------
// Tables

const median = (xs) => {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  const k = v.length;
  return k % 2 ? v[(k - 1) / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
};
const f = (x, d = 0) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));
const MiB = (b) => (b === null || b === undefined ? null : b / 2 ** 20);

function summarize(r) {
  if (!r?.runs?.length) return;
  const pick = (k) => r.runs.map((x) => x[k]);
  r.median = {
    prompt_tokens: median(pick('prompt_tokens')), completion_tokens: median(pick('completion_tokens')),
    ttft_ms: median(pick('ttft_ms')), prefill_tok_s: median(pick('prefill_tok_s')), decode_tok_s: median(pick('decode_tok_s')),
    engine_prefill_tok_s: median(r.runs.map((x) => x.engine_timings?.prompt_per_second)),
    engine_decode_tok_s: median(r.runs.map((x) => x.engine_timings?.predicted_per_second)),
  };
  r.range = {
    prefill_tok_s: [Math.min(...pick('prefill_tok_s')), Math.max(...pick('prefill_tok_s'))],
    decode_tok_s: [Math.min(...pick('decode_tok_s').filter(Number.isFinite)), Math.max(...pick('decode_tok_s').filter(Number.isFinite))],
  };
}

function table(head, rows) {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  console.log(head.map((h, i) => h.padEnd(widths[i])).join(' | '));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const r of rows) console.log(r.map((v, i) => String(v).padEnd(widths[i])).join(' | '));
}

function printTables(report) {
  console.log(`\nChromium ${report.chromium}, wllama ${report.wllama_version}, ${report.cores} cores; prompts of ≤ ${report.workload.prompt} tokens of bench/text.txt, ${report.workload.tokens} greedy tokens, ${report.workload.warmup} warm-up + ${report.workload.runs} runs (medians; min-max); WebGPU = SwiftShader (correctness device: one cold run of ${report.workload.webgpu_prompt} + ${report.workload.webgpu_tokens} tokens)`);
  for (const m of Object.values(report.models)) {
    console.log(`\n${m.name}  [${m.file}, ${f(m.file_bytes / 1e6)} MB]`);
    const rows = [];
    for (const [c, r] of Object.entries(m.results)) {
      if (r.error || !r.median) {
        rows.push([c, `${r.error ? `error: ${r.error}` : 'no runs'}`.slice(0, 160), '', '', '', '', '', '']);
        continue;
      }
      const [engine, device, threads] = c.split('-');
      let vs = '';
      if (engine === 'kiln' && device === 'cpu') {
        const w = m.results[`wllama-cpu-${threads}`];
        if (w?.median) vs = `${f(r.median.prefill_tok_s / w.median.prefill_tok_s, 2)}x / ${f(r.median.decode_tok_s / w.median.decode_tok_s, 2)}x`;
        else if (w?.error) vs = 'wllama failed';
      }
      const own = engine === 'wllama' ? ` (llama.cpp: ${f(r.median.engine_prefill_tok_s, 1)} / ${f(r.median.engine_decode_tok_s, 2)})` : '';
      const others = r.runs.map((x) => (x.cpu ? f(x.cpu.cpu_s_others / x.cpu.wall_s, 2) : '-')).join(' ');
      rows.push([
        c + (device === 'webgpu' ? ' (SwiftShader)' : ''),
        `${f(r.median.prompt_tokens)} + ${f(r.median.completion_tokens)}`,
        `${f(r.median.prefill_tok_s, 1)} (${f(r.range.prefill_tok_s[0], 1)}-${f(r.range.prefill_tok_s[1], 1)})`,
        `${f(r.median.decode_tok_s, 2)} (${f(r.range.decode_tok_s[0], 2)}-${f(r.range.decode_tok_s[1], 2)})${own}`,
        f(r.median.ttft_ms / 1000, 1), f(r.load_ms / 1000, 1), others, vs,
      ]);
    }
    table(['configuration', 'tokens', 'prefill tok/s', 'decode tok/s', 'TTFT s', 'load s', "others' cores", 'kiln/wllama prefill / decode'], rows);
    if (m.webgpu_check) console.log(`  WebGPU vs CPU greedy text on the same ${report.workload.webgpu_prompt}-token prompt: ${m.webgpu_check.same ? 'the same' : 'DIFFERENT'}`);
  }
  console.log('\nkiln cache memory (CPU backend, f32 keys/values; measured from the prefix cache\'s kept states, expected from the metadata):');
  const dense = Object.values(report.models).find((m) => m.dense)?.memory;
  const rows = [];
  for (const m of Object.values(report.models)) {
    const x = m.memory;
    if (!x) continue;
    const perK = x.measured?.bytes_per_position != null ? x.measured.bytes_per_position * 1000 : null;
    const densePerK = dense?.measured?.bytes_per_position != null ? dense.measured.bytes_per_position * 1000 : null;
    const l = x.expected.layers;
    rows.push([
      m.key, `${l.kv} full + ${l.kv_sliding} sliding own KV, ${l.shared} shared, ${l.delta + l.conv} recurrent`,
      f(x.measured?.bytes_per_position), f(x.expected.bytes_per_position),
      f(MiB(perK), 2), f(MiB(x.measured?.fixed_bytes), 2), f(MiB(x.expected.state_bytes), 2),
      f(MiB(x.measured ? x.measured.fixed_bytes + x.measured.bytes_per_position * 8192 : null), 1),
      perK && densePerK ? `${f(perK / densePerK, 3)}x` : '',
    ]);
  }
  table(['model', 'layers', 'B/position', 'expected', 'MiB per 1k tokens', 'fixed MiB (states + snapshot)', 'one state MiB (expected)', 'MiB at 8k tokens', 'per 1k vs dense'], rows);
  for (const m of Object.values(report.models)) {
    const lines = Object.entries(m.results).filter(([c]) => c.startsWith('wllama')).flatMap(([, r]) => r.memory_log ?? []);
    const kv = [...new Set(lines.filter((l) => /(llama_kv_cache|llama_memory_recurrent|llama_kv_cache_iswa|llama_kv_cache_unified): +size =/.test(l)).map((l) => l.replace(/^.*?(llama_\w+): +size = +/, '$1 ')))].slice(0, 4);
    if (kv.length) console.log(`  llama.cpp (${m.key}, n_ctx ${report.workload.wllama_n_ctx}): ${kv.map((s) => s.trim()).join(' | ')}`);
  }
}

if (args.includes('--table')) {
  const report = JSON.parse(readFileSync(opt('table'), 'utf8'));
  for (const m of Object.values(report.models)) for (const r of Object.values(m.results)) summarize(r);
  printTables(report);
  process.exit(0);
}

// --------------------------------------------------------------------------------------------------------------
// The machine's other load (bench/load.mjs)

/** Waits for a quieter machine before a timed run (bench/load.mjs). */
const quiet = (name) => quietFor(`families bench: ${name}`, { wait: quietWait, cores: quietCores });

// --------------------------------------------------------------------------------------------------------------
// The runs

const mounts = [
  ['/pkg/', pkgDir],
  ['/models/', dir],
  ['/bench/', join(root, 'bench')],
  ['/wllama/', join(root, 'node_modules', '@wllama', 'wllama')],
];
const { base, server } = await serve(mounts);
const browser = await launch();
console.error(`families bench: serving on ${base}; files from ${dir}; pkg ${pkgDir}; models ${models.join(', ')}; configs ${configs.join(', ')}`);

/**
 * `page.evaluate(window[fn](arg))`, given up after `seconds` or at the page's first uncaught error meanwhile (a
 * call it breaks never returns; the caller then closes the page's context).
 */
async function call(page, fn, arg, seconds) {
  let timer;
  let onError;
  const limit = new Promise((_, no) => {
    timer = setTimeout(() => no(new Error(`timed out after ${seconds} s`)), seconds * 1000);
    onError = (e) => no(new Error(`page error: ${e.message}`));
    page.on('pageerror', onError);
  });
  try {
    return await Promise.race([page.evaluate(([f2, a]) => window[f2](a), [fn, arg]), limit]);
  } finally {
    clearTimeout(timer);
    page.off('pageerror', onError);
  }
}

async function openPage(name) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('console', (m) => console.error(`  ${name} | ${m.text()}`));
  page.on('pageerror', (e) => console.error(`  ${name} | page error: ${e.message}`));
  await page.goto(`${base}/bench/families.html`);
  await page.waitForFunction(() => window.familiesReady === true);
  return { context, page, name };
}

/**
 * The CPU configurations at `threads` threads (kiln, wllama or both, paired), each in its own fresh browser
 * context.
 */
async function cpuPair(key, model, threads, sides, work) {
  const cpu0 = cpuSnapshot();
  const out = {};
  try {
    for (const s of sides) {
      s.name = `${key} ${s.engine}-cpu-${threads}`;
      s.prefix = s.engine === 'kiln' ? 'familiesKiln' : 'familiesWllama';
      try {
        Object.assign(s, await openPage(s.name));
        const loadArgs = s.engine === 'kiln'
          ? { device: 'cpu', threads, model, prefixCacheBytes: 0 }
          : { threads, model, nCtx: work.nCtx };
        s.result = await call(s.page, `${s.prefix}Load`, loadArgs, timeout);
        s.result.runs = [];
      } catch (e) {
        console.error(`families bench: ${s.name} failed to load: ${e.message}`);
        s.result = { error: e.message.split('\n')[0] };
      }
    }
    if (!work.prompts) {
      const k = sides.find((s) => s.engine === 'kiln' && !s.result.error);
      await work.calibrate(k ? (text) => call(k.page, 'familiesKilnCount', { text }, 300) : null);
    }
    for (let i = 0; i < work.warmup + work.runs; i++) {
      const warm = i < work.warmup;
      for (const s of i % 2 ? [...sides].reverse() : sides) {
        if (s.result.error) continue;
        const q = await quiet(s.name);
        const c = cpuSnapshot();
        try {
          const run = await call(s.page, `${s.prefix}Run`, { prompt: work.prompts[i].text, tokens: work.tokens, stopIds: work.stopIds, warm, index: warm ? i + 1 : i + 1 - work.warmup }, timeout);
          run.cpu = cpuSince(c);
          run.quiet = q;
          run.round = i + 1;
          run.warm = warm;
          delete run.text;
          if (!warm) s.result.runs.push(run);
          (s.result.all_runs ??= []).push({
            round: i + 1, warm, prompt_tokens: run.prompt_tokens, completion_tokens: run.completion_tokens,
            cached_tokens: run.cached_tokens, memory_after: run.memory_after ?? null,
          });
        } catch (e) {
          console.error(`families bench: ${s.name} run failed: ${e.message}`);
          s.result.error = e.message.split('\n')[0];
        }
      }
    }
    for (const s of sides) {
      if (s.result.error) continue;
      try {
        Object.assign(s.result, await call(s.page, `${s.prefix}Done`, null, 300));
      } catch (e) {
        console.error(`families bench: ${s.name} failed at the end: ${e.message}`);
        s.result.end_error = e.message.split('\n')[0];
      }
    }
    const cpu = cpuSince(cpu0);
    for (const s of sides) s.result.cpu_all = cpu;
  } finally {
    for (const s of sides) await s.context?.close().catch(() => {});
  }
  for (const s of sides) out[`${s.engine}-cpu-${threads}`] = s.result;
  return out;
}

/**
 * kiln's memory page (see the header): two kept states of token-id prompts, then the WebGPU check's prompt run on
 * the CPU. Returns the bytes per position and the fixed part, or `{ error }`.
 */
async function kilnMemory(key, model, threads, normal, work) {
  let p = null;
  try {
    p = await openPage(`${key} kiln-memory`);
    await call(p.page, 'familiesKilnLoad', { device: 'cpu', threads, model, prefixCacheBytes: KEEP_BYTES }, timeout);
    const states = [];
    for (const [length, seed] of [[MEMORY_SHORT, 101], [memoryPrompt, 202]]) {
      const m = await call(p.page, 'familiesKilnMemory', { prompt: promptIds(normal, length, seed), stopIds: work.stopIds }, timeout);
      states.push({ positions: m.prompt_tokens + m.completion_tokens, bytes: m.added_bytes, cached_tokens: m.cached_tokens, ttft_ms: m.ttft_ms });
    }
    const check = work.webgpuPrompt && configs.includes('kiln-webgpu')
      ? await call(p.page, 'familiesKilnRun', { prompt: work.webgpuPrompt.text, tokens: webgpuTokens, stopIds: work.stopIds, warm: true, index: 'webgpu-check' }, timeout)
      : null;
    await call(p.page, 'familiesKilnDone', null, 300);
    const [short, long] = states;
    const perPosition = (long.bytes - short.bytes) / (long.positions - short.positions);
    return {
      threads, kept_states: states, bytes_per_position: perPosition, fixed_bytes: short.bytes - perPosition * short.positions,
      webgpu_check_text: check?.text ?? null,
    };
  } catch (e) {
    console.error(`families bench: ${key} kiln memory failed: ${e.message}`);
    return { error: e.message.split('\n')[0] };
  } finally {
    await p?.context.close().catch(() => {});
  }
}

const report = {
  chromium: browser.version(),
  wllama_version: JSON.parse(readFileSync(join(root, 'node_modules', '@wllama', 'wllama', 'package.json'), 'utf8')).version,
  cores: (await import('node:os')).cpus().length,
  pkg: { dir: pkgDir, kiln_bg_wasm_mtime: statSync(join(pkgDir, 'kiln_bg.wasm')).mtime, threads_wasm_mtime: statSync(join(pkgDir, 'threads', 'kiln_bg.wasm')).mtime },
  workload: {
    prompt: promptLen, tokens, warmup, runs, memory_prompt: memoryPrompt, webgpu_prompt: webgpuPrompt, webgpu_tokens: webgpuTokens,
    wllama_n_ctx: 512, greedy: true, control_tokens_biased_away: true,
  },
  models: {},
};

for (const key of models) {
  const spec = MODELS[key];
  if (!spec) throw new Error(`unknown model ${key} (known: ${Object.keys(MODELS).join(', ')})`);
  const path = join(dir, spec.file);
  const meta = ggufMeta(path);
  const types = meta['tokenizer.ggml.token_type'];
  const normal = types.map((t, id) => (t === 1 ? id : -1)).filter((id) => id >= 0);
  const stopIds = [...new Set([
    ...types.map((t, id) => (t === 3 ? id : -1)).filter((id) => id >= 0),
    ...['tokenizer.ggml.eos_token_id', 'tokenizer.ggml.eot_token_id'].map((k) => meta[k]).filter(Number.isInteger),
  ])].sort((a, b) => a - b);
  const work = {
    prompt: promptLen, tokens, warmup, runs, stopIds, nCtx: report.workload.wllama_n_ctx, prompts: null,
    // the prompts, once a kiln page can count tokens (the first pair's): each run's from its own place in the text
    calibrate: async (count) => {
      work.prompts = [];
      for (let i = 0; i < warmup + runs; i++) work.prompts.push(await promptOf(count, promptLen, i * 137));
      work.webgpuPrompt = await promptOf(count, webgpuPrompt, 1000);
      console.error(`families bench: ${key} prompts of ${work.prompts.map((p) => p.kiln_tokens).join(', ')} tokens (kiln's count), WebGPU prompt ${work.webgpuPrompt.kiln_tokens}`);
    },
  };
  const model = `/models/${spec.file}`;
  const entry = {
    key, name: spec.name, file: spec.file, file_bytes: statSync(path).size, arch: meta['general.architecture'],
    dense: key === 'qwen3', stop_ids: stopIds, results: {},
  };
  report.models[key] = entry;
  console.error(`\nfamilies bench: ${key} (${entry.arch}, ${(entry.file_bytes / 1e9).toFixed(2)} GB; ${stopIds.length} token ids biased away)`);
  const threadCounts = [...new Set(configs.filter((c) => /-cpu-\d+$/.test(c)).map((c) => Number(c.split('-').pop())))].sort();
  const kilnTop = Math.max(...configs.filter((c) => c.startsWith('kiln-cpu-')).map((c) => Number(c.split('-').pop())));
  for (const threads of threadCounts) {
    const sides = ['kiln', 'wllama'].filter((e) => configs.includes(`${e}-cpu-${threads}`)).map((engine) => ({ engine }));
    console.error(`\nfamilies bench: ${key} ${sides.map((s) => `${s.engine}-cpu-${threads}`).join(' + ')}${sides.length > 1 ? ', paired' : ''}`);
    Object.assign(entry.results, await cpuPair(key, model, threads, sides, work));
  }
  // kiln's cache memory (and the CPU side of the WebGPU check), where a kiln CPU configuration loaded the model
  const kilnLoaded = Number.isFinite(kilnTop) && !entry.results[`kiln-cpu-${kilnTop}`]?.error;
  let measured = null;
  if (kilnLoaded) {
    console.error(`\nfamilies bench: ${key} kiln memory (kept states of ${MEMORY_SHORT} and ${memoryPrompt} ids)`);
    // on the single-threaded build: the figures do not depend on threads, and a threaded page once stopped here
    // with "Atomics.wait cannot be called in this context" (a wait on the page's main thread)
    measured = await kilnMemory(key, model, 1, normal, work);
  }
  entry.memory = { expected: expectedCache(meta), measured };
  entry.prompts = work.prompts && {
    runs: work.prompts.map(({ words, kiln_tokens }) => ({ words, kiln_tokens })),
    webgpu: { words: work.webgpuPrompt.words, kiln_tokens: work.webgpuPrompt.kiln_tokens },
  };

  if (configs.includes('kiln-webgpu')) {
    console.error(`\nfamilies bench: ${key} kiln-webgpu (SwiftShader), one cold run of ${webgpuPrompt} + ${webgpuTokens} tokens`);
    const q = await quiet(`${key} kiln-webgpu`);
    let p = null;
    const c = cpuSnapshot();
    try {
      p = await openPage(`${key} kiln-webgpu`);
      const r = await call(p.page, 'familiesKilnLoad', { device: 'webgpu', model, prefixCacheBytes: 0 }, webgpuTimeout);
      if (!work.prompts) await work.calibrate((text) => call(p.page, 'familiesKilnCount', { text }, 300));
      const run = await call(p.page, 'familiesKilnRun', { prompt: work.webgpuPrompt.text, tokens: webgpuTokens, stopIds, warm: false, index: 1 }, webgpuTimeout);
      run.cpu = cpuSince(c);
      run.quiet = q;
      Object.assign(r, await call(p.page, 'familiesKilnDone', null, 300));
      r.runs = [run];
      entry.results['kiln-webgpu'] = r;
      const cpuText = measured?.webgpu_check_text;
      if (cpuText != null) entry.webgpu_check = { same: cpuText === run.text, cpu: cpuText, webgpu: run.text };
    } catch (e) {
      console.error(`families bench: ${key} kiln-webgpu failed: ${e.message}`);
      entry.results['kiln-webgpu'] = { error: e.message.split('\n')[0] };
    } finally {
      await p?.context.close().catch(() => {});
    }
  }
  for (const r of Object.values(entry.results)) summarize(r);
  // written after each model, so a long run leaves what it has
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
}
await browser.close();
server.close();

mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
printTables(report);
console.log(`\nwritten: ${outPath}`);
