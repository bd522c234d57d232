// Types of kiln's JavaScript API (js/index.js). The OpenAI wire types come from ./api.d.ts.
import type {
  ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming,
  Completion, CompletionChunk, CompletionCreateParamsNonStreaming, CompletionCreateParamsStreaming, KilnErrorBody,
} from './api';

export type * from './api';

/** Which build a CPU model runs on, and on how many threads (`Engine.threads`, `deviceReport(...).threads`). */
export interface ThreadsReport {
  /** `threads`: the threaded build (rayon's pool in Web Workers over shared memory); `single`: one thread. */
  build: 'threads' | 'single';
  /** Threads the CPU products run on (the calling thread included). */
  count: number;
  /** The `threads` load option as given, or `null` for the default. */
  requested: number | null;
  /** `navigator.hardwareConcurrency`. */
  cores: number;
  /**
   * Why `count` differs from what was asked or from the default, in words: the page is not cross-origin
   * isolated, `threads` was capped to the cores, or the page's pool was started by an earlier load.
   */
  note: string | null;
}

/**
 * Initialises a device and runs the numerical self-check on it. `kind`: `'webgpu'` (the default) or `'cpu'`;
 * on the CPU, `options.threads` picks the build as for `Engine.load`. Rejects when the device cannot be had.
 */
export function deviceReport(kind?: 'webgpu' | 'cpu' | null, options?: { threads?: number; wasm?: string | URL }): Promise<{
  device: DeviceInfo;
  check: unknown;
  /** On the CPU backend the build and threads that ran it; `null` on WebGPU. */
  threads: ThreadsReport | null;
}>;

/** An OpenAI-shaped error: `status` and `error` = `{ message, type, param, code }`. */
export declare class KilnError extends Error {
  readonly status: number;
  readonly error: KilnErrorBody['error'];
  readonly param: string | null;
  readonly code: string | null;
}

/**
 * Loading progress, in bytes: `download` (fetched, across all files), `parse` (the file read), `upload`
 * (tensor data of the file handed to the device, as stored). Within a phase `loaded` only grows, and it ends at `total`.
 * A GGUF file streams: its header is read as soon as it has arrived and each tensor goes to the device once its
 * bytes are in, so `upload` reports interleave with `download` ones (the file is never whole in wasm memory).
 */
export interface LoadProgress {
  phase: 'download' | 'parse' | 'upload';
  loaded: number;
  total: number;
}

/** A URL of a file, or its bytes. */
export type FileSource = string | URL | Uint8Array | ArrayBuffer;

/** A GGUF file: a URL, its bytes, or a `Blob` / `File` (read in slices, so it may be past 4 GiB). */
export type GgufFileSource = FileSource | Blob;

/** The files of a Hugging Face model repository (safetensors weights), each a URL or bytes. */
export interface HfSource {
  /** `config.json`. */
  config: FileSource;
  /** `tokenizer.json`. */
  tokenizer: FileSource;
  /** `tokenizer_config.json` (special tokens, and the chat template in older repositories). */
  tokenizerConfig?: FileSource;
  /** `chat_template.jinja`, where the repository has one. */
  chatTemplate?: FileSource;
  /** `generation_config.json` (extra end-of-sequence ids). */
  generationConfig?: FileSource;
  /** `model.safetensors.index.json` of a sharded checkpoint. */
  index?: FileSource;
  /** A vision-language model's `preprocessor_config.json` (its family's defaults without it). */
  preprocessor?: FileSource;
  /** The safetensors files; a shard's `name` is what `index` refers to (by default, the URL's file name). */
  weights: (FileSource | { name?: string; url: string | URL } | { name: string; bytes: Uint8Array | ArrayBuffer })[];
}

/** A vision-language model in llama.cpp's layout: the language model's GGUF and its `mmproj` GGUF. */
export interface GgufPairSource {
  model: GgufFileSource | GgufFileSource[];
  mmproj: GgufFileSource;
}

export interface LoadOptions {
  /** The id requests name in `model`. */
  model: string;
  /**
   * A URL of a `.gguf` file, its bytes, or a `Blob` / `File` (read in slices: a file past 4 GiB loads on
   * WebGPU); or the files of a model split by llama.cpp's `gguf-split`, in order (the URL of the first,
   * `…-00001-of-0000n.gguf`, alone finds the others by name); or `{ model, mmproj }`, a vision-language model in llama.cpp's
   * two files (the language model's GGUF, or its split files, and its mmproj GGUF); or a Hugging Face
   * model's files.
   */
  source: GgufFileSource | GgufFileSource[] | GgufPairSource | HfSource;
  onProgress?: (progress: LoadProgress) => void;
  /** Keep the download in the Cache API, keyed by URL. */
  cache?: boolean;
  /**
   * `'auto'` (default): WebGPU on a hardware adapter, else the CPU backend (also in place of a software
   * adapter such as SwiftShader, which is far slower than the CPU backend). `'webgpu'` takes any adapter.
   */
  device?: 'webgpu' | 'cpu' | 'auto';
  /**
   * Hugging Face sources only: quantize every float weight matrix (f32/f16/bf16 safetensors) to this GGML
   * type as it loads, with kiln's own quantizers (llama.cpp's reference algorithms). A row length that is
   * not a whole number of the type's blocks falls back as `llama-quantize` does (e.g. `q4_k` → `q5_0`).
   * A GGUF source with `quantize`, or an unknown type name, is refused (status 422, `param: 'quantize'`).
   */
  quantize?: 'q4_0' | 'q4_1' | 'q5_0' | 'q5_1' | 'q8_0' | 'q2_k' | 'q3_k' | 'q4_k' | 'q5_k' | 'q6_k' | 'iq4_nl' | 'iq4_xs';
  /**
   * A Jinja chat template (as in `tokenizer_config.json`) to serve chat requests with, instead of the
   * model's own, or for a model that has none: without one, chat requests to such a model (a base model) are
   * refused (status 400, `code: 'no_chat_template'`) and completions still work. An invalid template is a 422
   * (`param: 'chatTemplate'`).
   */
  chatTemplate?: string;
  /**
   * Bytes of KV state kept of recent sequences (default 128 MiB; 0 keeps none). A request whose prompt
   * starts with a kept sequence (the earlier turns of a chat) prefills only the rest and reports those tokens
   * as `usage.prompt_tokens_details.cached_tokens`; the least recently used states go first. A budget too
   * small for one sequence (256 positions of the model's KV cache) is refused at load (status 422,
   * `param: 'prefixCacheBytes'`).
   */
  prefixCacheBytes?: number;
  /**
   * The positions (prompt and completion) a request may take; a longer request is a 400
   * `context_length_exceeded`. Default: the model's own context, capped where the device has no room for
   * the KV cache (see `ContextGrant`). More than the model's, or than the device can hold, is refused at
   * load with the numbers (status 422, `param: 'contextLength'`).
   */
  contextLength?: number;
  /**
   * CPU backend only: the threads its products run on. On a cross-origin isolated page (headers
   * `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`) the model runs
   * on the package's threaded build (`threads/kiln_bg.wasm`), by default on every logical core up to 8; `1`,
   * or a page that is not isolated, runs the single-threaded build. More than the cores the browser reports is
   * capped (with a note in `engine.threads`); a value that is not a whole number ≥ 1 is refused (status 422,
   * `param: 'threads'`). One pool serves the page: a later load shares the first one's.
   */
  threads?: number;
  /** Where the single-threaded build's `kiln_bg.wasm` is, when not beside this module. */
  wasm?: string | URL;
}

export interface RequestOptions {
  /** Aborting stops the generation at its next step; the promise or iterator rejects with an `AbortError`. */
  signal?: AbortSignal;
  /**
   * A chat request with images to a vision-language model: called once, before the first chunk, when the
   * device has encoded them: how many images, how many prompt tokens they take, and the milliseconds from
   * the request's start (fetching and decoding them included) until their encoder rows were ready.
   */
  onImages?: (info: { images: number; tokens: number; encodeMs: number }) => void;
}

export interface DeviceInfo {
  kind: 'gpu' | 'cpu';
  backend: string;
  adapter: string;
  deviceType: string;
  driver: string;
  /** Whether the adapter has `shader-f16`. */
  shaderF16: boolean;
  /** Whether the adapter has `subgroups`. */
  subgroups: boolean;
  /**
   * What kiln's kernels use on a GPU device (`null` on the CPU): `f16`, decode activations and the KV cache
   * in f16 (sums stay f32); `subgroups`, the subgroup size its reductions count on, or `null` without them
   * (the adapter has none, or its subgroups are not laid out as the kernels assume).
   */
  features: { f16: boolean; subgroups: number | null } | null;
  limits: Record<string, number> | null;
  /** The decode GEMV's layout on a GPU device: `rows` on software adapters, `split` on GPUs. */
  gemv: 'rows' | 'split' | null;
  /** CPU threads the products run on (1 on a GPU device and in the single-threaded build). */
  threads: number;
}

/** What a vision-language model takes besides text (`Engine.vision`). */
export interface VisionInfo {
  /** Chat requests take `image_url` parts (`data:`, `blob:`, `http:` and `https:` URLs). */
  images: true;
  /** The side of the square tiles the encoder takes, in pixels. */
  imageSize: number;
  /** The prompt tokens one tile becomes. */
  tokensPerImage: number;
}

/** What `Engine` and `WorkerEngine` share: the OpenAI-shaped endpoints over one loaded model. */
export interface KilnEngine {
  readonly model: string;
  readonly device: DeviceInfo;
  /** A vision-language model's image input; `null` for a text model. */
  readonly vision: VisionInfo | null;
  readonly chat: {
    completions: {
      create(request: ChatCompletionCreateParamsStreaming, options?: RequestOptions): Promise<AsyncIterableIterator<ChatCompletionChunk>>;
      create(request: ChatCompletionCreateParamsNonStreaming, options?: RequestOptions): Promise<ChatCompletion>;
    };
  };
  readonly completions: {
    create(request: CompletionCreateParamsStreaming, options?: RequestOptions): Promise<AsyncIterableIterator<CompletionChunk>>;
    create(request: CompletionCreateParamsNonStreaming, options?: RequestOptions): Promise<Completion>;
  };
  /**
   * A WHATWG `fetch` serving OpenAI's HTTP endpoints under any base URL: `POST …/v1/chat/completions`,
   * `POST …/v1/completions` (`stream: true` as server-sent events) and `GET …/v1/models[/{id}]`; errors as the
   * HTTP status with OpenAI's error body. Give it to an OpenAI client (`new OpenAI({ baseURL, fetch:
   * engine.fetch })`, `createOpenAICompatible({ baseURL, fetch })`, `new ChatOpenAI({ configuration: { baseURL,
   * fetch } })`). Rejects only where `fetch` would: an invalid URL, or an aborted `signal`.
   */
  readonly fetch: (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;
  /** When the model was loaded (Unix seconds; `created` in `GET /v1/models`). */
  readonly loadedAt: number;
  /** Frees the model's device memory; the engine cannot be used afterwards. */
  unload(): Promise<void>;
}

/** What `registerServiceWorker` resolves to. */
export interface ServiceWorkerModel {
  model: string;
  device: DeviceInfo;
  registration: ServiceWorkerRegistration;
}

/**
 * Registers `script` (a module Service Worker that imports `kiln-llm/service-worker`) and has it load a model
 * (`options` as for `Engine.load`, with `source` a URL; the worker always caches the file). From then on, every
 * script of the origin in the worker's scope, in any tab, is answered by that one model at `/v1/chat/completions`,
 * `/v1/completions` and `/v1/models`. `onProgress` runs on this page while the model loads. A browser that stops
 * the idle worker costs nothing but a reload from the cache at the next request.
 */
export declare function registerServiceWorker(
  script: string | URL,
  options: Omit<LoadOptions, 'source' | 'cache'> & { source: string | URL | { model: string | URL; mmproj: string | URL }; scope?: string },
): Promise<ServiceWorkerModel>;

/** The context a load granted (`Engine.context`). */
export interface ContextGrant {
  /** Positions a request (prompt and completion) may take. */
  length: number;
  /** The model's own context length. */
  modelLength: number;
  /** KV-cache bytes one position of one sequence takes, over every layer. */
  kvBytesPerPosition: number;
  /**
   * What limits `length`: the model's own context, the `contextLength` option, memory (the CPU backend's
   * wasm32 address space beside the weights; on WebGPU, which does not report the device's memory, a KV
   * cache of 2 GiB unless `contextLength` asks for more), or a layer's keys fitting one storage binding.
   */
  bound: 'model' | 'option' | 'memory' | 'binding';
}

/** What `Engine.inspect` reads from a model's headers alone, before the download. */
export interface ModelInspection {
  /** `general.architecture` (`llama`, `qwen3`, `gemma3`, …). */
  architecture: string | null;
  name: string | null;
  /** Files read (a split model's, and an mmproj). */
  files: number;
  parameters: number;
  /** Bytes of tensor data in the files. */
  tensorBytes: number;
  largestTensor: { name: string; bytes: number } | null;
  /** Bytes of tensor data by GGML type. */
  types: Record<string, number>;
  layers: number | null;
  vocabSize: number | null;
  /** The model's own context length. */
  contextLength: number | null;
  /** Whether the file carries a chat template (without one, chat needs the `chatTemplate` load option). */
  chatTemplate: boolean;
  vision: boolean;
  /** Whether `Engine.load` on this device would get past the headers, and what it would grant. */
  device: { runs: boolean; weightBytes: number; contextLength: number | null; error: string | null };
  deviceInfo: DeviceInfo;
  /**
   * The machine's memory as the browser tells it (`navigator.deviceMemory`, GiB, coarse: rounded down to a
   * power of two and capped), or null where it does not. WebGPU reports nothing of the GPU's memory.
   */
  hostMemoryGiB: number | null;
}

/** Where a loaded model's bytes are (`Engine.memory`). */
export interface MemoryReport {
  /** The weights as held on the device (quantized blocks stay packed). */
  weightBytes: number;
  /** The KV states the prefix cache keeps (`LoadOptions.prefixCacheBytes`). */
  prefixCacheBytes: number;
  /** What the device's allocator holds (weights, KV caches, activations); `null` on the CPU backend. */
  deviceBytesInUse: number | null;
  deviceBytesReserved: number | null;
}

/** A model running on this thread. */
export declare class Engine implements KilnEngine {
  static load(options: LoadOptions): Promise<Engine>;
  /**
   * Reads only the headers of a GGUF `source` (each file's first megabytes) and says what the model is and
   * whether `device` can run it, before anything large is downloaded.
   */
  static inspect(
    source: LoadOptions['source'],
    options?: { device?: LoadOptions['device']; cache?: boolean; threads?: number; wasm?: string | URL },
  ): Promise<ModelInspection>;
  /** The context the load granted. */
  readonly context: ContextGrant;
  readonly model: string;
  readonly device: DeviceInfo;
  readonly vision: VisionInfo | null;
  /** On the CPU backend the build the model runs on and its threads; `null` on WebGPU. */
  readonly threads: ThreadsReport | null;
  readonly memory: MemoryReport;
  readonly chat: KilnEngine['chat'];
  readonly completions: KilnEngine['completions'];
  readonly fetch: KilnEngine['fetch'];
  readonly loadedAt: number;
  unload(): Promise<void>;
}

/**
 * A model running in a module Web Worker that imports `kiln-llm/worker`; the same interface, with chunks
 * arriving over postMessage, so the page's main thread never runs model code.
 */
export declare class WorkerEngine implements KilnEngine {
  static load(worker: Worker, options: LoadOptions): Promise<WorkerEngine>;
  /** As `Engine.inspect`, on this thread. */
  static inspect: typeof Engine.inspect;
  /** As `Engine.context`. */
  readonly context: ContextGrant;
  readonly model: string;
  readonly device: DeviceInfo;
  readonly vision: VisionInfo | null;
  /** As `Engine.threads`, for the model in the worker. */
  readonly threads: ThreadsReport | null;
  /** The model's bytes as the worker reported them when the load finished (`Engine.memory` there). */
  readonly memory: MemoryReport;
  readonly chat: KilnEngine['chat'];
  readonly completions: KilnEngine['completions'];
  readonly fetch: KilnEngine['fetch'];
  readonly loadedAt: number;
  unload(): Promise<void>;
}
