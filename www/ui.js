// Shared pieces of the demo page: DOM helpers, the page state, the request settings, errors and the speed stats.
import { KilnError } from '/pkg/index.js';

export const $ = (id) => document.getElementById(id);
export const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};
/** A byte count as "12.3 MiB". */
export const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

export const state = {
  engine: null,
  worker: null,
  loadSeq: 0,
  /** The conversation sent with each request (the system prompt is added at send time). */
  messages: [],
  busy: null, // 'chat' | 'completion' | null
  controller: null,
};

// ---------------------------------------------------------------------------------------------------------
// Page state
// ---------------------------------------------------------------------------------------------------------

export function setState(s) {
  document.body.dataset.state = s;
  updateControls();
}

export function setBusy(kind) {
  state.busy = kind;
  document.body.dataset.busy = String(Boolean(kind));
  updateControls();
}

export function updateControls() {
  const ready = document.body.dataset.state === 'ready';
  const loading = document.body.dataset.state === 'loading';
  $('chat-input').disabled = !ready;
  $('send').disabled = !ready || Boolean(state.busy);
  $('run').disabled = !ready || Boolean(state.busy);
  $('stop').hidden = state.busy !== 'chat';
  $('completion-stop').hidden = state.busy !== 'completion';
  $('model-load').disabled = loading;
  $('model-url').disabled = loading;
  $('model-device').disabled = loading;
  for (const b of document.querySelectorAll('.suggestion')) b.disabled = !ready || Boolean(state.busy);
  updateAttach();
}

/** Whether the loaded model takes images (`engine.vision`: null for a text model). */
export const visionReady = () => document.body.dataset.state === 'ready' && Boolean(state.engine?.vision);

/** The attach button's title: what it does, or why it is off. */
export function visionTitle() {
  const engine = state.engine;
  if (!engine || document.body.dataset.state !== 'ready') return 'Images can be attached once a vision-language model is loaded';
  const v = engine.vision;
  if (v) return `Attach images (or paste or drop them): ${engine.model} takes each at ${v.imageSize}×${v.imageSize} pixels, ${v.tokensPerImage} tokens a tile`;
  return `${engine.model} is a text model and takes no images: load a vision-language model (a language model's .gguf with its mmproj .gguf, or a Hugging Face folder with preprocessor_config.json)`;
}

/** The attach button follows the loaded model: on for a vision-language model, off (its title says why) otherwise. */
function updateAttach() {
  const on = visionReady();
  $('attach').disabled = !on;
  $('attach-input').disabled = !on;
  $('attach').title = visionTitle();
  $('attach').setAttribute('aria-label', on ? 'Attach images' : visionTitle());
  $('chat-input').placeholder = on
    ? 'Message the model, or attach, paste or drop images (Enter sends)'
    : 'Message the model (Enter sends, Shift+Enter for a new line)';
}


// ---------------------------------------------------------------------------------------------------------
// Settings → request fields
// ---------------------------------------------------------------------------------------------------------

export const DEFAULTS = {};

export class SettingsError extends Error {
  constructor(param, message) {
    super(message);
    this.param = param;
  }
}

/** A text field: absent when empty; a number when it reads as one; else the raw text, for kiln to judge. */
export function numberField(name) {
  const v = $(`set-${name}`).value.trim();
  if (v === '') return undefined;
  const x = Number(v);
  return Number.isFinite(x) ? x : v;
}

export function jsonField(name, text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SettingsError(name, `\`${name}\` is not valid JSON: ${e.message}`);
  }
}

/** The sampling settings as request fields; `kind` 'chat' adds response_format. */
export function readSettings(kind) {
  const out = {};
  for (const name of ['temperature', 'top_p', 'max_tokens', 'seed', 'n', 'presence_penalty', 'frequency_penalty']) {
    const v = numberField(name);
    if (v !== undefined) out[name] = v;
  }
  const stop = $('set-stop').value.split('\n').filter((s) => s !== '').map((s) => s.replace(/\\n/g, '\n').replace(/\\t/g, '\t'));
  if (stop.length) out.stop = stop;
  const bias = $('set-logit_bias').value.trim();
  if (bias) out.logit_bias = jsonField('logit_bias', bias);
  const format = $('set-response_format').value;
  if (kind === 'chat' && format) {
    out.response_format = format === 'json_schema'
      ? { type: 'json_schema', json_schema: { name: 'reply', schema: jsonField('response_format', $('set-json_schema').value), strict: true } }
      : { type: format };
  }
  out.stream = $('set-stream').checked;
  if (out.stream && $('set-include_usage').checked) out.stream_options = { include_usage: true };
  return out;
}

export function syncSettingsUi() {
  $('set-include_usage').disabled = !$('set-stream').checked;
  const schema = $('set-response_format').value === 'json_schema';
  for (const n of document.querySelectorAll('.schema-only')) n.hidden = !schema;
}

// ---------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------

export function describeError(e) {
  if (e instanceof KilnError) {
    const where = e.param ? ` (param: ${e.param})` : '';
    return `${e.message}${where}`;
  }
  return e?.message ?? String(e);
}

export function errorBox(e) {
  const box = el('div', { className: 'error-box', role: 'alert' });
  box.dataset.testid = 'error';
  if (e instanceof KilnError) {
    box.append(
      el('strong', { textContent: `${e.status} ${e.error?.type ?? 'error'}` }),
      e.param ? el('code', { className: 'param', textContent: e.param }) : '',
      e.code ? el('span', { className: 'muted', textContent: ` ${e.code}` }) : '',
      el('p', { textContent: e.message }),
    );
  } else if (e instanceof SettingsError) {
    box.append(el('strong', { textContent: 'setting' }), el('code', { className: 'param', textContent: e.param }), el('p', { textContent: e.message }));
  } else {
    box.append(el('strong', { textContent: e?.name ?? 'Error' }), el('p', { textContent: e?.message ?? String(e) }));
  }
  return box;
}

// ---------------------------------------------------------------------------------------------------------
// Stats
// ---------------------------------------------------------------------------------------------------------

/** Timing of one request: `start`, `first` (first token), `end`; counts from `usage` or counted chunks. */
export class Timer {
  constructor() {
    this.start = performance.now();
    this.first = null;
    this.end = null;
    this.counted = 0;
    /** `{ images, tokens, encodeMs }` from the request's `onImages`, for a request with images. */
    this.images = null;
  }
  token(count = 1) {
    this.first ??= performance.now();
    this.counted += count;
  }
  /** `{ ttft, prefill, decode, tokens, cached, image, total }` as display strings. */
  summary(usage, n = 1, streamed = true) {
    const now = this.end ?? performance.now();
    const s = (ms) => `${(ms / 1000).toFixed(2)} s`;
    const rate = (x) => (Number.isFinite(x) && x > 0 ? `${x.toFixed(x < 1 ? 2 : 1)} tok/s` : '—');
    const completion = usage?.completion_tokens ?? this.counted;
    const approx = usage ? '' : '≈';
    const ttftMs = streamed && this.first !== null ? this.first - this.start : null;
    const out = {
      ttft: ttftMs === null ? '—' : s(ttftMs),
      prefill: ttftMs && usage ? rate(usage.prompt_tokens / (ttftMs / 1000)) : '—',
      decode: '—',
      tokens: usage ? `${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion` : `${approx}${completion} completion`,
      cached: usage?.prompt_tokens_details?.cached_tokens ? `${usage.prompt_tokens_details.cached_tokens} cached` : '—',
      image: this.images ? imageStats(this.images) : '—',
      total: s(now - this.start),
    };
    if (streamed && this.first !== null && now > this.first && completion > n) {
      out.decode = `${approx}${rate((completion - n) / ((now - this.first) / 1000))}`;
    } else if (!streamed && completion > 0) {
      out.decode = `${rate(completion / ((now - this.start) / 1000))} (overall)`;
    }
    return out;
  }
}

/** "image: 42 tokens · encode 120 ms" (or "2 images: …"), from `onImages({ images, tokens, encodeMs })`. */
export function imageStats({ images, tokens, encodeMs }) {
  const ms = Number.isFinite(encodeMs) ? `${encodeMs < 10 ? encodeMs.toFixed(1) : Math.round(encodeMs)} ms` : '—';
  return `${images === 1 ? 'image' : `${images} images`}: ${tokens} tokens · encode ${ms}`;
}

export function showStats(summary, target) {
  for (const dd of $('stats').querySelectorAll('dd')) dd.textContent = summary[dd.dataset.stat] ?? '—';
  if (target) {
    target.textContent = [
      summary.ttft !== '—' ? `first token ${summary.ttft}` : null,
      summary.prefill !== '—' ? `prefill ${summary.prefill}` : null,
      summary.decode !== '—' ? `decode ${summary.decode}` : null,
      summary.tokens,
      summary.cached !== '—' ? summary.cached : null,
      summary.image !== '—' ? summary.image : null,
    ].filter(Boolean).join(' · ');
  }
}
