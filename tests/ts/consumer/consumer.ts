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
