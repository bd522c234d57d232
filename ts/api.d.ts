/**
 * kiln's OpenAI wire types: the request bodies, responses, stream chunks and errors of
 * `POST /v1/chat/completions` and `POST /v1/completions`, as kiln speaks them to JavaScript.
 *
 * Sources, in order of precedence:
 * 1. `shared/spec/chat-completions.md` and `shared/spec/completions.md` (the contract);
 * 2. OpenAI's OpenAPI document (`shared/spec/openai-openapi.json`) for what those leave out.
 * A comment marked "SPEC:" says where a type fills a gap of the .md from OpenAPI, keeps the .md's form
 * against OpenAPI's, or departs from the .md (and why: mostly where the .md's required/nullable marks
 * cannot describe a stream, such as `finish_reason: null` in a chunk before the last).
 *
 * Conventions:
 * - Request fields: an optional field also accepts `null`, meaning "absent" (kiln parses every optional
 *   field as an `Option`). The .md marks most of them `nullable`; it shows no nullability for union- and
 *   enum-typed fields (`stop`, `tool_choice`, `reasoning_effort`, `response_format`, `service_tier`,
 *   `content`), which kiln treats the same way. The `type: 'function'` tags are the exception: they may
 *   be left out, but not be `null`.
 * - Response fields: what kiln's Rust response types (`src/api/response.rs`) emit. A field kiln always
 *   sends is required here, even where the spec marks it optional; one kiln may send as `null` is
 *   nullable; one kiln leaves out when it has no value is optional (`?`) and not nullable, even where
 *   the spec marks it nullable (kiln never sends `null` there, which the spec allows).
 * - Integers are `number`; the doc says "integer" where the wire requires one.
 *
 * Declarations only: this file has no runtime code. `tests/ts/openai-compat.ts` checks it against the
 * types of the `openai` npm package.
 */

// ---------------------------------------------------------------------------------------------------------
// Shared enums
// ---------------------------------------------------------------------------------------------------------

/**
 * Service tier, accepted in requests and reported in responses. `auto` picks `default` or `over-limit`;
 * `over-limit` cannot be requested, only reported; `flex` runs at lower priority. kiln runs on one local
 * device, so the tier has no effect on it.
 *
 * SPEC: the .md's values. OpenAI's are `auto | default | flex | scale | priority | fast`.
 */
export type ServiceTier = 'auto' | 'default' | 'over-limit' | 'flex' | 'no-limit';

/**
 * The tiers a request may name: `over-limit` only appears in responses (kiln refuses it in a request with
 * 422). A response reports `auto` resolved to `default`, the tier a local device serves at.
 */
export type RequestServiceTier = Exclude<ServiceTier, 'over-limit'>;

/** How hard a reasoning model should think before it answers. */
export type ReasoningEffort = 'none' | 'minimal' | 'low' | 'medium' | 'high' | 'xhigh' | 'max';

/**
 * The author of a chat message.
 *
 * OpenAI also has `developer` (its newer name for `system`) and the deprecated `function`. The .md lists
 * only these four, and the .md wins: kiln refuses the other two (422).
 */
export type ChatCompletionRole = 'system' | 'user' | 'assistant' | 'tool';

/** Why a chat choice stopped: a stop condition, the token limit, a tool call, or a content filter. */
export type ChatCompletionFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/** Why a text completion choice stopped: a stop condition, the token limit, or a content filter. */
export type CompletionFinishReason = 'stop' | 'length' | 'content_filter';

/** HTTP-equivalent status of an error: 400 valid but not servable, 404 unknown model, 422 invalid request. */
export type KilnErrorStatus = 400 | 404 | 422;

// ---------------------------------------------------------------------------------------------------------
// Requests: pieces shared by both endpoints
// ---------------------------------------------------------------------------------------------------------

/** `stream_options`; only allowed together with `stream: true`. */
export interface ChatCompletionStreamOptions {
  /** Send one more chunk before `[DONE]` with `usage` set and `choices` empty. */
  include_usage?: boolean | null;
}

/** Query parameters of both endpoints (passed beside the body, not in it). */
export interface CallOptions {
  /** Current project ID; accepted, with no local meaning. */
  ai_project_id?: string | null;
}

// ---------------------------------------------------------------------------------------------------------
// Chat requests: messages
// ---------------------------------------------------------------------------------------------------------

/** A text part of a message's `content`. */
export interface ChatCompletionContentPartText {
  /** Always `text`. */
  type: 'text';
  /** The text. */
  text: string;
}

/** An image part of a user message's `content` (only for models that read images; else 400). */
export interface ChatCompletionContentPartImage {
  /** Always `image_url`. */
  type: 'image_url';
  /** Where the image is. */
  image_url: {
    /** An image URL or a `data:` URI with the image bytes. */
    url: string;
    /**
     * Detail level hint. SPEC: the .md elides `ImageURL`; the values are OpenAPI's (the `openai`
     * package also has `original`, which its OpenAPI document does not).
     */
    detail?: 'auto' | 'low' | 'high' | null;
  };
}

/** A video part of a user message's `content` (not in OpenAI's API; only for models that read video). */
export interface ChatCompletionContentPartVideo {
  /** Always `video_url`. */
  type: 'video_url';
  /** Where the video is. */
  video_url: {
    /** A video URL or a `data:` URI with the video bytes. */
    url: string;
  };
}

/** One part of an array `content`. */
export type ChatCompletionContentPart =
  | ChatCompletionContentPartText
  | ChatCompletionContentPartImage
  | ChatCompletionContentPartVideo;

/** A function name and its arguments. */
export interface FunctionCall {
  /** The function's name. */
  name: string;
  /** The arguments, as a JSON-encoded string (as the model wrote it; may not be valid JSON). */
  arguments: string;
}

/**
 * A tool call, as an assistant message in a request carries it (typically copied from a response).
 *
 * SPEC: the .md does not mark `id` and `type` required, so kiln accepts them left out; OpenAI requires both.
 */
export interface ChatCompletionMessageToolCallParam {
  /** The call's ID, which the answering `tool` message quotes as `tool_call_id`. */
  id?: string | null;
  /** Always `function`. */
  type?: 'function';
  /** The function called. */
  function: FunctionCall;
}

/**
 * A system message: instructions for the model.
 *
 * The .md has one message shape for every role; these four interfaces narrow it per role the way kiln
 * validates it (a field on the wrong role, or missing `content`, is refused with 422).
 */
export interface ChatCompletionSystemMessageParam {
  /** Always `system`. */
  role: 'system';
  /** The instructions. */
  content: string | ChatCompletionContentPartText[];
  /** Optional name to tell participants of the same role apart. */
  name?: string | null;
}

/** A user message. Only user messages may carry image and video parts. */
export interface ChatCompletionUserMessageParam {
  /** Always `user`. */
  role: 'user';
  /** The message: text, or parts of text, images and video. */
  content: string | ChatCompletionContentPart[];
  /** Optional name to tell participants of the same role apart. */
  name?: string | null;
}

/** An earlier reply of the model. */
export interface ChatCompletionAssistantMessageParam {
  /** Always `assistant`. */
  role: 'assistant';
  /**
   * The reply. May be left out or `null` only when `tool_calls` is not empty. SPEC: the .md does not
   * mark it nullable; `null` is OpenAPI's (and what OpenAI returns beside tool calls).
   */
  content?: string | ChatCompletionContentPartText[] | null;
  /** Optional name to tell participants of the same role apart. */
  name?: string | null;
  /** The tool calls the model made. */
  tool_calls?: ChatCompletionMessageToolCallParam[] | null;
  /** The reasoning that preceded the reply (not in OpenAI's API). */
  reasoning_content?: string | null;
  /** The reasoning that preceded the reply; another name for `reasoning_content` (not in OpenAI's API). */
  reasoning?: string | null;
  /**
   * The refusal the reply carried, so that a reply (kiln's or OpenAI's) can be appended to `messages` as
   * it came; kiln's own replies always have `null`. Only assistant messages may carry it (else 422).
   * SPEC: not in the .md; from OpenAI's API (OpenAPI's `ChatCompletionRequestAssistantMessage`).
   */
  refusal?: string | null;
}

/** The result of a tool call. */
export interface ChatCompletionToolMessageParam {
  /** Always `tool`. */
  role: 'tool';
  /** The result. */
  content: string | ChatCompletionContentPartText[];
  /** The `id` of the tool call this answers. */
  tool_call_id: string;
  /** Optional name (the .md allows it on every role; OpenAI's tool messages have none). */
  name?: string | null;
}

/** A message of the conversation. */
export type ChatCompletionMessageParam =
  | ChatCompletionSystemMessageParam
  | ChatCompletionUserMessageParam
  | ChatCompletionAssistantMessageParam
  | ChatCompletionToolMessageParam;

// ---------------------------------------------------------------------------------------------------------
// Chat requests: tools and output format
// ---------------------------------------------------------------------------------------------------------

/** A function the model may call. */
export interface FunctionDefinition {
  /** The name: a-z, A-Z, 0-9, `_` and `-`, at most 64 characters. */
  name: string;
  /** What the function does, for the model to decide when and how to call it. */
  description?: string | null;
  /** The parameters, as a JSON Schema object; left out means no parameters. */
  parameters?: Record<string, unknown> | null;
  /** Whether the arguments must follow `parameters` exactly. */
  strict?: boolean | null;
  /** Hint for deferred-tool-calling runtimes, kept and passed on (not in OpenAI's API). */
  defer_loading?: boolean | null;
}

/** An entry of `tools`. SPEC: the .md does not mark `type` required; OpenAI requires it. */
export interface ChatCompletionTool {
  /** Always `function` (the only tool type). */
  type?: 'function';
  /** The function. */
  function: FunctionDefinition;
}

/** `tool_choice` naming one function, which the model must call. */
export interface ChatCompletionNamedToolChoice {
  /** Always `function`. SPEC: the .md does not mark it required; OpenAI requires it. */
  type?: 'function';
  /** The function to call. */
  function: {
    /** Its name, one of `tools`. */
    name: string;
  };
}

/**
 * Which tool the model may call: `none` (no tool; the default without `tools`), `auto` (its choice; the
 * default with `tools`), `required` (at least one), or a named function.
 */
export type ChatCompletionToolChoiceOption = 'none' | 'auto' | 'required' | ChatCompletionNamedToolChoice;

/** Plain text output (the default). */
export interface ResponseFormatText {
  /** Always `text`. */
  type: 'text';
}

/** Output that is a JSON object. */
export interface ResponseFormatJSONObject {
  /** Always `json_object`. */
  type: 'json_object';
}

/** Output that follows a JSON Schema. */
export interface ResponseFormatJSONSchema {
  /** Always `json_schema`. */
  type: 'json_schema';
  /** The schema and its name. */
  json_schema: {
    /** The format's name: a-z, A-Z, 0-9, `_` and `-`, at most 64 characters. */
    name: string;
    /** What the format is for. */
    description?: string | null;
    /**
     * The JSON Schema the output follows. SPEC: the .md marks it "nullable, required"; kiln refuses a
     * missing or `null` schema (422), so it is required and not nullable here. OpenAI has it optional.
     */
    schema: Record<string, unknown>;
    /** Whether the output must follow `schema` exactly. */
    strict?: boolean | null;
  };
}

/**
 * `response_format`. SPEC: the .md gives one object `{type, json_schema?}`; this is the same wire shape
 * split by `type`, as OpenAI does.
 */
export type ResponseFormat = ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema;

// ---------------------------------------------------------------------------------------------------------
// Chat requests: the body
// ---------------------------------------------------------------------------------------------------------

/** Body of `POST /v1/chat/completions`, either form of `stream`. */
export interface ChatCompletionCreateParamsBase {
  /** ID of the model; must be the loaded model (else 404). */
  model: string;
  /** The conversation so far; not empty. */
  messages: ChatCompletionMessageParam[];
  /** Whether to store the output for distillation; accepted, with no local meaning. */
  store?: boolean | null;
  /** Maximum tokens to generate (integer); prompt plus this must fit the context. Default 8192. */
  max_tokens?: number | null;
  /** Upper bound on generated tokens, reasoning included (integer). With `max_tokens`, the smaller wins. */
  max_completion_tokens?: number | null;
  /** Sampling temperature in [0, 2]; higher is more random. */
  temperature?: number | null;
  /** Nucleus sampling: sample from the tokens of the top `top_p` probability mass. */
  top_p?: number | null;
  /** Functions the model may call. */
  tools?: ChatCompletionTool[] | null;
  /** Which tool the model may or must call. */
  tool_choice?: ChatCompletionToolChoiceOption | null;
  /** Reasoning effort for reasoning models. */
  reasoning_effort?: ReasoningEffort | null;
  /** How many choices to generate (integer). */
  n?: number | null;
  /** Stream the reply as server-sent chunks, ended by `data: [DONE]`. */
  stream?: boolean | null;
  /** Streaming options; only with `stream: true`. */
  stream_options?: ChatCompletionStreamOptions | null;
  /**
   * Up to 4 sequences that stop generation. SPEC: the .md gives `string[]` only; a single string is
   * accepted too, as OpenAI's API does.
   */
  stop?: string | string[] | null;
  /** In [-2, 2]; positive values penalise tokens that already appeared (new topics). */
  presence_penalty?: number | null;
  /** In [-2, 2]; positive values penalise tokens by how often they appeared (less repetition). */
  frequency_penalty?: number | null;
  /** Token ID (as a string key) to a bias in [-100, 100] added to its logit before sampling. */
  logit_bias?: Record<string, number> | null;
  /** Return the log probability of each output token. */
  logprobs?: boolean | null;
  /** How many most likely tokens to return at each position (integer); needs `logprobs: true`. */
  top_logprobs?: number | null;
  /** An ID of the end user; accepted, with no local meaning. */
  user?: string | null;
  /** The output format: text, a JSON object, or JSON following a schema. */
  response_format?: ResponseFormat | null;
  /** Extra parameters (not in OpenAI's API). */
  extra_body?: Record<string, unknown> | null;
  /** Service tier; accepted and reported back (`auto` as `default`). */
  service_tier?: RequestServiceTier | null;
  /**
   * Seed for sampling (integer; any signed 64-bit value), for repeatable output. SPEC: not in the .md; from
   * OpenAI's API (OpenAPI), honoured by kiln.
   */
  seed?: number | null;
  /**
   * Whether the model may make several tool calls in one turn (default `true`). SPEC: not in the .md;
   * from OpenAI's API (OpenAPI), honoured by kiln.
   */
  parallel_tool_calls?: boolean | null;
  /**
   * Key-value pairs attached to the request; accepted, with no local meaning (like `store`). SPEC: not
   * in the .md; from OpenAI's API (OpenAPI).
   */
  metadata?: Record<string, string> | null;
  /**
   * Output modalities. kiln generates text only: `['text']` (or `[]`) is accepted; any other value
   * (OpenAI's `'audio'`) is refused with 400 `unsupported_parameter`. SPEC: not in the .md; from OpenAI's
   * API (OpenAPI), narrowed to what kiln can serve.
   */
  modalities?: 'text'[] | null;
}

/** A chat request that returns one `ChatCompletion`. */
export interface ChatCompletionCreateParamsNonStreaming extends ChatCompletionCreateParamsBase {
  /** Not streaming. */
  stream?: false | null;
}

/** A chat request that returns a stream of `ChatCompletionChunk`s. */
export interface ChatCompletionCreateParamsStreaming extends ChatCompletionCreateParamsBase {
  /** Streaming. */
  stream: true;
}

/** Body of `POST /v1/chat/completions`. */
export type ChatCompletionCreateParams = ChatCompletionCreateParamsNonStreaming | ChatCompletionCreateParamsStreaming;

// ---------------------------------------------------------------------------------------------------------
// Completion requests
// ---------------------------------------------------------------------------------------------------------

/** Body of `POST /v1/completions`, either form of `stream`. */
export interface CompletionCreateParamsBase {
  /** ID of the model; must be the loaded model (else 404). */
  model: string;
  /**
   * The prompt(s): a string, strings, token IDs, or arrays of token IDs; not empty. SPEC: the .md's list
   * leaves out `number[][]`, which its own description ("array of token arrays") and OpenAI include.
   */
  prompt: string | string[] | number[] | number[][];
  /** Stream the completion as server-sent chunks, ended by `data: [DONE]`. */
  stream?: boolean | null;
  /** Streaming options; only with `stream: true`. */
  stream_options?: ChatCompletionStreamOptions | null;
  /** Maximum tokens to generate (integer). */
  max_tokens?: number | null;
  /** Sampling temperature in [0, 2]; higher is more random. */
  temperature?: number | null;
  /** Nucleus sampling: sample from the tokens of the top `top_p` probability mass. */
  top_p?: number | null;
  /** How many choices to generate for each prompt (integer). */
  n?: number | null;
  /** Return the log probabilities of this many most likely tokens per position, plus the chosen one (integer). */
  logprobs?: number | null;
  /** Echo the prompt before the completion. */
  echo?: boolean | null;
  /** Up to 4 sequences that stop generation. */
  stop?: string | string[] | null;
  /** In [-2, 2]; positive values penalise tokens that already appeared (new topics). */
  presence_penalty?: number | null;
  /** In [-2, 2]; positive values penalise tokens by how often they appeared (less repetition). */
  frequency_penalty?: number | null;
  /** Token ID (as a string key) to a bias in [-100, 100] added to its logit before sampling. */
  logit_bias?: Record<string, number> | null;
  /** An ID of the end user; accepted, with no local meaning. */
  user?: string | null;
  /** Extra parameters (not in OpenAI's API). */
  extra_body?: Record<string, unknown> | null;
  /** Service tier; accepted and reported back (not in OpenAI's completions API). */
  service_tier?: RequestServiceTier | null;
  /**
   * Seed for sampling (integer; any signed 64-bit value), for repeatable output. SPEC: not in the .md; from
   * OpenAI's API (OpenAPI), honoured by kiln.
   */
  seed?: number | null;
}

/** A completion request that returns one `Completion`. */
export interface CompletionCreateParamsNonStreaming extends CompletionCreateParamsBase {
  /** Not streaming. */
  stream?: false | null;
}

/** A completion request that returns a stream of `CompletionChunk`s. */
export interface CompletionCreateParamsStreaming extends CompletionCreateParamsBase {
  /** Streaming. */
  stream: true;
}

/** Body of `POST /v1/completions`. */
export type CompletionCreateParams = CompletionCreateParamsNonStreaming | CompletionCreateParamsStreaming;

// ---------------------------------------------------------------------------------------------------------
// Responses: shared pieces
// ---------------------------------------------------------------------------------------------------------

/** Token counts of a request. */
export interface CompletionUsage {
  /** Tokens generated. */
  completion_tokens: number;
  /** Tokens in the prompt. */
  prompt_tokens: number;
  /** `prompt_tokens + completion_tokens`. */
  total_tokens: number;
  /**
   * Breakdown of the prompt tokens. SPEC: the .md does not mark it required; kiln always sends it (and
   * its field). OpenAI's has it optional.
   */
  prompt_tokens_details: {
    /** Prompt tokens served from the cache. SPEC: nullable in the .md; OpenAI has an optional number. */
    cached_tokens: number | null;
  };
  /**
   * Breakdown of the generated tokens. SPEC: the .md does not mark it required; kiln always sends it (and
   * its field). OpenAI's has it optional.
   */
  completion_tokens_details: {
    /** Tokens spent on reasoning. SPEC: nullable in the .md; OpenAI has an optional number. */
    reasoning_tokens: number | null;
  };
}

/** One of the most likely tokens at a position. */
export interface ChatCompletionTopLogprob {
  /** The token. */
  token: string;
  /** Its log probability (`-9999.0` if it is not among the 20 most likely). */
  logprob: number;
  /** Its UTF-8 bytes, or `null` if it has no bytes representation. */
  bytes: number[] | null;
}

/** A generated token with its log probability and the most likely alternatives. */
export interface ChatCompletionTokenLogprob {
  /** The token. */
  token: string;
  /** Its log probability (`-9999.0` if it is not among the 20 most likely). */
  logprob: number;
  /** Its UTF-8 bytes, or `null` if it has no bytes representation. */
  bytes: number[] | null;
  /** The `top_logprobs` most likely tokens at this position (possibly fewer). */
  top_logprobs: ChatCompletionTopLogprob[];
}

/** Log probabilities of a chat choice. */
export interface ChatCompletionLogprobs {
  /** One entry per content token, or `null`. */
  content: ChatCompletionTokenLogprob[] | null;
  /**
   * Log probabilities of a refusal: kiln never refuses, so always `null`. SPEC: not in the .md; OpenAPI
   * requires the key (nullable), and kiln always sends it.
   */
  refusal: null;
}

/** A tool call in a response. */
export interface ChatCompletionMessageToolCall {
  /**
   * The call's ID, to quote as `tool_call_id` when answering. SPEC: the .md does not mark `id` and
   * `type` required; kiln always sends both, as OpenAI does.
   */
  id: string;
  /** Always `function`. */
  type: 'function';
  /** The function called. */
  function: FunctionCall;
}

// ---------------------------------------------------------------------------------------------------------
// Chat responses
// ---------------------------------------------------------------------------------------------------------

/**
 * The reply of a chat choice. SPEC: the .md types `role` with all four roles; a reply is always
 * `assistant`, as in OpenAI's API.
 */
export interface ChatCompletionMessage {
  /** Always `assistant`. */
  role: 'assistant';
  /** The reply text, or `null` (e.g. when the reply is only tool calls). */
  content: string | null;
  /**
   * A refusal message: kiln never refuses, so always `null`. SPEC: not in the .md; OpenAPI requires the
   * key (`string | null`), and kiln always sends it. Request messages accept it back on `assistant`.
   */
  refusal: null;
  /**
   * The tool calls the model made; left out when there are none. SPEC: the .md marks it nullable; kiln
   * leaves it out rather than sending `null`, as OpenAI does.
   */
  tool_calls?: ChatCompletionMessageToolCall[];
  /** The reasoning that preceded the reply, for reasoning models; left out otherwise (not in OpenAI's API). */
  reasoning_content?: string;
  /** Same as `reasoning_content`, under the other name clients use (not in OpenAI's API). */
  reasoning?: string;
}

/** One choice of a `ChatCompletion`. */
export interface ChatCompletionChoice {
  /** Index of the choice in `choices`. */
  index: number;
  /** The reply. */
  message: ChatCompletionMessage;
  /** Why generation stopped. */
  finish_reason: ChatCompletionFinishReason;
  /**
   * Log probabilities, or `null` when `logprobs` was not requested. SPEC: the .md marks it required
   * and not nullable; `null` is OpenAPI's.
   */
  logprobs: ChatCompletionLogprobs | null;
}

/** Response to a non-streaming chat request. */
export interface ChatCompletion {
  /** Unique ID of the completion. */
  id: string;
  /** Always `chat.completion`. */
  object: 'chat.completion';
  /** Unix time (seconds) of creation. */
  created: number;
  /** The model that generated it. */
  model: string;
  /** The choices; more than one if `n` > 1. */
  choices: ChatCompletionChoice[];
  /** Token counts. */
  usage: CompletionUsage;
  /** The service tier: the request's `service_tier`, or `default` when it named none. Always sent. */
  service_tier: ServiceTier;
  /**
   * Backend configuration fingerprint. SPEC: not in the .md's response (its chunk requires it); OpenAPI
   * has it optional; kiln always sends it.
   */
  system_fingerprint: string;
}

/**
 * A tool call fragment in a stream. The first fragment of a call has `id`, `type` and `function.name`;
 * the following ones append to `function.arguments`.
 */
export interface ChatCompletionChunkToolCall {
  /** Index of the call in the message's `tool_calls`: fragments with the same index form one call. */
  index: number;
  /** The call's ID (first fragment). */
  id?: string;
  /** Always `function` (first fragment). */
  type?: 'function';
  /** The function, in fragments. */
  function?: {
    /** The function's name (first fragment). */
    name?: string;
    /** The next piece of the JSON-encoded arguments. */
    arguments?: string;
  };
}

/**
 * What a chunk adds to the reply.
 *
 * SPEC: the .md marks `role` required and gives `tool_calls` whole `ToolCall`s; as in OpenAI's API, kiln
 * sends `role` in the first chunk of a choice only, and tool calls as indexed fragments.
 */
export interface ChatCompletionChunkDelta {
  /** Always `assistant`; in the first chunk of each choice. */
  role?: 'assistant';
  /**
   * The next piece of the reply text; left out when the chunk adds none. SPEC: the .md marks `content`
   * and `tool_calls` nullable; kiln leaves them out rather than sending `null`.
   */
  content?: string;
  /** Tool call fragments; left out when the chunk adds none. */
  tool_calls?: ChatCompletionChunkToolCall[];
  /** The next piece of the reasoning (not in OpenAI's API). */
  reasoning_content?: string;
  /** Same as `reasoning_content`, under the other name (not in OpenAI's API). */
  reasoning?: string;
}

/** One choice of a `ChatCompletionChunk`. */
export interface ChatCompletionChunkChoice {
  /** Index of the choice. */
  index: number;
  /** What this chunk adds. */
  delta: ChatCompletionChunkDelta;
  /**
   * Why generation stopped, in the choice's last chunk; `null` before. SPEC: the .md marks it not
   * nullable; `null` is OpenAPI's and the only value a chunk before the last can have.
   */
  finish_reason: ChatCompletionFinishReason | null;
  /** Log probabilities of this chunk's tokens, or `null` when `logprobs` was not requested. */
  logprobs: ChatCompletionLogprobs | null;
}

/** One server-sent event of a streaming chat request (`data: {...}`; the stream ends with `data: [DONE]`). */
export interface ChatCompletionChunk {
  /** Unique ID of the completion; the same in every chunk. */
  id: string;
  /** Always `chat.completion.chunk`. */
  object: 'chat.completion.chunk';
  /** Unix time (seconds) of creation; the same in every chunk. */
  created: number;
  /** The model that generates it. */
  model: string;
  /** The choices; empty in the `usage` chunk of `stream_options.include_usage`. */
  choices: ChatCompletionChunkChoice[];
  /** Backend configuration fingerprint. */
  system_fingerprint: string;
  /** The service tier used. SPEC: not in the .md's chunk; OpenAPI's, optional. */
  service_tier?: ServiceTier;
  /**
   * Token counts: only in the last chunk, and only with `stream_options.include_usage`; `null` or left
   * out before. SPEC: the .md marks it required and not nullable.
   */
  usage?: CompletionUsage | null;
}

// ---------------------------------------------------------------------------------------------------------
// Completion responses
// ---------------------------------------------------------------------------------------------------------

/**
 * Log probabilities of a completion choice, one entry per token. SPEC: not in the .md; OpenAPI's, whose
 * fields are optional; kiln always sends all four.
 */
export interface CompletionLogprobs {
  /** The tokens. */
  tokens: string[];
  /**
   * Log probability of each token; `null` for the first prompt token under `echo`, which has nothing
   * before it to be predicted from. SPEC: OpenAPI has `number[]`; `null` is what OpenAI's API sends there.
   */
  token_logprobs: Array<number | null>;
  /**
   * At each position, the `logprobs` most likely tokens and their log probabilities; `null` where
   * `token_logprobs` is. SPEC: OpenAPI has no `null` entries, as above.
   */
  top_logprobs: Array<Record<string, number> | null>;
  /** Character offset of each token in the text. */
  text_offset: number[];
}

/** One choice of a `Completion`. */
export interface CompletionChoice {
  /** Index of the choice. */
  index: number;
  /** The generated text (after the prompt, if `echo`). */
  text: string;
  /** Why generation stopped. */
  finish_reason: CompletionFinishReason;
  /** Log probabilities, or `null` when `logprobs` was not requested. SPEC: not in the .md; OpenAPI's. */
  logprobs: CompletionLogprobs | null;
}

/** Response to a non-streaming completion request. */
export interface Completion {
  /** Unique ID of the completion. */
  id: string;
  /** Always `text_completion`. SPEC: the .md types it `string` and says it is always `text_completion`. */
  object: 'text_completion';
  /** Unix time (seconds) of creation. */
  created: number;
  /** The model that generated it. */
  model: string;
  /** The choices. */
  choices: CompletionChoice[];
  /** Token counts. */
  usage: CompletionUsage;
  /**
   * The service tier: the request's `service_tier`, or `default` when it named none. Always sent on a
   * full response (SPEC: the .md requires it; OpenAI's completions have no tier).
   */
  service_tier: ServiceTier;
  /** Backend configuration fingerprint. SPEC: not in the .md; OpenAPI's, optional; kiln always sends it. */
  system_fingerprint: string;
}

/** One choice of a `CompletionChunk`. */
export interface CompletionChunkChoice {
  /** Index of the choice. */
  index: number;
  /** The next piece of text. */
  text: string;
  /** Why generation stopped, in the choice's last chunk; `null` before. */
  finish_reason: CompletionFinishReason | null;
  /** Log probabilities of this chunk's tokens, or `null` when `logprobs` was not requested. */
  logprobs: CompletionLogprobs | null;
}

/**
 * One server-sent event of a streaming completion request: a `Completion` with text pieces.
 * SPEC: neither the .md nor OpenAPI define it; this is what OpenAI's API streams.
 */
export interface CompletionChunk {
  /** Unique ID of the completion; the same in every chunk. */
  id: string;
  /** Always `text_completion`. */
  object: 'text_completion';
  /** Unix time (seconds) of creation; the same in every chunk. */
  created: number;
  /** The model that generates it. */
  model: string;
  /** The choices; empty in the `usage` chunk of `stream_options.include_usage`. */
  choices: CompletionChunkChoice[];
  /** Backend configuration fingerprint; in every chunk. */
  system_fingerprint: string;
  /** The service tier: only when the request named one (then the request's `service_tier`). */
  service_tier?: ServiceTier;
  /** Token counts: only in the last chunk, and only with `stream_options.include_usage`; left out before. */
  usage?: CompletionUsage;
}

// ---------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------

/** What went wrong, in OpenAI's error shape. */
export interface KilnErrorObject {
  /** Human-readable description. */
  message: string;
  /** Error class; `invalid_request_error` for every status kiln uses. */
  type: string;
  /** The offending field as a path (`messages[2].content`), or `null`. */
  param: string | null;
  /** Machine-readable code (e.g. `invalid_value`, `unknown_parameter`, `model_not_found`), or `null`. */
  code: string | null;
}

/** Body of an error response (status `KilnErrorStatus`). SPEC: the .md only names 422. */
export interface KilnErrorBody {
  /** The error. */
  error: KilnErrorObject;
}
