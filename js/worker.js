// The Web Worker side of `WorkerEngine` (js/index.js): import this module in a module Worker
// (`new Worker(new URL('kiln-llm/worker', import.meta.url), { type: 'module' })`) and the model runs there,
// off the page's main thread. Messages (all carry the request's `id`):
//   in:  { kiln: 'load', options, progress } | { kiln: 'create', kind: 'chat' | 'completion', request, images }
//        | { kiln: 'abort' } | { kiln: 'unload' }
//   out: { kiln: 'progress', progress } | { kiln: 'accepted' } (validated, waiting its turn)
//        | { kiln: 'images', images } (`images` asked: the request's images encoded, as `onImages` sees them)
//        | { kiln: 'result', value } | { kiln: 'stream' }
//        | { kiln: 'chunk', chunk } | { kiln: 'end' } | { kiln: 'error', error }
import { Engine, errorMessage, notLoadedError } from './index.js';
import { accept } from './http.js';

let engine = null;
/** Request id → its AbortController, while the request runs. */
const running = new Map();

const post = (message) => self.postMessage(message);

async function load(id, { options, progress }) {
  const onProgress = progress ? (p) => post({ kiln: 'progress', id, progress: p }) : undefined;
  if (engine) await engine.unload();
  engine = null;
  engine = await Engine.load({ ...options, onProgress });
  post({ kiln: 'result', id, value: { model: engine.model, device: engine.device, threads: engine.threads, memory: engine.memory, vision: engine.vision, context: engine.context } });
}

async function create(id, { kind, request, images }) {
  if (!engine) throw notLoadedError();
  const controller = new AbortController();
  running.set(id, controller);
  try {
    // Validated first (`accepted` tells the page, for `fetch`), then it waits its turn.
    const onImages = images ? (info) => post({ kiln: 'images', id, images: info }) : undefined;
    const { result: answer } = await engine[accept](kind, request, { signal: controller.signal, onImages });
    post({ kiln: 'accepted', id });
    const result = await answer;
    if (!request?.stream) {
      post({ kiln: 'result', id, value: result });
      return;
    }
    post({ kiln: 'stream', id });
    for await (const chunk of result) post({ kiln: 'chunk', id, chunk });
    post({ kiln: 'end', id });
  } finally {
    running.delete(id);
  }
}

async function unload(id) {
  await engine?.unload();
  engine = null;
  post({ kiln: 'result', id, value: null });
}

self.addEventListener('message', (event) => {
  const m = event.data;
  if (!m || typeof m.kiln !== 'string') return;
  if (m.kiln === 'abort') {
    running.get(m.id)?.abort();
    return;
  }
  const handler = { load, create, unload }[m.kiln];
  if (!handler) return;
  handler(m.id, m).catch((e) => post({ kiln: 'error', id: m.id, error: errorMessage(e) }));
});
