// kiln's JavaScript API: `Engine.load(...)`, then `engine.chat.completions.create(request)` and
// `engine.completions.create(request)` with the request objects of OpenAI's `POST /v1/chat/completions` and
// `POST /v1/completions`. `stream: true` resolves to an async iterator of chunks; otherwise to the full
// response. This file is plumbing only: the wasm module (`./kiln.js`) validates, generates and shapes.
import init, { KilnModel, deviceReport } from './kiln.js';

export { deviceReport };

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

let ready;
/** Initialises the wasm module once (`wasm`: where `kiln_bg.wasm` is, when not beside this file). */
function initOnce(wasm) {
  ready ??= init(wasm === undefined ? undefined : { module_or_path: wasm });
  return ready;
}

/** Fetches `url` with byte progress, through the Cache API when `cache` is on (keyed by URL). */
async function fetchBytes(url, cache, onProgress) {
  const store = cache && globalThis.caches ? await caches.open('kiln-models') : null;
  let response = store ? await store.match(url) : undefined;
  if (!response) {
    response = await fetch(url);
    if (!response.ok) {
      throw new KilnError({
        status: 400,
        error: { message: `fetching \`source\` ${url} failed: HTTP ${response.status}`, type: 'invalid_request_error', param: 'source', code: 'model_fetch_failed' },
      });
    }
    if (store) await store.put(url, response.clone());
  }
  const total = Number(response.headers.get('content-length')) || 0;
  const reader = response.body.getReader();
  const parts = [];
  let loaded = 0;
  onProgress?.({ phase: 'download', loaded, total });
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    loaded += value.length;
    onProgress?.({ phase: 'download', loaded, total: Math.max(total, loaded) });
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return bytes;
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
   * Loads a model. `source`: a URL of a `.gguf` file, or its bytes (`Uint8Array` / `ArrayBuffer`).
   * `device`: `'webgpu'`, `'cpu'` or `'auto'` (WebGPU when there is an adapter, else the CPU backend).
   */
  static async load({ model, source, onProgress, cache = false, device = 'auto', wasm } = {}) {
    await initOnce(wasm);
    const bytes = source instanceof Uint8Array ? source
      : source instanceof ArrayBuffer ? new Uint8Array(source)
        : await fetchBytes(String(source), cache, onProgress);
    onProgress?.({ phase: 'upload', loaded: 0, total: bytes.length });
    let inner;
    try {
      inner = await KilnModel.fromGguf(model ?? 'default', bytes, device);
    } catch (e) {
      throw toError(e);
    }
    onProgress?.({ phase: 'upload', loaded: bytes.length, total: bytes.length });
    return new Engine(inner);
  }

  constructor(inner) {
    this.#model = inner;
    this.chat = { completions: { create: (request, options) => this.#create('chatStream', request, options) } };
    this.completions = { create: (request, options) => this.#create('completionStream', request, options) };
  }

  /** The id requests name in `model`. */
  get model() { return this.#model.id; }

  /** The device the model runs on: `{ kind, backend, adapter, deviceType, shaderF16, limits }`. */
  get device() { return this.#model.device; }

  /** Frees the model's device memory; the engine cannot be used afterwards. */
  async unload() {
    const release = await this.#queue.acquire();
    this.#model.free();
    release();
  }

  async #create(kind, request, { signal } = {}) {
    // Validation happens here, before any device work and before waiting for earlier requests.
    let stream;
    try {
      stream = this.#model[kind](request);
    } catch (e) {
      throw toError(e);
    }
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
