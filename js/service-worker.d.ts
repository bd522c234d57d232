// `kiln-llm/service-worker`: run as a module Service Worker, it serves OpenAI's endpoints on the origin with one
// model for every tab (see `registerServiceWorker` in index.d.ts).
export {};
