// Shared by the benchmark pages (bench/page.js, bench/families-page.js).

/**
 * wllama runs llama.cpp in a module Worker, out of the page's reach. To see that worker's wasm memory, the
 * Worker constructor is wrapped for this page: the worker first runs a module that records every
 * `WebAssembly.Memory` it creates or instantiates and answers size queries on a BroadcastChannel, then
 * wllama's own worker code, unchanged. `channel` names the BroadcastChannel (one per page kind).
 */
export function watchWorkerMemory(channel) {
  const probe = `
    const memories = [];
    const keep = (m) => { if (m instanceof WebAssembly.Memory && !memories.includes(m)) memories.push(m); return m; };
    const fromResult = (r) => { const inst = r.instance ?? r; for (const v of Object.values(inst.exports ?? {})) keep(v); return r; };
    const Memory = WebAssembly.Memory;
    WebAssembly.Memory = new Proxy(Memory, { construct: (T, args) => keep(new T(...args)) });
    for (const name of ['instantiate', 'instantiateStreaming']) {
      const f = WebAssembly[name];
      if (f) WebAssembly[name] = (...args) => f.apply(WebAssembly, args).then(fromResult);
    }
    const Instance = WebAssembly.Instance;
    WebAssembly.Instance = new Proxy(Instance, { construct: (T, args) => fromResult(new T(...args)) });
    new BroadcastChannel(${JSON.stringify(channel)}).onmessage = (e) => {
      if (e.data === 'query') {
        const bytes = memories.map((m) => m.buffer.byteLength);
        new BroadcastChannel(${JSON.stringify(channel)}).postMessage({ bytes });
      }
    };`;
  const probeUrl = URL.createObjectURL(new Blob([probe], { type: 'text/javascript' }));
  const Base = window.Worker;
  window.Worker = class extends Base {
    constructor(url, options) {
      if (options?.type === 'module') {
        const wrapper = `import ${JSON.stringify(probeUrl)};\nimport ${JSON.stringify(String(url))};\n`;
        super(URL.createObjectURL(new Blob([wrapper], { type: 'text/javascript' })), options);
      } else {
        super(url, options);
      }
    }
  };
  return () => new Promise((resolve) => {
    const answers = new BroadcastChannel(channel);
    const timer = setTimeout(() => resolve(null), 5000);
    answers.onmessage = (e) => {
      if (!e.data?.bytes) return;
      clearTimeout(timer);
      answers.close();
      resolve(e.data.bytes.length ? Math.max(...e.data.bytes) : null);
    };
    answers.postMessage('query');
  });
}
