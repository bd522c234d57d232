// A consumer of the built package (`pkg/`, made by `cargo xtask`): the wire types are re-exported from the
// generated kiln.d.ts, next to the wasm functions. Checked by `tsc -p tests/ts/consumer` after the build.
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParams, Completion, KilnErrorBody } from '../../../pkg/kiln.js';
import { deviceReport } from '../../../pkg/kiln.js';

const request: ChatCompletionCreateParams = { model: 'smollm2-135m', messages: [{ role: 'user', content: 'hi' }] };

export async function check(): Promise<[ChatCompletion | null, ChatCompletionChunk | null, Completion | null, KilnErrorBody | null]> {
  await deviceReport('cpu');
  void request;
  return [null, null, null, null];
}

// @ts-expect-error: a chat request needs `messages`.
export const missingMessages: ChatCompletionCreateParams = { model: 'smollm2-135m' };
