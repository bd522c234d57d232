// kiln's JavaScript API: `Engine.load(...)`, then `engine.chat.completions.create(request)` and
// `engine.completions.create(request)` with the request objects of OpenAI's `POST /v1/chat/completions` and
// `POST /v1/completions`. `stream: true` resolves to an async iterator of chunks; otherwise to the full
// response. This file is plumbing only: the wasm module (`./kiln.js`) validates, generates and shapes.
import init, { KilnInspector, KilnLoader, KilnModel, checkQuantize, deviceReport as singleReport } from './kiln.js';
import { accept, serve } from './http.js';

export { registerServiceWorker } from './sw-client.js';

/** An OpenAI-shaped error: `status`, and `error` = `{ message, type, param, code }`. */
export class KilnError extends Error {
  constructor(body) {
    super(body.error.message);
    this.name = 'KilnError';
    this.status = body.status;
    this.error = body.error;
    this.param = body.error.param;
    this.code = body.error.code;
  }
}

const isErrorBody = (e) => e !== null && typeof e === 'object' && 'status' in e && typeof e.error === 'object';
const toError = (e) => (isErrorBody(e) ? new KilnError(e) : e instanceof Error ? e : new Error(String(e)));
const abortError = () => new DOMException('The request was aborted', 'AbortError');
/** What a request on an engine without a model gets (after `unload()`, or a worker with none loaded). */
export const notLoadedError = () => new KilnError({
  status: 400,
  error: {
    message: 'no model is loaded: this engine was unloaded (`unload()`); load one with `load(...)` first',
    type: 'invalid_request_error', param: null, code: 'model_not_loaded',
  },
});
const optionError = (param, message) => new KilnError({ status: 422, error: { message, type: 'invalid_request_error', param, code: 'invalid_value' } });

/** Whether this browser runs WebAssembly SIMD (a 128-bit `i8x16.popcnt` module validates). */
const hasSimd = () => WebAssembly.validate(new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11,
]));

// Two builds of the wasm module ship in the package: `./kiln.js` (single-threaded, WebGPU and the CPU
// backend) and `./threads/kiln.js` (the CPU backend only, its products on rayon's pool of Web Workers over
// shared memory: wasm threads need `SharedArrayBuffer`, which browsers give only to cross-origin isolated
// pages, and wgpu's WebGPU objects cannot be shared between threads). A CPU model runs on the threaded build
// when the page is isolated and more than one thread is wanted; everything else on the single one.

let single;
/** The single-threaded module, initialised once (`wasm`: where `kiln_bg.wasm` is, when not beside this file). */
function singleBuild(wasm) {
  if (!hasSimd()) {
    throw new Error('kiln needs WebAssembly SIMD, which this browser lacks (every browser with WebGPU has it, as do Firefox 89+ and Safari 16.4+)');
  }
  single ??= init(wasm === undefined ? undefined : { module_or_path: wasm })
    .then(() => ({ KilnInspector, KilnLoader, KilnModel, checkQuantize, deviceReport: singleReport }));
  return single;
}

/** The threaded module with its pool: `{ module, count }`, started once per page (rayon builds one pool). */
let threaded;
function threadsBuild(count) {
  threaded ??= (async () => {
    const module = await import('./threads/kiln.js');
    await module.default();
    // Before anything else runs in it: the first use of rayon would build a pool of one. The calling
    // thread takes a share of every split product itself (`src/kernels/cpu/split.rs`), so the pool has
    // one worker fewer than the threads wanted.
    await module.initThreadPool(count - 1);
    return { module, count };
  })();
  return threaded;
}

/**
 * Whether this context may run the threaded build: cross-origin isolated, with `SharedArrayBuffer`, and able
 * to start Web Workers (a Service Worker cannot).
 */
const isolated = () => globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function'
  && typeof Worker === 'function';

/** The logical cores the browser reports. */
const cores = () => Math.max(1, Number(globalThis.navigator?.hardwareConcurrency) || 1);

/**
 * The default number of threads: every logical core, at most 8. Measured on the 2-core machine of the
 * benchmark (README): 2 threads decode 1.8x and prefill 1.9x one thread; llama.cpp's default of half the
 * cores is for its spinning threads, while rayon's idle workers sleep.
 */
const defaultThreads = () => Math.min(cores(), 8);

/**
 * Which build a CPU model runs on: `{ build: 'threads' | 'single', count, requested, cores, note }`.
 * `threads` (a whole number ≥ 1, or undefined for the default) larger than the machine's cores is capped,
 * with a note; a page that is not cross-origin isolated gets the single-threaded build (a note says why).
 */
function planThreads(threads) {
  if (threads !== undefined && threads !== null && !(Number.isInteger(threads) && threads >= 1)) {
    throw optionError('threads', '`threads` must be a whole number of threads, 1 or more');
  }
  const requested = threads ?? null;
  const plan = { build: 'single', count: 1, requested, cores: cores(), note: null };
  if (requested === 1) return plan;
  if (!isolated()) {
    plan.note = typeof Worker === 'function'
      ? 'the page is not cross-origin isolated (it needs the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), so the single-threaded build runs'
      : 'this context cannot start Web Workers (a Service Worker), so the single-threaded build runs';
    return plan;
  }
  let count = requested ?? defaultThreads();
  if (count > plan.cores) {
    plan.note = `\`threads: ${count}\` is more than the ${plan.cores} logical cores this machine reports: capped to ${plan.cores}`;
    count = plan.cores;
  }
  if (count === 1) return plan;
  return { ...plan, build: 'threads', count };
}

/** The pool of the threaded build, started with `plan.count` threads (or the one already running). */
async function threadsFor(plan) {
  const { module, count } = await threadsBuild(plan.count);
  if (count !== plan.count) {
    plan.note = [plan.note, `this page's thread pool was started with ${count} threads by an earlier load, which this one shares`]
      .filter(Boolean).join('; ');
    plan.count = count;
  }
  return module;
}

/** Whether `device: 'auto'` means the CPU backend here: no WebGPU adapter, or only a software one (as the wasm side decides). */
async function autoIsCpu() {
  if (!globalThis.navigator?.gpu) return true;
  try {
    const adapter = await navigator.gpu.requestAdapter();
    return !adapter || adapter.info?.isFallbackAdapter === true;
  } catch {
    return true;
  }
}

/**
 * The module a model on `device` runs in, and how: `{ wasm, device, threads }` (`device` as the wasm side
 * takes it; `threads` the plan of [`planThreads`], `null` on WebGPU).
 */
async function buildFor(device, threads, wasm) {
  const plan = planThreads(threads);
  const cpu = device === 'cpu' || (device === 'auto' && plan.build === 'threads' && (await autoIsCpu()));
  if (cpu && plan.build === 'threads') {
    return { wasm: await threadsFor(plan), device: 'cpu', threads: plan };
  }
  // On WebGPU (or `auto` with a hardware adapter) the host only drives the GPU; should `auto` still end on
  // the CPU backend there (the adapter failing to give a device), it runs on this build's one thread.
  const one = plan.build === 'single' ? plan : { ...plan, build: 'single', count: 1, note: 'the model runs on the single-threaded build, which has WebGPU' };
  return { wasm: await singleBuild(wasm), device, threads: device === 'webgpu' ? null : one };
}

/**
 * Initialises a device and runs the numerical self-check on it: `{ device, check, threads }`. `kind`:
 * `'webgpu'` (the default) or `'cpu'`; on the CPU, `options.threads` as for `Engine.load` (`threads` in the
 * result says which build ran it, on how many threads, and why, as `engine.threads` does).
 */
export async function deviceReport(kind, { threads, wasm } = {}) {
  const build = await buildFor(kind ?? 'webgpu', threads, wasm);
  const report = await build.wasm.deviceReport(kind);
  return { ...report, threads: build.threads };
}

// As the wasm side answers: an invalid `source` (like every invalid load option) is a 422; a download
// that fails is a 400 `model_fetch_failed`, as a load that fails is a 400 `model_load_failed`.
const sourceError = (message, code = 'invalid_value') => new KilnError({
  status: code === 'invalid_value' ? 422 : 400,
  error: { message, type: 'invalid_request_error', param: 'source', code },
});

const isBytes = (x) => x instanceof Uint8Array || x instanceof ArrayBuffer;
const asBytes = (x) => (x instanceof Uint8Array ? x : new Uint8Array(x));
const isUrl = (x) => typeof x === 'string' || x instanceof URL;
/** A `Blob` or `File` (a file the user picked): read in slices, so it may be larger than 4 GiB. */
const isBlob = (x) => typeof Blob === 'function' && x instanceof Blob;
/** What a GGUF file may be given as: a URL, its bytes, or a `Blob` / `File`. */
const isGguf = (x) => isUrl(x) || isBytes(x) || isBlob(x);

/** `{ model, mmproj }`: a vision-language model in llama.cpp's two files. */
const isPair = (x) => x !== null && typeof x === 'object' && !isGguf(x) && !Array.isArray(x) && 'mmproj' in x;

/** llama.cpp's names for the files of a split model (`gguf-split`): `<prefix>-00001-of-0000N.gguf`. */
const SHARD = /-(\d{5})-of-(\d{5})\.gguf$/;

/**
 * The files of a split model from its first file's URL: `…-00001-of-0000N.gguf` gives the N URLs that differ
 * only in the index (query and fragment kept); any other source is the only file.
 */
export function shardSources(source) {
  if (!isUrl(source)) return [source];
  const url = String(source);
  const cut = url.search(/[?#]/);
  const [path, rest] = cut < 0 ? [url, ''] : [url.slice(0, cut), url.slice(cut)];
  const m = SHARD.exec(path);
  if (!m || Number(m[1]) !== 1 || Number(m[2]) < 2) return [source];
  const n = Number(m[2]);
  return Array.from({ length: n }, (_, i) => `${path.slice(0, m.index)}-${String(i + 1).padStart(5, '0')}-of-${m[2]}.gguf${rest}`);
}

/**
 * The length a file declares before it is read: a `Blob`'s size, bytes' length, or a response's
 * `content-length` (not when the body is content-encoded: the header then counts the compressed bytes).
 */
function declaredLength(f) {
  if (f.blob) return f.blob.size;
  if (f.bytes) return f.bytes.length;
  if (f.response.headers.get('content-encoding')) return 0;
  return Number(f.response.headers.get('content-length')) || 0;
}

/**
 * Opens `url` (through the Cache API when `cache` is on, keyed by URL); the body is not read yet. A fetched
 * response is written to the cache as it is read (the write's promise goes into `writes`: await it once the
 * body is read; a failed write, e.g. over quota, does not fail the load); without `writes` (a read of the
 * headers only), the cache is read from and never written to.
 */
async function open(url, store, writes = []) {
  let response = store ? await store.match(url) : undefined;
  if (!response) {
    try {
      response = await fetch(url);
    } catch (e) {
      throw sourceError(`fetching \`source\` ${url} failed: ${e?.message ?? e}`, 'model_fetch_failed');
    }
    if (!response.ok) throw sourceError(`fetching \`source\` ${url} failed: HTTP ${response.status}`, 'model_fetch_failed');
    if (store && writes) writes.push(store.put(url, response.clone()).catch(() => {}));
  }
  return response;
}

/**
 * Fetches every URL of `items` (bytes pass through) with one byte count across them all: all requests are
 * opened first so that `total` (the sum of their `content-length`s) is known before the first report.
 */
async function download(items, cache, onProgress) {
  const store = cache && globalThis.caches && items.some(isUrl) ? await caches.open('kiln-models') : null;
  const writes = [];
  const opened = await Promise.all(items.map((x) => (isUrl(x) ? open(String(x), store, writes) : null)));
  let total = opened.reduce((sum, r) => sum + (Number(r?.headers.get('content-length')) || 0), 0);
  let loaded = 0;
  onProgress?.({ phase: 'download', loaded, total });
  const out = [];
  for (const [i, response] of opened.entries()) {
    if (!response) {
      out.push(asBytes(items[i]));
      continue;
    }
    const reader = response.body.getReader();
    const parts = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      size += value.length;
      loaded += value.length;
      total = Math.max(total, loaded);
      onProgress?.({ phase: 'download', loaded, total });
    }
    const bytes = new Uint8Array(size);
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    out.push(bytes);
  }
  onProgress?.({ phase: 'download', loaded: total, total });
  await Promise.all(writes);
  return out;
}

/**
 * One GGUF file of `source` opened for reading in pieces: `{ source, response, reader, bytes, blob, at }`
 * (a URL through the Cache API when `store` is given, as `open` does; bytes and `Blob`s as they are).
 */
async function openGguf(source, store, writes) {
  const response = isUrl(source) ? await open(String(source), store, writes) : null;
  return {
    source,
    response,
    reader: response?.body.getReader(),
    bytes: response || isBlob(source) ? null : asBytes(source),
    blob: isBlob(source) ? source : null,
    at: 0,
  };
}

/** The next piece of file `f` (of at most `size` bytes where the source is sliced), or null at its end. */
async function nextPiece(f, size) {
  if (f.bytes) {
    if (f.at >= f.bytes.length) return null;
    const piece = f.bytes.subarray(f.at, f.at + size);
    f.at += piece.length;
    return piece;
  }
  if (f.blob) {
    if (f.at >= f.blob.size) return null;
    let piece;
    try {
      piece = new Uint8Array(await f.blob.slice(f.at, f.at + size).arrayBuffer());
    } catch (e) {
      throw sourceError(`reading \`source\` (a Blob of ${f.blob.size} bytes) failed: ${e?.message ?? e}`, 'model_fetch_failed');
    }
    f.at += piece.length;
    return piece;
  }
  let r;
  try {
    r = await f.reader.read();
  } catch (e) {
    throw sourceError(`fetching \`source\` ${f.source} failed: ${e?.message ?? e}`, 'model_fetch_failed');
  }
  return r.done ? null : r.value;
}

/** Slices of a bytes source handed to the loader, so that wasm memory never holds the whole file. */
const PIECE = 16 << 20;
/** Slices of a bytes source while its header is read (tensors that complete in them wait for the others' headers). */
const HEADER_PIECE = 1 << 20;

/**
 * Streams a GGUF model — one file, or the files of a split model (llama.cpp's `gguf-split`) in order —
 * (URLs through the Cache API when `cache` is on, or bytes) into a wasm loader on `device`: each file's
 * first pieces until its header is in, then the rest of every file, each tensor going to the device once
 * its bytes are in (nothing is placed before every header is checked). Progress: `download` (bytes
 * fetched, over all files), `parse` (the headers read), `upload` (bytes of tensors on the device),
 * interleaved as the files stream.
 */
async function streamGguf({ KilnLoader }, model, sources, { cache, device, onProgress, mmproj = false, contextLength }) {
  const store = cache && globalThis.caches && sources.some(isUrl) ? await caches.open('kiln-models') : null;
  const writes = [];
  const files = [];
  try {
    for (const source of sources) files.push(await openGguf(source, store, writes));
  } catch (e) {
    for (const f of files) f.reader?.cancel().catch(() => {});
    throw e;
  }
  let total = files.reduce((n, f) => n + declaredLength(f), 0);
  let loaded = 0;
  onProgress?.({ phase: 'download', loaded, total });
  let loader;
  try {
    // With an mmproj, it is the last file, after the language model's.
    const lm = mmproj ? files.length - 1 : files.length;
    loader = await KilnLoader.gguf(device, uploadReporter(onProgress, Math.max(total, 1)), lm, mmproj, contextLength ?? undefined);
    for (const [i, f] of files.entries()) loader.declareLength(i, declaredLength(f));
  } catch (e) {
    for (const f of files) f.reader?.cancel().catch(() => {});
    throw toError(e);
  }
  const push = (i, piece) => {
    loaded += piece.length;
    // An unknown length (no content-length) is reported as total 0 until the end.
    onProgress?.({ phase: 'download', loaded, total: total >= loaded ? total : 0 });
    loader.pushTo(i, piece);
  };
  try {
    for (const [i, f] of files.entries()) {
      while (!loader.headerIn(i)) {
        const piece = await nextPiece(f, HEADER_PIECE);
        if (!piece) break;
        push(i, piece);
      }
    }
    for (const [i, f] of files.entries()) {
      for (let piece = await nextPiece(f, PIECE); piece; piece = await nextPiece(f, PIECE)) push(i, piece);
    }
    total = loaded;
    onProgress?.({ phase: 'download', loaded: total, total });
    await Promise.all(writes);
    return loader.finish(model);
  } catch (e) {
    // Stop the downloads (and their copies into the cache), and do not keep files that failed to load.
    for (const f of files) f.reader?.cancel().catch(() => {});
    if (store) {
      await Promise.all(writes)
        .then(() => Promise.all(files.filter((f) => f.response).map((f) => store.delete(String(f.source)))))
        .catch(() => {});
    }
    throw toError(e);
  } finally {
    loader.free();
  }
}

/** Images larger than this are refused from their header, before any pixel is decoded. */
const MAX_IMAGE_PIXELS = 50e6;

/** The width and height a PNG, JPEG, GIF or WebP file declares in its header, or `null`. */
function declaredSize(b) {
  const u32 = (i) => ((b[i] << 24) | (b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3]) >>> 0;
  const u16le = (i) => b[i] | (b[i + 1] << 8);
  if (b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return [u32(16), u32(20)];
  if (b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46) return [u16le(6), u16le(8)];
  if (b[0] === 0x52 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x46 && b[8] === 0x57 && b[9] === 0x45) {
    const kind = String.fromCharCode(b[12], b[13], b[14], b[15]);
    if (kind === 'VP8X') return [1 + (b[24] | (b[25] << 8) | (b[26] << 16)), 1 + (b[27] | (b[28] << 8) | (b[29] << 16))];
    if (kind === 'VP8L') {
      const v = b[21] | (b[22] << 8) | (b[23] << 16) | (b[24] << 24);
      return [1 + (v & 0x3fff), 1 + ((v >>> 14) & 0x3fff)];
    }
    if (kind === 'VP8 ') return [u16le(26) & 0x3fff, u16le(28) & 0x3fff];
    return null;
  }
  if (b[0] === 0xff && b[1] === 0xd8) {
    // JPEG: the first start-of-frame marker holds the size.
    for (let i = 2; i + 9 < b.length;) {
      if (b[i] !== 0xff) return null;
      const marker = b[i + 1];
      const len = (b[i + 2] << 8) | b[i + 3];
      if (marker >= 0xc0 && marker <= 0xcf && ![0xc4, 0xc8, 0xcc].includes(marker)) {
        return [(b[i + 7] << 8) | b[i + 8], (b[i + 5] << 8) | b[i + 6]];
      }
      i += 2 + len;
    }
  }
  return null;
}

/**
 * The images of a chat request's `image_url` parts, in order, decoded as the browser decodes them
 * (`createImageBitmap` with the file's EXIF orientation applied, then the canvas' RGBA pixels):
 * `[{ width, height, data }]`. `data:`, `blob:`, `http:` and `https:` URLs are fetched with `fetch`. A part
 * that cannot be fetched, is not an image the browser decodes, or declares more than 50 megapixels is a
 * 400 naming it.
 */
async function decodeImages(request, fetch = globalThis.fetch) {
  const images = [];
  const messages = Array.isArray(request?.messages) ? request.messages : [];
  for (const [i, m] of messages.entries()) {
    const parts = Array.isArray(m?.content) ? m.content : [];
    for (const [j, part] of parts.entries()) {
      if (part?.type !== 'image_url') continue;
      const param = `messages[${i}].content[${j}].image_url`;
      const refuse = (message, code = 'invalid_image') => new KilnError({ status: 400, error: { message: `\`${param}\`: ${message}`, type: 'invalid_request_error', param, code } });
      const url = part.image_url?.url;
      if (typeof url !== 'string') throw refuse('`url` must be a string');
      let bytes;
      try {
        const response = await fetch(url);
        if (!response.ok) throw refuse(`fetching the image failed: HTTP ${response.status}`, 'image_fetch_failed');
        bytes = new Uint8Array(await response.arrayBuffer());
      } catch (e) {
        throw e instanceof KilnError ? e : refuse(`fetching the image failed: ${e?.message ?? e}`, 'image_fetch_failed');
      }
      const size = declaredSize(bytes);
      if (!size) throw refuse('not a PNG, JPEG, GIF or WebP image');
      if (size[0] * size[1] > MAX_IMAGE_PIXELS) throw refuse(`the image declares ${size[0]}×${size[1]} pixels, more than 50 megapixels`);
      let bitmap;
      try {
        bitmap = await createImageBitmap(new Blob([bytes]), { imageOrientation: 'from-image', colorSpaceConversion: 'none', premultiplyAlpha: 'none' });
      } catch (e) {
        throw refuse(`the image does not decode: ${e?.message ?? e}`);
      }
      const { width, height } = bitmap;
      const canvas = new OffscreenCanvas(width, height);
      const context = canvas.getContext('2d');
      context.drawImage(bitmap, 0, 0);
      bitmap.close();
      images.push({ width, height, data: context.getImageData(0, 0, width, height).data });
    }
  }
  return images;
}

const baseName = (url) => decodeURIComponent(new URL(String(url), globalThis.location?.href).pathname.split('/').pop());

/**
 * The files of a Hugging Face model: `{ config, tokenizer, tokenizerConfig?, chatTemplate?,
 * generationConfig?, index?, preprocessor?, weights }` (`preprocessor`: a vision-language model's
 * `preprocessor_config.json`), each a URL or bytes; `weights` a list of URLs, bytes, or
 * `{ name, url | bytes }` (a shard's name is what `index` refers to).
 */
async function hfFiles(source, cache, onProgress) {
  if (!Array.isArray(source.weights) || source.weights.length === 0) {
    throw sourceError('`source.weights` must list the safetensors files (URLs or bytes)');
  }
  const keys = ['config', 'tokenizer', 'tokenizerConfig', 'chatTemplate', 'generationConfig', 'index', 'preprocessor']
    .filter((k) => source[k] !== undefined && source[k] !== null);
  for (const k of Object.keys(source)) {
    if (k !== 'weights' && !keys.includes(k)) throw sourceError(`\`source.${k}\` is not a model file kiln knows`);
  }
  const weights = source.weights.map((w, i) => {
    if (isUrl(w)) return { name: baseName(w), item: w };
    if (isBytes(w)) return { name: source.weights.length === 1 ? 'model.safetensors' : `model-${i}.safetensors`, item: w };
    if (w && (isUrl(w.url) || isBytes(w.bytes))) return { name: w.name ?? baseName(w.url), item: w.url ?? w.bytes };
    throw sourceError(`\`source.weights[${i}]\` is not a URL, bytes or { name, url | bytes }`);
  });
  const fetched = await download([...keys.map((k) => source[k]), ...weights.map((w) => w.item)], cache, onProgress);
  const files = { weights: weights.map((w, i) => ({ name: w.name, bytes: fetched[keys.length + i] })) };
  keys.forEach((k, i) => {
    files[k] = k === 'chatTemplate' ? new TextDecoder().decode(fetched[i]) : fetched[i];
  });
  return files;
}

/**
 * The files of `source = { model, mmproj }` in load order: the language model's GGUF (a URL or bytes, or
 * the list of a split model's files), then its mmproj.
 */
function ggufPair(source) {
  for (const k of Object.keys(source)) {
    if (k !== 'model' && k !== 'mmproj') throw sourceError(`\`source.${k}\` is not part of \`{ model, mmproj }\``);
  }
  const lm = Array.isArray(source.model) ? source.model : shardSources(source.model);
  if (lm.length === 0 || !lm.every(isGguf)) {
    throw sourceError('`source.model` must be the URL or bytes of the language model\'s .gguf file (or the list of a split model\'s files)');
  }
  if (!isGguf(source.mmproj)) {
    throw sourceError('`source.mmproj` must be the URL or bytes of the model\'s mmproj .gguf file');
  }
  return [...lm, source.mmproj];
}

/**
 * The GGUF files of `source`, as `load` and `inspect` take it: `{ files, mmproj }` (the language model's
 * files in order, then the mmproj's where `mmproj` is true), or `null` when `source` is not a GGUF source
 * (a Hugging Face model's files, or nothing valid). A lone URL of a split model's first file stands for all
 * of its files.
 */
function ggufSources(source) {
  if (isPair(source)) return { files: ggufPair(source), mmproj: true };
  if (Array.isArray(source) && source.length > 0 && source.every(isGguf)) return { files: source, mmproj: false };
  if (isGguf(source)) return { files: shardSources(source), mmproj: false };
  return null;
}

/** Reports the parse and upload phases from the wasm module's `(loaded, total)` upload callback. */
function uploadReporter(onProgress, size) {
  let parsed = false;
  onProgress?.({ phase: 'parse', loaded: 0, total: size });
  return (loaded, total) => {
    if (!parsed) {
      parsed = true;
      onProgress?.({ phase: 'parse', loaded: size, total: size });
    }
    onProgress?.({ phase: 'upload', loaded, total });
  };
}

/** A first-in, first-out lock: each request runs alone, in the order `create` was called. */
class Queue {
  #tail = Promise.resolve();
  acquire() {
    let release;
    const held = new Promise((resolve) => { release = resolve; });
    const turn = this.#tail.then(() => release);
    this.#tail = this.#tail.then(() => held);
    return turn;
  }
}

export class Engine {
  #model;
  #queue = new Queue();

  /**
   * What a model picker needs before the download: reads only the headers of `source` (any GGUF source
   * `load` takes; each file's first megabytes, its download stopped once the header is in) and resolves to
   * `{ architecture, name, files, parameters, tensorBytes, largestTensor: { name, bytes }, types, layers,
   * vocabSize, contextLength, chatTemplate, vision, device: { runs, weightBytes, contextLength, error },
   * deviceInfo }`: `device.runs` says whether `load` on this `device` (`'auto'` by default, chosen as `load`
   * chooses) would get past the headers, `device.error` why not (the load's message: the weights against
   * the CPU backend's 4 GiB address space, a row against the largest storage binding, …), and
   * `device.contextLength` the context it would grant; `hostMemoryGiB` what the browser tells of the
   * machine's memory (`navigator.deviceMemory`, or null). `cache: true` reads a file the Cache API holds.
   */
  static async inspect(source, { device = 'auto', cache = false, threads, wasm } = {}) {
    device ??= 'auto';
    if (!['webgpu', 'cpu', 'auto'].includes(device)) {
      throw optionError('device', `\`device\` must be "webgpu", "cpu" or "auto", got ${JSON.stringify(device)}`);
    }
    const gguf = ggufSources(source);
    if (!gguf) throw sourceError('`source` must be the URL, bytes or Blob of a .gguf file, a list of them (the files of a split model, in order) or `{ model, mmproj }`');
    const build = await buildFor(device, threads, wasm);
    const store = cache && globalThis.caches && gguf.files.some(isUrl) ? await caches.open('kiln-models') : null;
    const files = [];
    let inspector;
    try {
      // Read from the cache where it holds a file, never written to: only the headers are read.
      for (const x of gguf.files) files.push(await openGguf(x, store, null));
      inspector = new build.wasm.KilnInspector(gguf.mmproj ? files.length - 1 : files.length, gguf.mmproj);
      for (const [i, f] of files.entries()) {
        inspector.declareLength(i, declaredLength(f));
        while (!inspector.headerIn(i)) {
          const piece = await nextPiece(f, HEADER_PIECE);
          if (!piece) break;
          inspector.pushTo(i, piece);
        }
      }
      const report = await inspector.report(build.device);
      // What the browser tells of the machine's memory (`navigator.deviceMemory`: GiB, rounded down to a
      // power of two and capped, where the browser gives it at all). WebGPU says nothing of the GPU's.
      return { ...report, hostMemoryGiB: globalThis.navigator?.deviceMemory ?? null };
    } catch (e) {
      throw toError(e);
    } finally {
      for (const f of files) f.reader?.cancel().catch(() => {});
      inspector?.free();
    }
  }

  /**
   * Loads a model. `source`: a URL of a `.gguf` file, its bytes (`Uint8Array` / `ArrayBuffer`) or a `Blob`
   * / `File` (read in slices: a file past 4 GiB loads on WebGPU), or a list of them (a model split by
   * llama.cpp's `gguf-split`, in order; the URL of the first, `…-00001-of-0000n.gguf`, finds the others by
   * name), or `{ model,
   * mmproj }` (a vision-language model in llama.cpp's layout: the language model's GGUF, or its list, and
   * its `mmproj` GGUF; both stream), or a Hugging Face model's files `{ config, tokenizer, tokenizerConfig?, chatTemplate?, generationConfig?,
   * index?, weights: [...] }` (URLs or bytes). `device`: `'webgpu'`, `'cpu'` or `'auto'` (WebGPU when there is
   * an adapter, else the CPU backend). `onProgress({ phase, loaded, total })`: `download` (bytes fetched),
   * `parse`, then `upload` (bytes of weights on the device). A GGUF file streams: each tensor goes to the
   * device as soon as its bytes have arrived (the phases interleave), so the file is never whole in wasm
   * memory. `quantize` (`'q8_0'`, `'q4_k'`, …; Hugging Face sources only) quantizes the float weight
   * matrices as they load, with kiln's own quantizers. `chatTemplate` (a Jinja chat template string)
   * serves chat requests with it instead of the model's own, or gives one to a model that has none (a base
   * model: without one, chat requests are a 400 `no_chat_template` and completions still work).
   * `prefixCacheBytes` (default 128 MiB) bounds the KV states kept of recent sequences: a request whose
   * prompt starts with one (the earlier turns of a chat) prefills only the rest, and reports the reused
   * tokens as `usage.prompt_tokens_details.cached_tokens`; 0 keeps none. `contextLength` (default the
   * model's own, capped where the device has no room for the KV cache) bounds the positions a request may
   * take; `engine.context` says what was granted and why. Every size limit is checked from the headers,
   * before the rest of the download: a model the device cannot hold is refused at once, with its numbers.
   */
  static async load({ model, source, onProgress, cache = false, device = 'auto', quantize, chatTemplate, prefixCacheBytes, contextLength, threads, wasm } = {}) {
    if (typeof model !== 'string' || model === '') {
      throw new KilnError({ status: 422, error: { message: '`model` (the id requests name) must be a non-empty string', type: 'invalid_request_error', param: 'model', code: 'invalid_value' } });
    }
    if (chatTemplate !== undefined && chatTemplate !== null && typeof chatTemplate !== 'string') {
      throw new KilnError({ status: 422, error: { message: '`chatTemplate` must be a string (a Jinja chat template)', type: 'invalid_request_error', param: 'chatTemplate', code: 'invalid_value' } });
    }
    if (prefixCacheBytes !== undefined && prefixCacheBytes !== null && !(Number.isInteger(prefixCacheBytes) && prefixCacheBytes >= 0)) {
      throw new KilnError({ status: 422, error: { message: '`prefixCacheBytes` must be a whole number of bytes (0 or more)', type: 'invalid_request_error', param: 'prefixCacheBytes', code: 'invalid_value' } });
    }
    if (contextLength !== undefined && contextLength !== null && !(Number.isInteger(contextLength) && contextLength >= 1 && contextLength <= 0xffffffff)) {
      throw optionError('contextLength', '`contextLength` must be a whole number of positions, 1 or more');
    }
    device ??= 'auto';
    if (!['webgpu', 'cpu', 'auto'].includes(device)) {
      throw optionError('device', `\`device\` must be "webgpu", "cpu" or "auto", got ${JSON.stringify(device)}`);
    }
    const build = await buildFor(device, threads, wasm);
    const { KilnModel } = build.wasm;
    let inner;
    if (quantize !== undefined && quantize !== null) {
      // Refused before anything is downloaded.
      try {
        build.wasm.checkQuantize(String(quantize));
      } catch (e) {
        throw toError(e);
      }
    }
    // Refused before a pair's files are checked (`ggufSources` checks them; nothing else in it throws).
    if (quantize !== undefined && quantize !== null && (isPair(source) || ggufSources(source))) {
      throw new KilnError({ status: 422, error: { message: '`quantize` applies to Hugging Face (safetensors) sources; a GGUF file keeps the types it was quantized to', type: 'invalid_request_error', param: 'quantize', code: 'invalid_value' } });
    }
    const gguf = ggufSources(source);
    if (gguf) {
      inner = await streamGguf(build.wasm, model, gguf.files, { cache, device: build.device, onProgress, mmproj: gguf.mmproj, contextLength });
    } else if (source && typeof source === 'object' && 'config' in source) {
      const files = await hfFiles(source, cache, onProgress);
      const size = files.weights.reduce((n, w) => n + w.bytes.length, 0);
      try {
        inner = await KilnModel.fromHf(model, files, build.device, uploadReporter(onProgress, size), quantize ?? undefined, contextLength ?? undefined);
      } catch (e) {
        throw toError(e);
      }
    } else {
      throw sourceError('`source` must be the URL, bytes or Blob of a .gguf file (the first file of a split model finds the others by name), a list of them (the files of a split model, in order), `{ model, mmproj }` (a vision-language model in llama.cpp\'s two files), or `{ config, tokenizer, weights, ... }`');
    }
    if (typeof chatTemplate === 'string') {
      try {
        inner = inner.withChatTemplate(chatTemplate);
      } catch (e) {
        throw toError(e);
      }
    }
    if (typeof prefixCacheBytes === 'number') {
      try {
        inner = inner.withPrefixCache(prefixCacheBytes);
      } catch (e) {
        throw toError(e);
      }
    }
    return new Engine(inner, inner.device.kind === 'cpu' ? build.threads : null);
  }

  constructor(inner, threads = null) {
    this.#model = inner;
    /**
     * On the CPU backend, the build the model runs on and its threads: `{ build: 'threads' | 'single',
     * count, requested, cores, note }`; `null` on WebGPU.
     */
    this.threads = threads;
    /** When the model was loaded (Unix seconds): `created` in `GET /v1/models`. */
    this.loadedAt = Math.floor(Date.now() / 1000);
    this.chat = { completions: { create: (request, options) => this.#create('chat', request, options) } };
    this.completions = { create: (request, options) => this.#create('completion', request, options) };
    /**
     * A WHATWG `fetch` answering `POST /v1/chat/completions`, `POST /v1/completions` and `GET /v1/models`
     * under any base URL (see `http.js`): give it to an OpenAI client as its `fetch`.
     */
    this.fetch = (input, init) => serve(this, input, init);
  }

  /** The id requests name in `model`. */
  get model() { return this.#model?.id ?? null; }

  /**
   * What the model takes besides text: `{ images: true, imageSize, tokensPerImage }` for a vision-language
   * model (chat requests take `image_url` parts), `null` for a text model.
   */
  get vision() { return this.#model?.vision ?? null; }

  /** The device the model runs on: `{ kind, backend, adapter, deviceType, shaderF16, subgroups, features, limits, gemv }`. */
  get device() { return this.#model?.device ?? null; }

  /**
   * The context the load granted: `{ length, modelLength, kvBytesPerPosition, bound }`. `length` positions
   * (prompt and completion) a request may take — a longer one is a 400 `context_length_exceeded`;
   * `modelLength` the model's own; `bound` what limits `length`: `'model'`, `'option'` (`contextLength`),
   * `'memory'` (the CPU backend's address space, or on WebGPU, where the device's memory is not reported,
   * a KV cache of 2 GiB unless `contextLength` asks for more) or `'binding'` (a layer's keys must fit one
   * storage buffer binding).
   */
  get context() { return this.#model?.context ?? null; }

  /**
   * The model's bytes now: `{ weightBytes, prefixCacheBytes, deviceBytesInUse, deviceBytesReserved }` (weights
   * as held on the device, quantized blocks packed; the kept KV states of the prefix cache; the device
   * allocator's figures, `null` on the CPU backend).
   */
  get memory() { return this.#model?.memory ?? null; }

  /** Frees the model's device memory; the engine cannot be used afterwards. */
  async unload() {
    const release = await this.#queue.acquire();
    this.#model?.free();
    this.#model = null;
    release();
  }

  /**
   * Validates `request` (throwing its KilnError) and returns its stream; nothing runs yet. A chat request
   * to a vision-language model has its images decoded first.
   */
  async #begin(kind, request, onImages) {
    if (!this.#model) throw notLoadedError();
    const start = performance.now();
    const images = kind === 'chat' && this.#model.vision ? await decodeImages(request) : undefined;
    let stream;
    try {
      stream = kind === 'chat' ? this.#model.chatStream(request, images) : this.#model.completionStream(request);
    } catch (e) {
      throw toError(e);
    }
    if (typeof onImages === 'function' && images?.length) {
      let info;
      try {
        info = await stream.images();
      } catch (e) {
        stream.close();
        throw toError(e);
      }
      if (info) onImages({ ...info, encodeMs: performance.now() - start });
    }
    return stream;
  }

  async #create(kind, request, { signal, onImages } = {}) {
    // Validation happens here, before any device work and before waiting for earlier requests.
    return this.#run(await this.#begin(kind, request, onImages), request, signal);
  }

  /** For `fetch`: validates now, and resolves to `{ result }`, the promise of the answer once it has its turn. */
  async [accept](kind, request, { signal, onImages } = {}) {
    const result = this.#run(await this.#begin(kind, request, onImages), request, signal);
    result.catch(() => {});
    return { result };
  }

  async #run(stream, request, signal) {
    const release = await this.#queue.acquire();
    if (signal?.aborted) {
      stream.close();
      release();
      throw abortError();
    }
    if (!request.stream) {
      const onAbort = () => stream.close();
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        return await stream.collect();
      } catch (e) {
        throw signal?.aborted ? abortError() : toError(e);
      } finally {
        signal?.removeEventListener('abort', onAbort);
        release();
      }
    }
    return chunks(stream, signal, release);
  }
}

/** The async iterator of a streamed request; ending it early (break, abort) frees the generation. */
async function* chunks(stream, signal, release) {
  try {
    for (;;) {
      if (signal?.aborted) throw abortError();
      let chunk;
      try {
        chunk = await stream.next();
      } catch (e) {
        throw toError(e);
      }
      if (chunk === undefined) return;
      yield chunk;
    }
  } finally {
    stream.close();
    release();
  }
}

// ---------------------------------------------------------------------------------------------------------
// WorkerEngine: the same interface, with the model inside a module Web Worker running `./worker.js`.
// ---------------------------------------------------------------------------------------------------------

/**
 * `source` with its GGUF URLs absolute against this page (a worker resolves relative URLs against its own
 * script): a URL, a list of them, or `{ model, mmproj }`; anything else as it is.
 */
export function absoluteSource(source) {
  const absolute = (x) => (isUrl(x) ? new URL(String(x), globalThis.location?.href).href : x);
  const each = (x) => (Array.isArray(x) ? x.map(absolute) : absolute(x));
  if (isPair(source)) {
    return { ...source, model: each(source.model), mmproj: absolute(source.mmproj) };
  }
  return each(source);
}

/** An error as it crosses postMessage (structured clone keeps neither the class nor `status`/`error`). */
export function errorMessage(e) {
  if (e instanceof KilnError) return { kind: 'kiln', body: { status: e.status, error: e.error } };
  if (e?.name === 'AbortError') return { kind: 'abort' };
  return { kind: 'error', message: String(e?.message ?? e) };
}

function errorFromMessage(m) {
  if (m.kind === 'kiln') return new KilnError(m.body);
  if (m.kind === 'abort') return abortError();
  return new Error(m.message);
}

/** The chunks of one streamed request arriving from the worker, as an async iterator. */
class Channel {
  #items = [];
  #waiting = null;
  push(item) {
    if (this.#waiting) {
      this.#waiting(item);
      this.#waiting = null;
    } else {
      this.#items.push(item);
    }
  }
  take() {
    return this.#items.length ? Promise.resolve(this.#items.shift()) : new Promise((r) => { this.#waiting = r; });
  }
}

export class WorkerEngine {
  #worker;
  #next = 1;
  /** Request id → `{ resolve, reject, channel }`. */
  #pending = new Map();

  /**
   * Loads a model inside `worker`, a module Worker running kiln's `worker.js` (`new Worker(new
   * URL('kiln-llm/worker', import.meta.url), { type: 'module' })`, or a file of your own that imports
   * `kiln-llm/worker`). `options` as for `Engine.load`; `onProgress` is called here, on this thread.
   */
  static async load(worker, { onProgress, ...options } = {}) {
    const engine = new WorkerEngine(worker);
    // The worker resolves relative URLs against its own script; the caller meant this page.
    options.source = absoluteSource(options.source);
    const info = await engine.#call({ kiln: 'load', options, progress: Boolean(onProgress) }, onProgress);
    engine.loadedAt = Math.floor(Date.now() / 1000);
    engine.model = info.model;
    engine.device = info.device;
    /** As `Engine.threads`: the build and threads of a CPU model in the worker (`null` on WebGPU). */
    engine.threads = info.threads;
    /** The model's bytes when the load finished (the worker's `Engine.memory` then). */
    engine.memory = info.memory;
    /** As `Engine.vision`. */
    engine.vision = info.vision;
    /** As `Engine.context`. */
    engine.context = info.context;
    return engine;
  }

  /** As `Engine.inspect` (on this thread: it reads headers only and places nothing). */
  static inspect(source, options) {
    return Engine.inspect(source, options);
  }

  constructor(worker) {
    this.#worker = worker;
    worker.addEventListener('message', (event) => this.#receive(event.data));
    worker.addEventListener('error', (event) => {
      const error = new Error(`kiln worker failed: ${event.message ?? 'error'}`);
      for (const p of this.#pending.values()) p.fail(error);
      this.#pending.clear();
    });
    this.chat = { completions: { create: (request, options) => this.#create('chat', request, options) } };
    this.completions = { create: (request, options) => this.#create('completion', request, options) };
    /** As `Engine.fetch`: OpenAI's HTTP endpoints, answered by the model in the worker. */
    this.fetch = (input, init) => serve(this, input, init);
  }

  /** For `fetch`: resolves to `{ result }` once the worker has validated the request (rejects if it is invalid). */
  async [accept](kind, request, options) {
    let accepted;
    const validated = new Promise((resolve) => { accepted = resolve; });
    const result = this.#create(kind, request, options, accepted);
    result.catch(() => {});
    await Promise.race([validated, result]);
    return { result };
  }

  /** Frees the model inside the worker (the worker itself stays yours to terminate). */
  async unload() {
    await this.#call({ kiln: 'unload' });
  }

  #receive(m) {
    const p = this.#pending.get(m?.id);
    if (!p) return;
    switch (m.kiln) {
      case 'progress': p.progress?.(m.progress); break;
      case 'chunk': p.channel.push({ chunk: m.chunk }); break;
      case 'end': p.channel.push({ end: true }); this.#pending.delete(m.id); break;
      case 'accepted': p.accepted?.(); break;
      case 'images': p.onImages?.(m.images); break;
      case 'stream': p.resolve(p.channel); break;
      case 'result': p.resolve(m.value); this.#pending.delete(m.id); break;
      case 'error': p.fail(errorFromMessage(m.error)); this.#pending.delete(m.id); break;
      default: break;
    }
  }

  /** Posts `message` with a fresh id; resolves with its `result` (or, for a stream, its channel). */
  #call(message, progress, accepted, onImages) {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const entry = { resolve, progress, accepted, onImages, channel: new Channel() };
      // Before the stream starts, a failure rejects the call; after, it ends the iterator with the error.
      entry.fail = (error) => {
        reject(error);
        entry.channel.push({ error });
      };
      this.#pending.set(id, entry);
      this.#worker.postMessage({ ...message, id });
    });
  }

  async #create(kind, request, { signal, onImages } = {}, accepted = undefined) {
    if (signal?.aborted) throw abortError();
    const id = this.#next;
    const onAbort = () => this.#worker.postMessage({ kiln: 'abort', id });
    signal?.addEventListener('abort', onAbort, { once: true });
    let result;
    try {
      const images = typeof onImages === 'function';
      result = await this.#call({ kiln: 'create', kind, request, images }, undefined, accepted, images ? onImages : undefined);
    } catch (e) {
      signal?.removeEventListener('abort', onAbort);
      throw signal?.aborted ? abortError() : e;
    }
    if (!request?.stream) {
      signal?.removeEventListener('abort', onAbort);
      return result;
    }
    return this.#chunks(id, result, signal, onAbort);
  }

  async* #chunks(id, channel, signal, onAbort) {
    let finished = false;
    try {
      for (;;) {
        if (signal?.aborted) throw abortError();
        const item = await channel.take();
        if (signal?.aborted) throw abortError();
        if (item.error) throw item.error;
        if (item.end) {
          finished = true;
          return;
        }
        yield item.chunk;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!finished) {
        // Ended early (break, abort, error): stop the generation in the worker.
        this.#pending.delete(id);
        this.#worker.postMessage({ kiln: 'abort', id });
      }
    }
  }
}
