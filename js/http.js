// `engine.fetch(input, init)`: kiln as an OpenAI HTTP endpoint inside the page. A WHATWG `fetch` that answers
// `POST …/v1/chat/completions`, `POST …/v1/completions` (any query, e.g. `ai_project_id`) and
// `GET …/v1/models[/{id}]` under any base URL, so an OpenAI client (openai-node, the Vercel AI SDK, LangChain.js)
// given `fetch: engine.fetch` runs on the local model unchanged.
//
// JSON in and out; `stream: true` answers `text/event-stream` (`data: {chunk}\n\n` … `data: [DONE]\n\n`), one
// chunk per read of the body: the generation advances as the client reads (the body's high-water mark is 0), and
// cancelling the body or aborting the request's `signal` stops it at the next step. Errors are the HTTP status
// the protocol layer assigns with OpenAI's error body (`{ error: { message, type, param, code } }`); an error
// after a stream has begun is sent as a last `data: {"error": …}` event, which OpenAI's clients raise. Requests
// run one at a time in the order they arrive (the engine's queue); a streamed request's response comes back as
// soon as it is validated, so a client may hold several before reading any.
//
// The engine side is one method, `engine[accept](kind, request, { signal })`: it validates the request (throwing
// the KilnError of a bad one) and resolves to `{ result }`, the promise of the response (or of the chunks'
// async iterator) that settles once the request has had its turn.

export const accept = Symbol('kiln.accept');

/** The largest request body served (bytes); a larger one is a 413. */
export const MAX_BODY_BYTES = 4 * 1024 * 1024;

const ENDPOINTS = 'POST /v1/chat/completions, POST /v1/completions and GET /v1/models';

const json = (status, body, headers = {}) => new Response(JSON.stringify(body), {
  status,
  headers: { 'content-type': 'application/json', ...headers },
});

const errorBody = (message, { type = 'invalid_request_error', param = null, code = null } = {}) => ({
  error: { message, type, param, code },
});

const failure = (status, message, fields, headers) => json(status, errorBody(message, fields), headers);

const isAbort = (e) => e?.name === 'AbortError';

/** A thrown KilnError (or any `{ status, error }`) as `{ status, body }`; anything else is a 500. */
function asHttpError(e) {
  if (e !== null && typeof e === 'object' && typeof e.status === 'number' && e.error && typeof e.error === 'object') {
    return { status: e.status, body: { error: e.error } };
  }
  return { status: 500, body: errorBody(String(e?.message ?? e), { type: 'server_error' }) };
}

/** A thrown error as the HTTP response that carries it (see `asHttpError`). */
export function errorResponse(e) {
  const { status, body } = asHttpError(e);
  return json(status, body);
}

/** `/anything/v1/<endpoint>` → `{ endpoint, id }`, or `null` for a path kiln does not serve. */
export function route(pathname) {
  const m = /^(?:.*)\/v1\/(chat\/completions|completions|models)(?:\/(.+))?\/?$/.exec(pathname);
  if (!m) return null;
  const [, endpoint, rest] = m;
  if (rest !== undefined && endpoint !== 'models') return null;
  let id;
  if (rest !== undefined) {
    try {
      id = decodeURIComponent(rest.replace(/\/$/, ''));
    } catch {
      return null;
    }
  }
  return { endpoint, id };
}

const TOO_LARGE = Symbol('too large');

/** The body as text, refusing (with `TOO_LARGE`) one over `limit` bytes without reading all of it. */
async function readText(request, limit) {
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) throw TOO_LARGE;
  if (!request.body) return '';
  const reader = request.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text + decoder.decode();
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel();
      throw TOO_LARGE;
    }
    text += decoder.decode(value, { stream: true });
  }
}

/** `GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shapes. */
function models(engine, id) {
  const loaded = engine.model
    ? [{ id: engine.model, object: 'model', created: engine.loadedAt ?? 0, owned_by: 'kiln' }]
    : [];
  if (id === undefined) return json(200, { object: 'list', data: loaded });
  const found = loaded.find((m) => m.id === id);
  if (found) return json(200, found);
  return failure(404, `The model \`${id}\` does not exist: this engine serves ${loaded.length ? `\`${engine.model}\`` : 'no model'}`, { param: 'model', code: 'model_not_found' });
}

/** The chunks as server-sent events, one per pull; cancelling the body ends the generation. */
function eventStream(result) {
  const encoder = new TextEncoder();
  const event = (data) => encoder.encode(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  let iterator = null;
  const body = new ReadableStream({
    async pull(controller) {
      try {
        iterator ??= await result;
        const { value, done } = await iterator.next();
        if (done) {
          controller.enqueue(event('[DONE]'));
          controller.close();
        } else {
          controller.enqueue(event(value));
        }
      } catch (e) {
        if (isAbort(e)) {
          controller.error(e);
          return;
        }
        controller.enqueue(event(asHttpError(e).body));
        controller.close();
      }
    },
    async cancel() {
      const it = iterator ?? (await result.catch(() => null));
      await it?.return?.();
    },
  }, { highWaterMark: 0 });
  return new Response(body, {
    status: 200,
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' },
  });
}

/**
 * Answers one HTTP request with `engine` (an `Engine` or a `WorkerEngine`). Rejects only where `fetch` itself
 * would: an invalid URL, or an aborted `signal` (with an `AbortError`).
 */
export async function serve(engine, input, init) {
  const request = new Request(input, init);
  const { pathname } = new URL(request.url);
  const method = request.method.toUpperCase();
  const found = route(pathname);
  if (!found) {
    return failure(404, `Unknown request URL: ${method} ${pathname}. kiln serves ${ENDPOINTS}.`, { code: 'unknown_url' });
  }
  if (found.endpoint === 'models') {
    if (method !== 'GET' && method !== 'HEAD') {
      return failure(405, `${method} is not allowed on ${pathname}: use GET`, { code: 'method_not_allowed' }, { allow: 'GET, HEAD' });
    }
    return models(engine, found.id);
  }
  if (method !== 'POST') {
    return failure(405, `${method} is not allowed on ${pathname}: use POST with a JSON body`, { code: 'method_not_allowed' }, { allow: 'POST' });
  }
  const type = request.headers.get('content-type');
  if (!type) {
    return failure(415, 'the request has no `content-type`: send the body as JSON with `content-type: application/json`', { code: 'unsupported_media_type' });
  }
  if (type.split(';')[0].trim().toLowerCase() !== 'application/json') {
    return failure(415, `\`content-type: ${type}\` is not served: send the body as JSON with \`content-type: application/json\``, { code: 'unsupported_media_type' });
  }
  request.signal.throwIfAborted();
  let text;
  try {
    text = await readText(request, MAX_BODY_BYTES);
  } catch (e) {
    if (e !== TOO_LARGE) throw e;
    return failure(413, `the request body is over ${MAX_BODY_BYTES} bytes`, { code: 'request_too_large' });
  }
  let body;
  try {
    body = JSON.parse(text);
  } catch (e) {
    return failure(400, `We could not parse the JSON body of your request: ${e.message}`, { code: 'invalid_json' });
  }
  const kind = found.endpoint === 'chat/completions' ? 'chat' : 'completion';
  let result;
  try {
    ({ result } = await engine[accept](kind, body, { signal: request.signal }));
  } catch (e) {
    if (isAbort(e)) throw e;
    return errorResponse(e);
  }
  if (body?.stream === true) return eventStream(result);
  try {
    return json(200, await result);
  } catch (e) {
    if (isAbort(e)) throw e;
    return errorResponse(e);
  }
}
