// A web app as a user writes it: `npm install kiln-llm` (here, the packed tarball), bundled by Vite. The
// model runs in a module Web Worker (./worker.js imports `kiln-llm/worker`), and once on this thread (on the
// CPU: the package's threaded build, as the page is cross-origin isolated).
import { Engine, WorkerEngine, KilnError } from 'kiln-llm';

const source = '/fixtures/gguf/tiny-llama.gguf';
const request = {
  model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
  logit_bias: { 0: -100, 1: -100, 2: -100 },
};

async function main() {
  const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const inWorker = await WorkerEngine.load(worker, { model: 'tiny', source, device: 'webgpu' });
  const viaWorker = await inWorker.chat.completions.create(request);
  let streamed = '';
  for await (const chunk of await inWorker.chat.completions.create({ ...request, stream: true })) {
    streamed += chunk.choices[0]?.delta?.content ?? '';
  }
  await inWorker.unload();
  worker.terminate();
  const onPage = await Engine.load({ model: 'tiny', source, device: 'cpu' });
  const direct = await onPage.chat.completions.create(request);
  const threads = onPage.threads;
  let error = null;
  try {
    await onPage.completions.create({ model: 'tiny', prompt: 'x', top_p: 2 });
  } catch (e) {
    error = { kiln: e instanceof KilnError, param: e.param };
  }
  await onPage.unload();
  return { viaWorker, streamed, direct, threads, error };
}

main().then(
  (result) => {
    document.getElementById('out').textContent = JSON.stringify(result);
    document.body.dataset.state = 'done';
  },
  (e) => {
    document.getElementById('out').textContent = String(e?.stack ?? e);
    document.body.dataset.state = 'error';
  },
);
