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
