// Types of kiln's JavaScript API (js/index.js). The OpenAI wire types come from ./api.d.ts.
import type {
  ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming,
  Completion, CompletionCreateParamsNonStreaming, CompletionCreateParamsStreaming, KilnErrorBody,
} from './api';

export type * from './api';
export { deviceReport } from './kiln.js';

/** An OpenAI-shaped error: `status` and `error` = `{ message, type, param, code }`. */
export declare class KilnError extends Error {
  readonly status: number;
  readonly error: KilnErrorBody['error'];
  readonly param: string | null;
  readonly code: string | null;
}

export interface LoadProgress {
  phase: 'download' | 'upload';
  loaded: number;
  total: number;
}

export interface LoadOptions {
  /** The id requests name in `model`. */
  model: string;
  /** A URL of a `.gguf` file, or its bytes. */
  source: string | URL | Uint8Array | ArrayBuffer;
  onProgress?: (progress: LoadProgress) => void;
  /** Keep the download in the Cache API, keyed by URL. */
  cache?: boolean;
  /** `'auto'` (default): WebGPU when the browser has an adapter, else the CPU backend. */
  device?: 'webgpu' | 'cpu' | 'auto';
  /** Where `kiln_bg.wasm` is, when not beside this module. */
  wasm?: string | URL;
}

export interface RequestOptions {
  /** Aborting stops the generation at its next step; the promise or iterator rejects with an `AbortError`. */
  signal?: AbortSignal;
}

export interface DeviceInfo {
  kind: 'gpu' | 'cpu';
  backend: string;
  adapter: string;
  deviceType: string;
  driver: string;
  shaderF16: boolean;
  limits: Record<string, number> | null;
}

export declare class Engine {
  static load(options: LoadOptions): Promise<Engine>;
  readonly model: string;
  readonly device: DeviceInfo;
  readonly chat: {
    completions: {
      create(request: ChatCompletionCreateParamsStreaming, options?: RequestOptions): Promise<AsyncIterableIterator<ChatCompletionChunk>>;
      create(request: ChatCompletionCreateParamsNonStreaming, options?: RequestOptions): Promise<ChatCompletion>;
    };
  };
  readonly completions: {
    create(request: CompletionCreateParamsStreaming, options?: RequestOptions): Promise<AsyncIterableIterator<Completion>>;
    create(request: CompletionCreateParamsNonStreaming, options?: RequestOptions): Promise<Completion>;
  };
  unload(): Promise<void>;
}
