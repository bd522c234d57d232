/**
 * Compile-time checks of kiln's wire types (`ts/api.d.ts`) against the `openai` npm package's.
 * Nothing here runs: `node_modules/.bin/tsc -p tests/ts` passes or fails.
 *
 * For each pair of types the check goes both ways:
 * - kiln → openai: what kiln sends (responses) or accepts (requests) fits code written for openai's types;
 * - openai → kiln: what openai's types allow fits kiln's, i.e. a request built for the openai SDK is one
 *   kiln accepts, and a response shaped by openai's types is one kiln's types describe.
 * Where a direction cannot hold, it is checked on the overlap: an `...AsOpenAI` / `...AsKiln` type narrows
 * one side to what both share, with one comment per narrowing saying why. Each narrowing is itself checked
 * to be a narrowing (`AssertAssignable<Original, Narrowed>`), and the full direction is checked to fail
 * (`@ts-expect-error`), so that a narrowing that stops being needed is noticed.
 *
 * TypeScript types are open: an object with more fields than a type lists still fits it. So "kiln has
 * field X that openai lacks" never breaks assignability; the key-set checks (`KeysOnlyIn`) list those
 * fields explicitly instead. (kiln's parser is stricter than its types: it refuses unknown fields with
 * 422, which no type here can express.)
 */

import type * as O from 'openai/resources/chat/completions';
import type * as OC from 'openai/resources/completions';
import type * as OS from 'openai/resources/shared';
import type * as K from '../../ts/api';

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

/** Compiles only if `From` is assignable to `To`. */
type AssertAssignable<To, From extends To> = true;
/** `true` if `A` and `B` are the same type. */
type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** Compiles only if `T` is `true`. */
type AssertTrue<T extends true> = T;
/** The keys of `A` that `B` does not have. */
type KeysOnlyIn<A, B> = Exclude<keyof A, keyof B>;
/** The members of union `A` that are not in union `B`. */
type MembersOnlyIn<A, B> = Exclude<A, B>;
/** Flattens an intersection into one object type (keeps `?`). */
type Simplify<T> = { [P in keyof T]: T[P] } & {};
/** The keys of `T` that are optional. */
type OptionalKeys<T> = { [P in keyof T]-?: {} extends Pick<T, P> ? P : never }[keyof T];
/** The keys of `T` that are required. */
type RequiredKeys<T> = Exclude<keyof T, OptionalKeys<T>>;
/**
 * `T` with `null` removed from every optional field, recursively. kiln accepts `null` for every optional
 * request field (as "absent"); OpenAI's types accept it on some fields only. Requests are compared with
 * this applied to kiln's side: a difference in nullability alone is not an incompatibility of the wire
 * format, since leaving the field out means the same.
 */
type StripOptionalNull<T> = T extends readonly (infer E)[]
  ? StripOptionalNull<E>[]
  : T extends object
    ? string extends keyof T
      ? T // a record such as `Record<string, unknown>`: left as is
      : Simplify<
          { [P in keyof T as P extends OptionalKeys<T> ? P : never]?: StripOptionalNull<Exclude<T[P], null | undefined>> } & {
            [P in keyof T as P extends OptionalKeys<T> ? never : P]: StripOptionalNull<T[P]>;
          }
        >
    : T;

// The helpers themselves: a pass and a failure each.
export type HelperChecks = [
  AssertAssignable<{ a?: string }, { a?: string }>,
  AssertTrue<Equals<StripOptionalNull<{ a?: string | null; b: number | null }>, { a?: string; b: number | null }>>,
  AssertTrue<Equals<KeysOnlyIn<{ a: 1; b: 2 }, { a: 1 }>, 'b'>>,
  AssertTrue<Equals<RequiredKeys<{ a: 1; b?: 2; c: 3 | undefined }>, 'a' | 'c'>>,
];
// @ts-expect-error: a string is not a number.
export type HelperFails1 = AssertAssignable<number, string>;
// @ts-expect-error: `{a?: string}` has optional `a`, `{a: string}` requires it.
export type HelperFails2 = AssertAssignable<{ a: string }, { a?: string }>;
// @ts-expect-error: different types are not equal.
export type HelperFails3 = AssertTrue<Equals<{ a?: string }, { a: string }>>;

// ---------------------------------------------------------------------------------------------------------
// The spec's required fields (a field made optional by mistake passes the openai checks, not these)
// ---------------------------------------------------------------------------------------------------------

export type RequiredFieldChecks = [
  // Requests: only these are required; everything else may be left out.
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionCreateParamsBase>, 'model' | 'messages'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionCreateParamsStreaming>, 'model' | 'messages' | 'stream'>>,
  AssertTrue<Equals<RequiredKeys<K.CompletionCreateParamsBase>, 'model' | 'prompt'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionToolMessageParam>, 'role' | 'content' | 'tool_call_id'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionAssistantMessageParam>, 'role'>>,
  // Responses: what a server always sends.
  AssertTrue<
    Equals<
      RequiredKeys<K.ChatCompletion>,
      'id' | 'object' | 'created' | 'model' | 'choices' | 'usage' | 'service_tier' | 'system_fingerprint'
    >
  >,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionChoice>, 'index' | 'message' | 'finish_reason' | 'logprobs'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionMessage>, 'role' | 'content' | 'refusal'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionLogprobs>, 'content' | 'refusal'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionTokenLogprob>, 'token' | 'logprob' | 'bytes' | 'top_logprobs'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionMessageToolCall>, 'id' | 'type' | 'function'>>,
  AssertTrue<
    Equals<
      RequiredKeys<K.CompletionUsage>,
      'completion_tokens' | 'prompt_tokens' | 'total_tokens' | 'prompt_tokens_details' | 'completion_tokens_details'
    >
  >,
  AssertTrue<Equals<RequiredKeys<K.CompletionUsage['prompt_tokens_details']>, 'cached_tokens'>>,
  AssertTrue<Equals<RequiredKeys<K.CompletionUsage['completion_tokens_details']>, 'reasoning_tokens'>>,
  AssertTrue<
    Equals<RequiredKeys<K.ChatCompletionChunk>, 'id' | 'object' | 'created' | 'model' | 'choices' | 'system_fingerprint'>
  >,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionChunkChoice>, 'index' | 'delta' | 'finish_reason' | 'logprobs'>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionChunkDelta>, never>>,
  AssertTrue<Equals<RequiredKeys<K.ChatCompletionChunkToolCall>, 'index'>>,
  AssertTrue<
    Equals<
      RequiredKeys<K.Completion>,
      'id' | 'object' | 'created' | 'model' | 'choices' | 'usage' | 'service_tier' | 'system_fingerprint'
    >
  >,
  AssertTrue<Equals<RequiredKeys<K.CompletionChoice>, 'index' | 'text' | 'finish_reason' | 'logprobs'>>,
  AssertTrue<Equals<RequiredKeys<K.CompletionLogprobs>, 'tokens' | 'token_logprobs' | 'top_logprobs' | 'text_offset'>>,
  AssertTrue<
    Equals<RequiredKeys<K.CompletionChunk>, 'id' | 'object' | 'created' | 'model' | 'choices' | 'system_fingerprint'>
  >,
  AssertTrue<Equals<RequiredKeys<K.KilnErrorObject>, 'message' | 'type' | 'param' | 'code'>>,
];

// ---------------------------------------------------------------------------------------------------------
// Shared enums
// ---------------------------------------------------------------------------------------------------------

type OServiceTier = NonNullable<O.ChatCompletionCreateParamsBase['service_tier']>;

export type EnumChecks = [
  // reasoning_effort: the same values (openai's type also has `null`, which kiln accepts too).
  AssertTrue<Equals<K.ReasoningEffort, NonNullable<OS.ReasoningEffort>>>,
  // service_tier: EXCLUSION, the tiers differ. kiln's are the .md's; `over-limit` and
  // `no-limit` are not OpenAI's, and kiln does not know OpenAI's `scale`, `priority` and `fast`.
  AssertTrue<Equals<MembersOnlyIn<K.ServiceTier, OServiceTier>, 'over-limit' | 'no-limit'>>,
  AssertTrue<Equals<MembersOnlyIn<OServiceTier, K.ServiceTier>, 'scale' | 'priority' | 'fast'>>,
  // Roles: kiln's four are OpenAI's minus `developer` and the deprecated `function`, which the .md does
  // not have (kiln refuses them with 422).
  AssertTrue<Equals<MembersOnlyIn<O.ChatCompletionRole, K.ChatCompletionRole>, 'developer' | 'function'>>,
  AssertTrue<Equals<MembersOnlyIn<K.ChatCompletionRole, O.ChatCompletionRole>, never>>,
  // finish_reason: kiln's are OpenAI's minus the deprecated `function_call`.
  AssertTrue<
    Equals<MembersOnlyIn<O.ChatCompletion.Choice['finish_reason'], K.ChatCompletionFinishReason>, 'function_call'>
  >,
  AssertAssignable<O.ChatCompletion.Choice['finish_reason'], K.ChatCompletionFinishReason>,
  AssertTrue<Equals<K.CompletionFinishReason, OC.CompletionChoice['finish_reason']>>,
];
/** The service tiers both sides know. */
type CommonServiceTier = Extract<K.ServiceTier, OServiceTier>;

// ---------------------------------------------------------------------------------------------------------
// Chat request: messages
// ---------------------------------------------------------------------------------------------------------

/** kiln's messages narrowed to what OpenAI's types know. */
type KMessageAsOpenAI =
  | K.ChatCompletionSystemMessageParam
  // EXCLUSION: `video_url` parts are kiln's (the .md's); OpenAI has no video input.
  | (Omit<K.ChatCompletionUserMessageParam, 'content'> & {
      content: string | Exclude<K.ChatCompletionContentPart, K.ChatCompletionContentPartVideo>[];
    })
  // EXCLUSION: kiln accepts tool calls without `id` and `type` (the .md does not require them; `type`
  // defaults to `function`); OpenAI's types require both.
  | (Omit<K.ChatCompletionAssistantMessageParam, 'tool_calls'> & {
      tool_calls?: (K.ChatCompletionMessageToolCallParam & { id: string; type: 'function' })[] | null;
    })
  | K.ChatCompletionToolMessageParam;

/** OpenAI's messages narrowed to what kiln accepts. */
type OMessageAsKiln =
  // EXCLUSION: no `developer` (OpenAI's newer name for `system`) and no deprecated `function` messages:
  // the .md's roles are system, user, assistant and tool.
  | O.ChatCompletionSystemMessageParam
  // EXCLUSION: no `input_audio` or `file` parts (kiln reads text, images and video only), and no image
  // `detail: 'original'` (in the package's types, not in OpenAI's OpenAPI document).
  | (Omit<O.ChatCompletionUserMessageParam, 'content'> & {
      content:
        | string
        | (
            | O.ChatCompletionContentPartText
            | (Omit<O.ChatCompletionContentPartImage, 'image_url'> & {
                image_url: Omit<O.ChatCompletionContentPartImage.ImageURL, 'detail'> & {
                  detail?: Exclude<O.ChatCompletionContentPartImage.ImageURL['detail'], 'original'>;
                };
              })
          )[];
    })
  // EXCLUSION: no `refusal` content parts (kiln's assistant content is text only) and no `custom` tool
  // calls (kiln has function tools only).
  | (Omit<O.ChatCompletionAssistantMessageParam, 'content' | 'tool_calls'> & {
      content?: string | O.ChatCompletionContentPartText[] | null;
      tool_calls?: O.ChatCompletionMessageFunctionToolCall[];
    })
  | O.ChatCompletionToolMessageParam;

export type MessageChecks = [
  // The narrowed types are narrowings.
  AssertAssignable<K.ChatCompletionMessageParam, KMessageAsOpenAI>,
  AssertAssignable<O.ChatCompletionMessageParam, OMessageAsKiln>,
  // Both directions on the overlap.
  AssertAssignable<O.ChatCompletionMessageParam, StripOptionalNull<KMessageAsOpenAI>>,
  AssertAssignable<K.ChatCompletionMessageParam, OMessageAsKiln>,
  // Per role, for clearer errors.
  AssertAssignable<O.ChatCompletionSystemMessageParam, StripOptionalNull<K.ChatCompletionSystemMessageParam>>,
  AssertAssignable<O.ChatCompletionToolMessageParam, StripOptionalNull<K.ChatCompletionToolMessageParam>>,
  AssertAssignable<K.ChatCompletionSystemMessageParam, O.ChatCompletionSystemMessageParam>,
  AssertAssignable<K.ChatCompletionToolMessageParam, O.ChatCompletionToolMessageParam>,
  AssertAssignable<O.ChatCompletionContentPartText, K.ChatCompletionContentPartText>,
  AssertAssignable<K.ChatCompletionContentPartText, O.ChatCompletionContentPartText>,
  AssertAssignable<O.ChatCompletionContentPartImage, StripOptionalNull<K.ChatCompletionContentPartImage>>,
  // Fields only one side's messages have (no effect on assignability; listed to be reviewed):
  // kiln's assistant messages carry the reasoning (not in OpenAI's API) ...
  AssertTrue<
    Equals<
      KeysOnlyIn<K.ChatCompletionAssistantMessageParam, O.ChatCompletionAssistantMessageParam>,
      'reasoning_content' | 'reasoning'
    >
  >,
  // ... and OpenAI's carry audio and the deprecated function_call, which kiln's parser refuses (unknown
  // field, 422). (`refusal` both have: kiln's parser accepts it on assistant messages.)
  AssertTrue<
    Equals<
      KeysOnlyIn<O.ChatCompletionAssistantMessageParam, K.ChatCompletionAssistantMessageParam>,
      'audio' | 'function_call'
    >
  >,
  AssertTrue<
    Equals<K.ChatCompletionAssistantMessageParam['refusal'], O.ChatCompletionAssistantMessageParam['refusal']>
  >,
  // The .md allows `name` on every role; OpenAI's tool messages have none.
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionToolMessageParam, O.ChatCompletionToolMessageParam>, 'name'>>,
];
// The narrowings are needed: without them neither direction holds.
// @ts-expect-error: kiln's video parts and id-less tool calls are not OpenAI messages.
export type MessageFullK2O = AssertAssignable<O.ChatCompletionMessageParam, StripOptionalNull<K.ChatCompletionMessageParam>>;
// @ts-expect-error: OpenAI's developer/function roles, audio/file parts and custom tool calls are not kiln's.
export type MessageFullO2K = AssertAssignable<K.ChatCompletionMessageParam, O.ChatCompletionMessageParam>;

// ---------------------------------------------------------------------------------------------------------
// Chat request: tools, tool_choice, response_format
// ---------------------------------------------------------------------------------------------------------

/** kiln's tool with `type` set. EXCLUSION: kiln accepts a tool without `type` (the .md does not require it). */
type KToolAsOpenAI = K.ChatCompletionTool & { type: 'function' };
/** OpenAI's function tools. EXCLUSION: no `custom` (free-form grammar) tools; kiln has function tools only. */
type OToolAsKiln = O.ChatCompletionFunctionTool;

/** kiln's tool_choice with `type` set on a named choice. EXCLUSION: as for tools, `type` may be left out. */
type KToolChoiceAsOpenAI =
  | Exclude<K.ChatCompletionToolChoiceOption, K.ChatCompletionNamedToolChoice>
  | (K.ChatCompletionNamedToolChoice & { type: 'function' });
/** OpenAI's tool_choice. EXCLUSION: no `allowed_tools` and no named `custom` tool (not in the .md). */
type OToolChoiceAsKiln = Exclude<
  O.ChatCompletionToolChoiceOption,
  O.ChatCompletionAllowedToolChoice | O.ChatCompletionNamedToolChoiceCustom
>;

/**
 * OpenAI's response_format. EXCLUSION: `json_schema.schema` is optional in OpenAI's types; the .md
 * requires it (kiln answers 422 without it).
 */
type OResponseFormatAsKiln =
  | OS.ResponseFormatText
  | OS.ResponseFormatJSONObject
  | (Omit<OS.ResponseFormatJSONSchema, 'json_schema'> & {
      json_schema: OS.ResponseFormatJSONSchema.JSONSchema & { schema: { [key: string]: unknown } };
    });

export type ToolChecks = [
  AssertAssignable<K.ChatCompletionTool, KToolAsOpenAI>,
  AssertAssignable<O.ChatCompletionTool, OToolAsKiln>,
  AssertAssignable<O.ChatCompletionTool, StripOptionalNull<KToolAsOpenAI>>,
  AssertAssignable<K.ChatCompletionTool, OToolAsKiln>,
  // `defer_loading` is the .md's, not OpenAI's.
  AssertTrue<Equals<KeysOnlyIn<K.FunctionDefinition, OS.FunctionDefinition>, 'defer_loading'>>,
  AssertTrue<Equals<KeysOnlyIn<OS.FunctionDefinition, K.FunctionDefinition>, never>>,

  AssertAssignable<K.ChatCompletionToolChoiceOption, KToolChoiceAsOpenAI>,
  AssertAssignable<O.ChatCompletionToolChoiceOption, OToolChoiceAsKiln>,
  AssertAssignable<O.ChatCompletionToolChoiceOption, KToolChoiceAsOpenAI>,
  AssertAssignable<K.ChatCompletionToolChoiceOption, OToolChoiceAsKiln>,

  // response_format: kiln → openai holds whole; openai → kiln on the overlap.
  AssertAssignable<NonNullable<O.ChatCompletionCreateParamsBase['response_format']>, StripOptionalNull<K.ResponseFormat>>,
  AssertAssignable<NonNullable<O.ChatCompletionCreateParamsBase['response_format']>, OResponseFormatAsKiln>,
  AssertAssignable<K.ResponseFormat, OResponseFormatAsKiln>,
];
// @ts-expect-error: a kiln tool may lack `type`.
export type ToolFullK2O = AssertAssignable<O.ChatCompletionTool, StripOptionalNull<K.ChatCompletionTool>>;
// @ts-expect-error: OpenAI's custom tools are not kiln's.
export type ToolFullO2K = AssertAssignable<K.ChatCompletionTool, O.ChatCompletionTool>;
// @ts-expect-error: a kiln named tool_choice may lack `type`.
export type ToolChoiceFullK2O = AssertAssignable<O.ChatCompletionToolChoiceOption, K.ChatCompletionToolChoiceOption>;
// @ts-expect-error: OpenAI's allowed_tools and custom choices are not kiln's.
export type ToolChoiceFullO2K = AssertAssignable<K.ChatCompletionToolChoiceOption, O.ChatCompletionToolChoiceOption>;
// @ts-expect-error: OpenAI's json_schema may lack `schema`.
export type ResponseFormatFullO2K = AssertAssignable<K.ResponseFormat, NonNullable<O.ChatCompletionCreateParamsBase['response_format']>>;

// ---------------------------------------------------------------------------------------------------------
// Chat request: the body
// ---------------------------------------------------------------------------------------------------------

/** Fields of a chat request whose types differ, each narrowed above. */
type ChatNarrowed = 'messages' | 'tools' | 'tool_choice' | 'service_tier' | 'response_format';

/** kiln's chat request narrowed to what OpenAI's types know (each union member separately). */
type KChatAsOpenAI<T extends K.ChatCompletionCreateParams> = T extends unknown
  ? Omit<T, ChatNarrowed> & {
      messages: KMessageAsOpenAI[];
      tools?: KToolAsOpenAI[] | null;
      tool_choice?: KToolChoiceAsOpenAI | null;
      service_tier?: CommonServiceTier | null;
      response_format?: K.ResponseFormat | null;
    }
  : never;

/** OpenAI's chat request narrowed to what kiln accepts (each union member separately). */
export type OChatAsKiln<T extends O.ChatCompletionCreateParams> = T extends unknown
  ? Omit<T, ChatNarrowed | 'modalities'> & {
      messages: OMessageAsKiln[];
      tools?: OToolAsKiln[];
      tool_choice?: OToolChoiceAsKiln;
      service_tier?: CommonServiceTier | null;
      response_format?: OResponseFormatAsKiln;
      // EXCLUSION: no `'audio'` modality; kiln generates text only (400 `unsupported_parameter`).
      modalities?: 'text'[] | null;
    }
  : never;

export type ChatRequestChecks = [
  // The narrowed types are narrowings.
  AssertAssignable<K.ChatCompletionCreateParams, KChatAsOpenAI<K.ChatCompletionCreateParams>>,
  AssertAssignable<O.ChatCompletionCreateParams, OChatAsKiln<O.ChatCompletionCreateParams>>,

  // kiln → openai, on the overlap.
  AssertAssignable<O.ChatCompletionCreateParams, StripOptionalNull<KChatAsOpenAI<K.ChatCompletionCreateParams>>>,
  AssertAssignable<
    O.ChatCompletionCreateParamsStreaming,
    StripOptionalNull<KChatAsOpenAI<K.ChatCompletionCreateParamsStreaming>>
  >,
  AssertAssignable<
    O.ChatCompletionCreateParamsNonStreaming,
    StripOptionalNull<KChatAsOpenAI<K.ChatCompletionCreateParamsNonStreaming>>
  >,

  // openai → kiln, on the overlap.
  AssertAssignable<K.ChatCompletionCreateParams, OChatAsKiln<O.ChatCompletionCreateParams>>,
  AssertAssignable<K.ChatCompletionCreateParamsStreaming, OChatAsKiln<O.ChatCompletionCreateParamsStreaming>>,
  AssertAssignable<K.ChatCompletionCreateParamsNonStreaming, OChatAsKiln<O.ChatCompletionCreateParamsNonStreaming>>,

  // The streaming split keys on the same values of `stream`.
  AssertTrue<Equals<K.ChatCompletionCreateParamsStreaming['stream'], O.ChatCompletionCreateParamsStreaming['stream']>>,
  AssertTrue<
    Equals<K.ChatCompletionCreateParamsNonStreaming['stream'], O.ChatCompletionCreateParamsNonStreaming['stream']>
  >,

  // Fields only kiln's request has: `extra_body` (the .md's).
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionCreateParamsBase, O.ChatCompletionCreateParamsBase>, 'extra_body'>>,
  // Fields only OpenAI's request has, which kiln's types leave out: none of them is in the .md. What kiln's
  // parser (src/api/request.rs, src/api/chat.rs) does with each:
  // - parsed only to be refused: when set to anything but `null`, 400 `unsupported_parameter` naming the
  //   field: audio (audio output), prediction (predicted outputs), web_search_options (web search),
  //   functions / function_call (the deprecated forms of tools / tool_choice), verbosity (output length
  //   hint);
  // - unknown (422 unknown_parameter): moderation (OpenAI's moderation pass), safety_identifier (OpenAI's
  //   abuse-monitoring ID; kiln has `user`), prompt_cache_key / prompt_cache_options /
  //   prompt_cache_retention (OpenAI's server-side prompt cache).
  // (seed, parallel_tool_calls, metadata and modalities, also OpenAI's and not the .md's, are declared.)
  AssertTrue<
    Equals<
      KeysOnlyIn<O.ChatCompletionCreateParamsBase, K.ChatCompletionCreateParamsBase>,
      | 'audio'
      | 'functions'
      | 'function_call'
      | 'prediction'
      | 'web_search_options'
      | 'verbosity'
      | 'moderation'
      | 'prompt_cache_key'
      | 'prompt_cache_options'
      | 'prompt_cache_retention'
      | 'safety_identifier'
    >
  >,
  // The OpenAI fields kiln declares have OpenAI's types (modalities narrowed to `'text'`, see OChatAsKiln).
  AssertTrue<Equals<K.ChatCompletionCreateParamsBase['seed'], O.ChatCompletionCreateParamsBase['seed']>>,
  AssertTrue<
    Equals<
      NonNullable<K.ChatCompletionCreateParamsBase['parallel_tool_calls']>,
      NonNullable<O.ChatCompletionCreateParamsBase['parallel_tool_calls']>
    >
  >,
  AssertTrue<
    Equals<NonNullable<K.ChatCompletionCreateParamsBase['metadata']>, NonNullable<O.ChatCompletionCreateParamsBase['metadata']>>
  >,
  AssertTrue<
    Equals<MembersOnlyIn<NonNullable<O.ChatCompletionCreateParamsBase['modalities']>[number], 'text'>, 'audio'>
  >,
];
// Without the narrowings neither direction holds.
// @ts-expect-error: kiln's service tiers, video parts, type-less tools.
export type ChatRequestFullK2O = AssertAssignable<O.ChatCompletionCreateParams, StripOptionalNull<K.ChatCompletionCreateParams>>;
// @ts-expect-error: OpenAI's developer messages, custom tools, service tiers, optional schema, audio modality.
export type ChatRequestFullO2K = AssertAssignable<K.ChatCompletionCreateParams, O.ChatCompletionCreateParams>;
// @ts-expect-error: without StripOptionalNull, kiln's `user: null` (and others) is not OpenAI's.
export type ChatRequestNullK2O = AssertAssignable<O.ChatCompletionCreateParams, KChatAsOpenAI<K.ChatCompletionCreateParams>>;

// ---------------------------------------------------------------------------------------------------------
// Completion request
// ---------------------------------------------------------------------------------------------------------

/**
 * OpenAI's completion request narrowed to what kiln accepts. EXCLUSION: OpenAI allows `prompt: null`
 * (meaning `<|endoftext|>`); the .md requires a prompt.
 */
export type OCompletionAsKiln<T extends OC.CompletionCreateParams> = T extends unknown
  ? Omit<T, 'prompt'> & { prompt: Exclude<T['prompt'], null> }
  : never;

export type CompletionRequestChecks = [
  AssertAssignable<OC.CompletionCreateParams, OCompletionAsKiln<OC.CompletionCreateParams>>,
  // kiln → openai holds whole (modulo null for absent).
  AssertAssignable<OC.CompletionCreateParams, StripOptionalNull<K.CompletionCreateParams>>,
  AssertAssignable<OC.CompletionCreateParamsStreaming, StripOptionalNull<K.CompletionCreateParamsStreaming>>,
  AssertAssignable<OC.CompletionCreateParamsNonStreaming, StripOptionalNull<K.CompletionCreateParamsNonStreaming>>,
  // openai → kiln, on the overlap.
  AssertAssignable<K.CompletionCreateParams, OCompletionAsKiln<OC.CompletionCreateParams>>,
  AssertAssignable<K.CompletionCreateParamsStreaming, OCompletionAsKiln<OC.CompletionCreateParamsStreaming>>,
  AssertAssignable<K.CompletionCreateParamsNonStreaming, OCompletionAsKiln<OC.CompletionCreateParamsNonStreaming>>,
  AssertTrue<Equals<K.CompletionCreateParamsStreaming['stream'], OC.CompletionCreateParamsStreaming['stream']>>,
  AssertTrue<Equals<K.CompletionCreateParamsNonStreaming['stream'], OC.CompletionCreateParamsNonStreaming['stream']>>,
  // Fields only kiln's has: the .md's `extra_body` and `service_tier` (OpenAI's completions have no tier).
  AssertTrue<Equals<KeysOnlyIn<K.CompletionCreateParamsBase, OC.CompletionCreateParamsBase>, 'extra_body' | 'service_tier'>>,
  // Fields only OpenAI's has, not in the .md: `best_of` (server-side best-of-n) and `suffix`
  // (fill-in-the-middle). kiln's parser reads them only to refuse them: 400 `unsupported_parameter`,
  // unless `null`, `best_of: 1` or `suffix: ""` (which ask for nothing).
  AssertTrue<Equals<KeysOnlyIn<OC.CompletionCreateParamsBase, K.CompletionCreateParamsBase>, 'best_of' | 'suffix'>>,
];
// @ts-expect-error: OpenAI's `prompt: null`.
export type CompletionRequestFullO2K = AssertAssignable<K.CompletionCreateParams, OC.CompletionCreateParams>;

// ---------------------------------------------------------------------------------------------------------
// Responses: usage, logprobs, errors
// ---------------------------------------------------------------------------------------------------------

/**
 * kiln's usage as OpenAI's types see it. EXCLUSION: the .md makes `cached_tokens` and `reasoning_tokens`
 * nullable; OpenAI's types have them absent or a number. Code reading them with `?? 0` handles both.
 */
type KUsageAsOpenAI = Omit<K.CompletionUsage, 'prompt_tokens_details' | 'completion_tokens_details'> & {
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
};
/**
 * OpenAI's usage narrowed to kiln's. EXCLUSION: kiln always sends both details objects, each with its
 * count; OpenAI's types have them (and the counts) optional.
 */
type OUsageAsKiln = Omit<OC.CompletionUsage, 'prompt_tokens_details' | 'completion_tokens_details'> & {
  prompt_tokens_details: OC.CompletionUsage.PromptTokensDetails & { cached_tokens: number };
  completion_tokens_details: OC.CompletionUsage.CompletionTokensDetails & { reasoning_tokens: number };
};

export type UsageChecks = [
  AssertAssignable<K.CompletionUsage, KUsageAsOpenAI>,
  AssertAssignable<OC.CompletionUsage, OUsageAsKiln>,
  AssertAssignable<OC.CompletionUsage, KUsageAsOpenAI>,
  AssertAssignable<K.CompletionUsage, OUsageAsKiln>,
  AssertAssignable<O.ChatCompletionTokenLogprob, K.ChatCompletionTokenLogprob>,
  AssertAssignable<K.ChatCompletionTokenLogprob, O.ChatCompletionTokenLogprob>,
  AssertAssignable<OS.ErrorObject, K.KilnErrorObject>,
  AssertAssignable<K.KilnErrorObject, OS.ErrorObject>,
  AssertTrue<Equals<K.KilnErrorStatus, 400 | 404 | 422>>,
];
// @ts-expect-error: kiln's `cached_tokens: null`.
export type UsageFullK2O = AssertAssignable<OC.CompletionUsage, K.CompletionUsage>;
// @ts-expect-error: OpenAI's optional details.
export type UsageFullO2K = AssertAssignable<K.CompletionUsage, OC.CompletionUsage>;

/** OpenAI's chat logprobs narrowed to kiln's. EXCLUSION: no refusal logprobs (kiln never refuses). */
type OLogprobsAsKiln = Omit<O.ChatCompletion.Choice.Logprobs, 'refusal'> & { refusal: null };

export type LogprobsChecks = [
  // kiln → openai holds whole: kiln always sends `refusal: null`.
  AssertAssignable<O.ChatCompletion.Choice.Logprobs, K.ChatCompletionLogprobs>,
  AssertAssignable<O.ChatCompletion.Choice.Logprobs, OLogprobsAsKiln>,
  AssertAssignable<K.ChatCompletionLogprobs, OLogprobsAsKiln>,
];
// @ts-expect-error: OpenAI's refusal logprobs.
export type LogprobsFullO2K = AssertAssignable<K.ChatCompletionLogprobs, O.ChatCompletion.Choice.Logprobs>;

// ---------------------------------------------------------------------------------------------------------
// Chat response
// ---------------------------------------------------------------------------------------------------------

/** OpenAI's reply narrowed to kiln's. EXCLUSION: no refusals, no `custom` tool calls. */
type OMessageReplyAsKiln = Omit<O.ChatCompletionMessage, 'refusal' | 'tool_calls'> & {
  refusal: null;
  tool_calls?: O.ChatCompletionMessageFunctionToolCall[];
};

/** kiln's chat completion as OpenAI's types see it: usage (see `KUsageAsOpenAI`) and service tiers. */
type KChatCompletionAsOpenAI = Omit<K.ChatCompletion, 'usage' | 'service_tier'> & {
  usage: KUsageAsOpenAI;
  service_tier: CommonServiceTier;
};
/** OpenAI's chat completion narrowed to kiln's. */
type OChatCompletionAsKiln = Omit<O.ChatCompletion, 'choices' | 'usage' | 'service_tier' | 'system_fingerprint'> & {
  choices: (Omit<O.ChatCompletion.Choice, 'message' | 'logprobs' | 'finish_reason'> & {
    message: OMessageReplyAsKiln;
    logprobs: OLogprobsAsKiln | null;
    // EXCLUSION: no deprecated `function_call` finish reason.
    finish_reason: K.ChatCompletionFinishReason;
  })[];
  // EXCLUSION: the .md requires `usage` and `service_tier` in a response, and kiln always sends
  // `system_fingerprint`; OpenAI's types have all three optional.
  usage: OUsageAsKiln;
  service_tier: CommonServiceTier;
  system_fingerprint: string;
};

export type ChatCompletionChecks = [
  AssertAssignable<K.ChatCompletion, KChatCompletionAsOpenAI>,
  AssertAssignable<O.ChatCompletion, OChatCompletionAsKiln>,
  AssertAssignable<O.ChatCompletion, KChatCompletionAsOpenAI>,
  AssertAssignable<K.ChatCompletion, OChatCompletionAsKiln>,
  AssertAssignable<O.ChatCompletionMessageToolCall, K.ChatCompletionMessageToolCall>,
  AssertAssignable<K.ChatCompletionMessageToolCall, O.ChatCompletionMessageFunctionToolCall>,
  // Fields only OpenAI's has: `metadata` (stored completions) and `moderation` (OpenAI's moderation pass).
  AssertTrue<Equals<KeysOnlyIn<O.ChatCompletion, K.ChatCompletion>, 'metadata' | 'moderation'>>,
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletion, O.ChatCompletion>, never>>,
  // The reply: kiln's has the reasoning; OpenAI's has web-search annotations, audio and function_call.
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionMessage, O.ChatCompletionMessage>, 'reasoning_content' | 'reasoning'>>,
  AssertTrue<Equals<KeysOnlyIn<O.ChatCompletionMessage, K.ChatCompletionMessage>, 'annotations' | 'audio' | 'function_call'>>,
  // kiln's reply as a whole is an OpenAI reply (`refusal: null` included).
  AssertAssignable<O.ChatCompletionMessage, K.ChatCompletionMessage>,
  // Round trip: a kiln reply pushed back into `messages` is an assistant message kiln accepts, every
  // field of it (`refusal` included) ...
  AssertAssignable<K.ChatCompletionAssistantMessageParam, K.ChatCompletionMessage>,
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionMessage, K.ChatCompletionAssistantMessageParam>, never>>,
  // ... and so is an OpenAI reply, on the overlap (no `custom` tool calls), `refusal: string | null`
  // included. (Its `annotations`, `audio` and `function_call` keys, if present on the wire, kiln's
  // parser refuses as unknown fields; kiln's replies have none of them.)
  AssertAssignable<
    K.ChatCompletionAssistantMessageParam,
    Omit<O.ChatCompletionMessage, 'tool_calls'> & { tool_calls?: O.ChatCompletionMessageFunctionToolCall[] }
  >,
  AssertAssignable<
    K.ChatCompletionMessageParam,
    Omit<O.ChatCompletionMessage, 'tool_calls'> & { tool_calls?: O.ChatCompletionMessageFunctionToolCall[] }
  >,
];
// @ts-expect-error: kiln's service tiers and nullable token details.
export type ChatCompletionFullK2O = AssertAssignable<O.ChatCompletion, K.ChatCompletion>;
// @ts-expect-error: OpenAI's optional usage, refusals, custom tool calls, function_call finish reason.
export type ChatCompletionFullO2K = AssertAssignable<K.ChatCompletion, O.ChatCompletion>;

// ---------------------------------------------------------------------------------------------------------
// Chat stream chunk
// ---------------------------------------------------------------------------------------------------------

type ODelta = O.ChatCompletionChunk.Choice.Delta;
type ODeltaToolCall = O.ChatCompletionChunk.Choice.Delta.ToolCall;

/** OpenAI's delta narrowed to kiln's. */
type ODeltaAsKiln = Omit<ODelta, 'role' | 'content' | 'tool_calls'> & {
  // EXCLUSION: a reply's role is `assistant`; OpenAI's delta type allows every role.
  role?: 'assistant';
  // EXCLUSION: kiln leaves `content` out of a delta that adds none; OpenAI's types also allow `null`.
  content?: string;
  // EXCLUSION: no `custom` tool call fragments.
  tool_calls?: (Omit<ODeltaToolCall, 'type'> & { type?: 'function' })[];
};

/** kiln's chunk as OpenAI's types see it: usage (see `KUsageAsOpenAI`) and service tiers. */
type KChunkAsOpenAI = Omit<K.ChatCompletionChunk, 'usage' | 'service_tier'> & {
  usage?: KUsageAsOpenAI | null;
  service_tier?: CommonServiceTier;
};
/** OpenAI's chunk narrowed to kiln's. */
type OChunkAsKiln = Omit<O.ChatCompletionChunk, 'choices' | 'system_fingerprint' | 'service_tier' | 'usage'> & {
  choices: (Omit<O.ChatCompletionChunk.Choice, 'delta' | 'logprobs' | 'finish_reason'> & {
    delta: ODeltaAsKiln;
    // EXCLUSION: the .md requires `logprobs` in every chunk choice (`null` when not requested);
    // OpenAI's types have it optional.
    logprobs: OLogprobsAsKiln | null;
    // EXCLUSION: no deprecated `function_call` finish reason.
    finish_reason: K.ChatCompletionFinishReason | null;
  })[];
  // EXCLUSION: the .md requires `system_fingerprint` in a chunk; OpenAI's types have it optional.
  system_fingerprint: string;
  service_tier?: CommonServiceTier;
  usage?: OUsageAsKiln | null;
};

export type ChunkChecks = [
  AssertAssignable<K.ChatCompletionChunk, KChunkAsOpenAI>,
  AssertAssignable<O.ChatCompletionChunk, OChunkAsKiln>,
  AssertAssignable<O.ChatCompletionChunk, KChunkAsOpenAI>,
  AssertAssignable<K.ChatCompletionChunk, OChunkAsKiln>,
  AssertAssignable<ODeltaToolCall, K.ChatCompletionChunkToolCall>,
  AssertAssignable<ODelta, K.ChatCompletionChunkDelta>,
  AssertAssignable<ODelta, ODeltaAsKiln>,
  AssertAssignable<K.ChatCompletionChunkDelta, ODeltaAsKiln>,
  // Fields only OpenAI's chunk has: `moderation` and `obfuscation` (OpenAI's stream padding).
  AssertTrue<Equals<KeysOnlyIn<O.ChatCompletionChunk, K.ChatCompletionChunk>, 'moderation' | 'obfuscation'>>,
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionChunk, O.ChatCompletionChunk>, never>>,
  AssertTrue<Equals<KeysOnlyIn<K.ChatCompletionChunkDelta, ODelta>, 'reasoning_content' | 'reasoning'>>,
  AssertTrue<Equals<KeysOnlyIn<ODelta, K.ChatCompletionChunkDelta>, 'audio' | 'function_call' | 'refusal'>>,
];
// @ts-expect-error: kiln's service tiers and nullable token details.
export type ChunkFullK2O = AssertAssignable<O.ChatCompletionChunk, K.ChatCompletionChunk>;
// @ts-expect-error: OpenAI's optional system_fingerprint and logprobs, other roles, null content, custom tool calls.
export type ChunkFullO2K = AssertAssignable<K.ChatCompletionChunk, O.ChatCompletionChunk>;

// ---------------------------------------------------------------------------------------------------------
// Completion response and stream chunk
// ---------------------------------------------------------------------------------------------------------

/**
 * kiln's completion logprobs as OpenAI's types see them. EXCLUSION: under `echo` the first prompt token
 * has `null` in `token_logprobs` and `top_logprobs` (as OpenAI's API sends it); OpenAI's types have no
 * `null` entries.
 */
type KCompletionLogprobsAsOpenAI = Omit<K.CompletionLogprobs, 'token_logprobs' | 'top_logprobs'> & {
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
};
/** kiln's completion as OpenAI's types see it: usage (see `KUsageAsOpenAI`) and logprobs (above). */
type KCompletionAsOpenAI = Omit<K.Completion, 'usage' | 'choices'> & {
  choices: (Omit<K.CompletionChoice, 'logprobs'> & { logprobs: KCompletionLogprobsAsOpenAI | null })[];
  usage: KUsageAsOpenAI;
};
/** OpenAI's completion narrowed to kiln's. */
type OCompletionResponseAsKiln = Omit<OC.Completion, 'choices' | 'usage'> & {
  choices: (Omit<OC.CompletionChoice, 'logprobs'> & {
    // EXCLUSION: OpenAI's types make the four logprobs arrays optional; kiln always sends all four.
    logprobs: Required<OC.CompletionChoice.Logprobs> | null;
  })[];
  // EXCLUSION: the .md requires `usage`; OpenAI's types have it optional.
  usage: OUsageAsKiln;
  // EXCLUSION: the .md requires `service_tier`, which OpenAI's completion type does not have at all.
  service_tier: CommonServiceTier;
  // EXCLUSION: kiln always sends `system_fingerprint`; OpenAI's types have it optional.
  system_fingerprint: string;
};

/**
 * kiln's completion chunk as OpenAI's types see it (the openai SDK types a completion stream as
 * `Stream<Completion>`). EXCLUSION: a chunk before a choice's last has `finish_reason: null`, as in
 * OpenAI's stream, though OpenAI's `Completion` type does not allow it.
 */
type KCompletionChunkAsOpenAI = Omit<K.CompletionChunk, 'choices' | 'usage'> & {
  choices: (Omit<K.CompletionChunkChoice, 'finish_reason' | 'logprobs'> & {
    finish_reason: K.CompletionFinishReason;
    logprobs: KCompletionLogprobsAsOpenAI | null;
  })[];
  usage?: KUsageAsOpenAI;
};
/**
 * OpenAI's completion (as a stream event) narrowed to kiln's chunk: the logprobs arrays, usage and
 * `system_fingerprint` as above.
 */
type OCompletionChunkAsKiln = Omit<OC.Completion, 'choices' | 'usage' | 'system_fingerprint'> & {
  choices: (Omit<OC.CompletionChoice, 'logprobs'> & { logprobs: Required<OC.CompletionChoice.Logprobs> | null })[];
  usage?: OUsageAsKiln;
  system_fingerprint: string;
};

export type CompletionChecks = [
  AssertAssignable<K.Completion, KCompletionAsOpenAI>,
  AssertAssignable<OC.Completion, OCompletionResponseAsKiln>,
  AssertAssignable<OC.Completion, KCompletionAsOpenAI>,
  AssertAssignable<K.Completion, OCompletionResponseAsKiln>,
  AssertAssignable<K.CompletionChunk, KCompletionChunkAsOpenAI>,
  AssertAssignable<OC.Completion, OCompletionChunkAsKiln>,
  AssertAssignable<OC.Completion, KCompletionChunkAsOpenAI>,
  AssertAssignable<K.CompletionChunk, OCompletionChunkAsKiln>,
  AssertTrue<Equals<KeysOnlyIn<K.Completion, OC.Completion>, 'service_tier'>>,
  AssertTrue<Equals<KeysOnlyIn<OC.Completion, K.Completion>, never>>,
  AssertTrue<Equals<KeysOnlyIn<OC.CompletionChoice, K.CompletionChoice>, never>>,
];
// @ts-expect-error: kiln's nullable token details and echo logprobs.
export type CompletionFullK2O = AssertAssignable<OC.Completion, K.Completion>;
// @ts-expect-error: OpenAI's optional usage, system_fingerprint and logprobs arrays, missing service_tier.
export type CompletionFullO2K = AssertAssignable<K.Completion, OC.Completion>;
// @ts-expect-error: kiln's `finish_reason: null` in a chunk.
export type CompletionChunkFullK2O = AssertAssignable<OC.Completion, StripOptionalNull<K.CompletionChunk>>;

// ---------------------------------------------------------------------------------------------------------
// Values: every field spelled out (a misspelled field is an excess-property error), and the negatives
// ---------------------------------------------------------------------------------------------------------

export const chatRequest: K.ChatCompletionCreateParamsNonStreaming = {
  model: 'kiln-test',
  messages: [
    { role: 'system', content: 'Be brief.', name: 'rules' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is on these?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } },
        { type: 'video_url', video_url: { url: 'https://example.invalid/v.mp4' } },
      ],
    },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'look', arguments: '{}' } }],
      reasoning_content: 'I should look.',
      reasoning: null,
    },
    { role: 'tool', content: 'a cat', tool_call_id: 'call_1' },
    { role: 'assistant', tool_calls: [{ function: { name: 'look', arguments: '{"again":true}' } }] },
    { role: 'tool', content: 'still a cat', tool_call_id: 'call_2', name: 'look' },
    { role: 'assistant', content: 'A cat.', refusal: null },
  ],
  store: false,
  max_tokens: 64,
  max_completion_tokens: null,
  temperature: 0.7,
  top_p: 0.9,
  tools: [
    {
      type: 'function',
      function: { name: 'look', description: 'Looks.', parameters: { type: 'object' }, strict: true, defer_loading: false },
    },
    { function: { name: 'wait' } },
  ],
  tool_choice: { type: 'function', function: { name: 'look' } },
  reasoning_effort: 'low',
  n: 1,
  stream: false,
  stream_options: null,
  stop: '\n\n',
  presence_penalty: 0,
  frequency_penalty: 0.5,
  logit_bias: { '50256': -100 },
  logprobs: true,
  top_logprobs: 2,
  user: 'u-1',
  response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object' }, strict: true } },
  extra_body: { anything: [1, 2] },
  service_tier: 'auto',
  seed: 42,
  parallel_tool_calls: false,
  metadata: { session: 's-1' },
  modalities: ['text'],
};
export const chatStreamRequest: K.ChatCompletionCreateParamsStreaming = {
  model: 'kiln-test',
  messages: [{ role: 'user', content: 'Hi' }],
  stream: true,
  stream_options: { include_usage: true },
  stop: ['a', 'b'],
};
export const completionRequest: K.CompletionCreateParams = {
  model: 'kiln-test',
  prompt: [
    [1, 2, 3],
    [4, 5],
  ],
  stream: true,
  stream_options: { include_usage: null },
  max_tokens: 16,
  temperature: 0,
  top_p: 1,
  n: 2,
  logprobs: 3,
  echo: true,
  stop: ['\n'],
  presence_penalty: null,
  frequency_penalty: null,
  logit_bias: {},
  user: null,
  extra_body: null,
  service_tier: 'flex',
  seed: 1,
};
export const chatCompletion: K.ChatCompletion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'kiln-test',
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        refusal: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'look', arguments: '{}' } }],
        reasoning_content: 'Looking.',
      },
      finish_reason: 'tool_calls',
      logprobs: {
        content: [{ token: 'a', logprob: -0.1, bytes: [97], top_logprobs: [{ token: 'b', logprob: -2.5, bytes: null }] }],
        refusal: null,
      },
    },
  ],
  usage: {
    prompt_tokens: 10,
    completion_tokens: 5,
    total_tokens: 15,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: null },
  },
  service_tier: 'default',
  system_fingerprint: 'fp_kiln',
};
export const chatChunks: K.ChatCompletionChunk[] = [
  {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'kiln-test',
    system_fingerprint: 'fp_kiln',
    choices: [
      {
        index: 0,
        delta: { role: 'assistant', content: '', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'look' } }] },
        finish_reason: null,
        logprobs: null,
      },
    ],
  },
  {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'kiln-test',
    system_fingerprint: 'fp_kiln',
    choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{}' } }] }, finish_reason: 'tool_calls', logprobs: null }],
    usage: null,
  },
  {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'kiln-test',
    system_fingerprint: 'fp_kiln',
    service_tier: 'default',
    choices: [],
    usage: {
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 15,
      prompt_tokens_details: { cached_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 0 },
    },
  },
];
export const completion: K.Completion = {
  id: 'cmpl-1',
  object: 'text_completion',
  created: 1_700_000_000,
  model: 'kiln-test',
  choices: [
    {
      index: 0,
      // With `echo: true`: the prompt's first token has no log probability.
      text: 'Hello world',
      finish_reason: 'length',
      logprobs: {
        tokens: ['Hello', ' world'],
        token_logprobs: [null, -0.3],
        top_logprobs: [null, { ' world': -0.3 }],
        text_offset: [0, 5],
      },
    },
  ],
  usage: {
    prompt_tokens: 1,
    completion_tokens: 1,
    total_tokens: 2,
    prompt_tokens_details: { cached_tokens: null },
    completion_tokens_details: { reasoning_tokens: null },
  },
  service_tier: 'auto',
  system_fingerprint: 'fp_kiln',
};
export const completionChunk: K.CompletionChunk = {
  id: 'cmpl-1',
  object: 'text_completion',
  created: 1_700_000_000,
  model: 'kiln-test',
  system_fingerprint: 'fp_kiln',
  choices: [{ index: 0, text: ' wor', finish_reason: null, logprobs: null }],
};
// A reply appended to the conversation as it came (`refusal: null` included) is a message kiln accepts.
export const history: K.ChatCompletionMessageParam[] = [...chatRequest.messages, chatCompletion.choices[0]!.message];
export const error: { status: K.KilnErrorStatus; body: K.KilnErrorBody } = {
  status: 422,
  body: { error: { message: '`messages` is required', type: 'invalid_request_error', param: 'messages', code: 'missing_required_parameter' } },
};

// The same values fit openai's types where the overlap allows (a kiln-typed value sent with the openai SDK).
export const chatStreamRequestForOpenAI: O.ChatCompletionCreateParamsStreaming = {
  model: 'kiln-test',
  messages: [{ role: 'user', content: 'Hi' }],
  stream: true,
  stream_options: { include_usage: true },
  stop: ['a', 'b'],
} satisfies K.ChatCompletionCreateParamsStreaming;
const completionNoNulls = {
  id: 'cmpl-1',
  object: 'text_completion',
  created: 1_700_000_000,
  model: 'kiln-test',
  choices: [{ index: 0, text: '!', finish_reason: 'stop', logprobs: null }],
  usage: {
    prompt_tokens: 1,
    completion_tokens: 1,
    total_tokens: 2,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0 },
  },
  service_tier: 'auto',
  system_fingerprint: 'fp_kiln',
} satisfies K.Completion;
export const completionForOpenAI: OC.Completion = completionNoNulls;

// Negatives: each must be an error, so that these checks can fail.
export const negatives = [
  // @ts-expect-error: a chat request needs `messages`.
  { model: 'm' } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: not a reasoning effort.
  { model: 'm', messages: [], reasoning_effort: 'extreme' } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: not a tool choice.
  { model: 'm', messages: [], tool_choice: 'sometimes' } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: kiln refuses `developer` messages.
  { role: 'developer', content: 'x' } satisfies K.ChatCompletionMessageParam,
  // @ts-expect-error: a tool message needs `tool_call_id`.
  { role: 'tool', content: 'x' } satisfies K.ChatCompletionMessageParam,
  // @ts-expect-error: only user messages carry images.
  { role: 'system', content: [{ type: 'image_url', image_url: { url: 'u' } }] } satisfies K.ChatCompletionMessageParam,
  // @ts-expect-error: OpenAI's `priority` tier is not kiln's.
  { model: 'm', messages: [], service_tier: 'priority' } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: a json_schema format needs `schema`.
  { type: 'json_schema', json_schema: { name: 'n' } } satisfies K.ResponseFormat,
  // @ts-expect-error: misspelled field (`max_token`).
  { model: 'm', messages: [], max_token: 5 } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: a streaming request has `stream: true`.
  { model: 'm', messages: [], stream: false } satisfies K.ChatCompletionCreateParamsStreaming,
  // @ts-expect-error: a completion request needs `prompt`.
  { model: 'm' } satisfies K.CompletionCreateParams,
  // @ts-expect-error: chat `logprobs` is a boolean (completions' is an integer).
  { model: 'm', messages: [], logprobs: 5 } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: a chunk is not a `chat.completion`.
  { ...chatChunks[0]!, object: 'chat.completion' } satisfies K.ChatCompletionChunk,
  // @ts-expect-error: a reply's role is `assistant`.
  { role: 'user', content: 'x' } satisfies K.ChatCompletionMessage,
  // @ts-expect-error: only assistant messages carry `refusal` (else 422).
  { role: 'user', content: 'x', refusal: null } satisfies K.ChatCompletionMessageParam,
  // @ts-expect-error: kiln generates text only (`audio` is refused with 400).
  { model: 'm', messages: [], modalities: ['text', 'audio'] } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: `metadata` values are strings.
  { model: 'm', messages: [], metadata: { n: 1 } } satisfies K.ChatCompletionCreateParams,
  // @ts-expect-error: a reply always has `refusal` (`null`).
  { role: 'assistant', content: 'x' } satisfies K.ChatCompletionMessage,
  // @ts-expect-error: kiln leaves a delta's `content` out rather than sending `null`.
  { content: null } satisfies K.ChatCompletionChunkDelta,
  // @ts-expect-error: a completion always has `system_fingerprint`.
  { ...completion, system_fingerprint: undefined } satisfies K.Completion,
  // @ts-expect-error: a non-streaming response has `usage`.
  { id: 'x', object: 'chat.completion', created: 0, model: 'm', choices: [], service_tier: 'auto' } satisfies K.ChatCompletion,
  // @ts-expect-error: 500 is not a status kiln uses.
  500 satisfies K.KilnErrorStatus,
];
