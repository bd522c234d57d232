// The page's side of kiln's Service Worker (`kiln-llm/service-worker`): register it, have it load a model (once
// for every tab of the origin), and follow the load's progress. After that, plain `fetch('/v1/chat/completions',
// …)` from any script of the origin is answered by the model, and so is an OpenAI client whose base URL is the
// origin's `/v1`.
import { KilnError, absoluteSource } from './index.js';

/** An error as the worker posts it (`errorMessage` in index.js), back as a thrown value. */
function thrown(m) {
  if (m.kind === 'kiln') return new KilnError(m.body);
  return new Error(m.message ?? 'kiln service worker failed');
}

/** Resolves once `registration` has an active worker. */
function activeWorker(registration) {
  const worker = registration.active;
  if (worker) return Promise.resolve(worker);
  const pending = registration.installing ?? registration.waiting;
  return new Promise((resolve, reject) => {
    pending.addEventListener('statechange', function changed() {
      if (pending.state === 'activated') resolve(pending);
      if (pending.state === 'redundant') reject(new Error('the kiln service worker failed to install'));
    });
  });
}

/** Resolves once this page is controlled by the worker. */
function controlled() {
  if (navigator.serviceWorker.controller) return Promise.resolve();
  return new Promise((resolve) => {
    navigator.serviceWorker.addEventListener('controllerchange', () => resolve(), { once: true });
  });
}

/**
 * Registers `script` (a module that imports `kiln-llm/service-worker`, or that file itself when it is served
 * from the origin) as a module Service Worker with `scope` (default: the script's folder; `/` needs the
 * server's `Service-Worker-Allowed: /` header when the script lives deeper), and loads the model: `options` as
 * for `Engine.load` (JSON-safe: `source` URLs, not bytes; `cache` is always on). Tabs that ask for the same
 * model share the one the worker has. `onProgress({ phase, loaded, total })` is called on this page while it
 * loads. Resolves with `{ model, device, registration }`; rejects with the load's KilnError.
 */
export async function registerServiceWorker(script, { scope, onProgress, ...options } = {}) {
  if (!('serviceWorker' in navigator)) {
    throw new Error('this page has no Service Workers (they need a secure context: https or localhost)');
  }
  options.source = absoluteSource(options.source);
  const registration = await navigator.serviceWorker.register(script, { type: 'module', scope });
  const worker = await activeWorker(registration);
  const onMessage = (event) => {
    if (event.data?.kiln === 'progress') onProgress?.(event.data.progress);
  };
  navigator.serviceWorker.addEventListener('message', onMessage);
  navigator.serviceWorker.startMessages();
  try {
    const channel = new MessageChannel();
    const reply = new Promise((resolve) => { channel.port1.onmessage = (event) => resolve(event.data); });
    worker.postMessage({ kiln: 'load', options }, [channel.port2]);
    const m = await reply;
    channel.port1.close();
    if (m.kiln === 'error') throw thrown(m.error);
    // The worker claims this page as it loads (also when it was active already, after a hard reload).
    await controlled();
    return { model: m.model, device: m.device, registration };
  } finally {
    navigator.serviceWorker.removeEventListener('message', onMessage);
  }
}
