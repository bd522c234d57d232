// A consumer of the built package (`pkg/`, made by `cargo xtask`): the wire types are re-exported from the
// generated kiln.d.ts, next to the wasm functions. Checked by `tsc -p tests/ts/consumer` after the build.
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParams, Completion, KilnErrorBody } from '../../../pkg/kiln.js';
import { deviceReport, KilnModel, KilnStream } from '../../../pkg/kiln.js';

const request: ChatCompletionCreateParams = { model: 'smollm2-135m', messages: [{ role: 'user', content: 'hi' }] };

export async function check(): Promise<[ChatCompletion | null, ChatCompletionChunk | null, Completion | null, KilnErrorBody | null]> {
  await deviceReport('cpu');
  void request;
  return [null, null, null, null];
}

// @ts-expect-error: a chat request needs `messages`.
export const missingMessages: ChatCompletionCreateParams = { model: 'smollm2-135m' };

// The model facade: load from bytes on a device, then streams whose chunks and responses are plain objects.
export async function facade(bytes: Uint8Array): Promise<unknown> {
  const model: KilnModel = await KilnModel.fromGguf('tiny', bytes, 'auto');
  const stream: KilnStream = model.chatStream(request);
  const first: unknown = await stream.next();
  stream.close();
  return [model.id, model.device, first, await model.completionStream({ model: 'tiny', prompt: 'x' }).collect()];
}

// The Engine API, as a web app imports it.
import { Engine, KilnError } from '../../../pkg/index.js';

export async function engine(): Promise<string | null> {
  const e = await Engine.load({ model: 'tiny', source: '/m.gguf', device: 'auto', onProgress: (p) => void p.loaded });
  await Engine.load({ model: 'split', source: ['/m-00001-of-00002.gguf', new Uint8Array(1)] });
  const full: ChatCompletion = await e.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] });
  for await (const chunk of await e.chat.completions.create({ model: 'tiny', messages: [], stream: true })) {
    const c: ChatCompletionChunk = chunk;
    void c;
  }
  const done: Completion = await e.completions.create({ model: 'tiny', prompt: 'x' }, { signal: new AbortController().signal });
  try {
    await e.unload();
  } catch (err) {
    if (err instanceof KilnError) return err.code;
  }
  return full.choices[0].message.content ?? done.choices[0].text;
}

// The same calls through a WorkerEngine, and a Hugging Face source of URLs and bytes.
import { WorkerEngine, type KilnEngine, type LoadProgress } from '../../../pkg/index.js';

export async function worker(): Promise<string> {
  const w = new Worker(new URL('../../../pkg/worker.js', import.meta.url), { type: 'module' });
  const progress: LoadProgress[] = [];
  const e: KilnEngine = await WorkerEngine.load(w, {
    model: 'tiny',
    source: { config: '/config.json', tokenizer: new Uint8Array(1), weights: ['/model.safetensors', { name: 'b.safetensors', bytes: new ArrayBuffer(1) }] },
    onProgress: (p) => progress.push(p),
  });
  const full: ChatCompletion = await e.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] });
  await e.unload();
  return full.id;
}

// Code written against the `openai` package's types: its requests (on the overlap kiln accepts, the
// narrowings that ../openai-compat.ts checks and explains) go into kiln's `create` unchanged, and each call
// resolves to kiln's response type, which ../openai-compat.ts checks against openai's.
import type OpenAI from 'openai';
import type { OChatAsKiln, OCompletionAsKiln } from '../openai-compat';
import type { CompletionChunk } from '../../../pkg/index.js';

export async function asOpenAI(
  e: KilnEngine,
  chat: OChatAsKiln<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming>,
  chatStream: OChatAsKiln<OpenAI.Chat.ChatCompletionCreateParamsStreaming>,
  completion: OCompletionAsKiln<OpenAI.CompletionCreateParamsNonStreaming>,
  completionStream: OCompletionAsKiln<OpenAI.CompletionCreateParamsStreaming>,
): Promise<[ChatCompletion, ChatCompletionChunk[], Completion, CompletionChunk[]]> {
  const full: ChatCompletion = await e.chat.completions.create(chat);
  const chunks: ChatCompletionChunk[] = [];
  for await (const c of await e.chat.completions.create(chatStream)) chunks.push(c);
  const done: Completion = await e.completions.create(completion);
  const parts: CompletionChunk[] = [];
  for await (const c of await e.completions.create(completionStream)) parts.push(c);
  return [full, chunks, done, parts];
}

// OpenAI's HTTP endpoints: `engine.fetch` is what openai-node takes as its `fetch`, and the Service Worker's
// client API.
import { registerServiceWorker, type ServiceWorkerModel } from '../../../pkg/index.js';

export async function overHttp(e: KilnEngine): Promise<[OpenAI, ServiceWorkerModel, number]> {
  const { default: Client } = await import('openai');
  const client = new Client({ baseURL: 'http://kiln.local/v1', apiKey: 'unused', fetch: e.fetch, dangerouslyAllowBrowser: true });
  const res: Response = await e.fetch('http://kiln.local/v1/models');
  const sw = await registerServiceWorker('/sw.js', { scope: '/', model: 'tiny', source: '/tiny.gguf', onProgress: (p: LoadProgress) => void p.loaded });
  return [client, sw, res.status + e.loadedAt];
}
