// `kiln-llm/worker`: imported inside a module Web Worker, it serves `WorkerEngine` requests (see index.d.ts).
export {};
