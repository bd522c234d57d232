// `kiln-llm/service-worker`: kiln as OpenAI's HTTP endpoints on the page's own origin. Run this module as a
// module Service Worker (the page registers it with `registerServiceWorker` from `kiln-llm`); it answers
// `POST /v1/chat/completions`, `POST /v1/completions` and `GET /v1/models` for every page and script of the
// origin in its scope, in every tab, with one model loaded once for all of them. Every other request goes
// to the network untouched.
//
// Messages from a page (each with a MessagePort for the answer):
//   { kiln: 'load', options }  → { kiln: 'loaded', model, device } | { kiln: 'error', error }
// and to every page of the origin while a model loads: { kiln: 'progress', progress }.
//
// The load options are kept in the Cache API (and the model file too: loads here always use `cache: true`).
// The browser stops an idle Service Worker and starts it again for the next request; that request then loads
// the model again, from the cache, instead of failing.
import { Engine, KilnError, errorMessage, notLoadedError } from './index.js';
import { errorResponse, route } from './http.js';

const STORE = 'kiln-service-worker';
const OPTIONS_KEY = new URL('kiln-load-options.json', self.registration.scope).href;

/** The model's load: `{ key, engine: Promise<Engine> }`, or `null` before the first. */
let current = null;

async function savedOptions() {
  const found = await (await caches.open(STORE)).match(OPTIONS_KEY);
  return found ? found.json() : null;
}

async function saveOptions(options) {
  const body = JSON.stringify(options);
  await (await caches.open(STORE)).put(OPTIONS_KEY, new Response(body, { headers: { 'content-type': 'application/json' } }));
}

async function broadcast(message) {
  for (const client of await self.clients.matchAll({ includeUncontrolled: true })) client.postMessage(message);
}

/**
 * The engine for `options` (JSON-safe load options, `source` an absolute URL): the one loaded or loading when
 * the options are the same, else a new load (the previous model is unloaded first).
 */
function load(options) {
  const key = JSON.stringify(options);
  if (current?.key === key) return current.engine;
  const previous = current?.engine;
  const engine = (async () => {
    await (await previous?.catch(() => null))?.unload();
    return Engine.load({ ...options, cache: true, onProgress: (progress) => broadcast({ kiln: 'progress', progress }) });
  })();
  const entry = { key, engine };
  current = entry;
  // A failed load is not kept: the next request or `load` tries again.
  engine.catch(() => {
    if (current === entry) current = null;
  });
  return engine;
}

/** The engine to answer a request with: the current one, or the saved options loaded again after a restart. */
async function engineForRequest() {
  if (current) return current.engine;
  const options = await savedOptions();
  if (!options) throw notLoadedError();
  return load(options);
}

async function answer(request) {
  let engine;
  try {
    engine = await engineForRequest();
  } catch (e) {
    if (e instanceof KilnError) return errorResponse(e);
    return errorResponse({
      status: 500,
      error: { message: `the model could not be loaded: ${e?.message ?? e}`, type: 'server_error', param: null, code: 'model_load_failed' },
    });
  }
  return engine.fetch(request);
}

self.addEventListener('install', (event) => event.waitUntil(self.skipWaiting()));
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (url.origin !== self.location.origin || !url.href.startsWith(self.registration.scope)) return;
  if (!route(url.pathname)) return;
  event.respondWith(answer(event.request));
});

self.addEventListener('message', (event) => {
  const m = event.data;
  const port = event.ports[0];
  if (!m || typeof m.kiln !== 'string' || !port) return;
  if (m.kiln !== 'load') return;
  event.waitUntil((async () => {
    try {
      await self.clients.claim();
      const engine = await load(m.options);
      await saveOptions(m.options);
      port.postMessage({ kiln: 'loaded', model: engine.model, device: engine.device });
    } catch (e) {
      port.postMessage({ kiln: 'error', error: errorMessage(e) });
    }
  })());
});
