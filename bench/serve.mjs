// The benchmarks' static file server (bench/bench.mjs, bench/vision.mjs): GET and HEAD of files under
// URL prefixes mapped to directories, nothing outside them, cross-origin isolated (SharedArrayBuffer for
// wllama's and kiln's threads, and precise timers), on a free port of 127.0.0.1.
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { extname, join, normalize, sep } from 'node:path';

const types = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json', '.wasm': 'application/wasm',
};

/** Serves `mounts` (`[urlPrefix, directory]` pairs); resolves to `{ base, server }` once listening. */
export async function serve(mounts) {
  const resolve = (urlPath) => {
    let path;
    try {
      path = decodeURIComponent(urlPath.split(/[?#]/)[0]);
    } catch {
      return null;
    }
    for (const [prefix, dir] of mounts) {
      if (!path.startsWith(prefix)) continue;
      const file = normalize(join(dir, path.slice(prefix.length)));
      if (file !== dir && !file.startsWith(dir + sep)) return null;
      try {
        return statSync(file).isFile() ? file : null;
      } catch {
        return null;
      }
    }
    return null;
  };
  const server = createServer((req, res) => {
    const file = req.method === 'GET' || req.method === 'HEAD' ? resolve(req.url) : null;
    if (!file) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found\n');
      return;
    }
    res.writeHead(200, {
      'Content-Type': types[extname(file)] ?? 'application/octet-stream',
      'Content-Length': statSync(file).size,
      'Cache-Control': 'no-cache',
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'cross-origin',
    });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { base: `http://127.0.0.1:${server.address().port}`, server };
}
