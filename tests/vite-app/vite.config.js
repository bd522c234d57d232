// Module workers (kiln's worker imports the package's ES modules). The dev server and `vite preview` send the
// cross-origin isolation headers, which kiln's threaded CPU build needs (SharedArrayBuffer); a host serving
// `dist/` must send them too (tests/e2e/package.test.mjs does).
const isolation = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };
export default {
  worker: { format: 'es' },
  build: { target: 'es2022' },
  server: { headers: isolation },
  preview: { headers: isolation },
  logLevel: 'warn',
};
