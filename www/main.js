// kiln's demo: a chat and a raw-completions view over a model running in a Web Worker (WorkerEngine), with
// the OpenAI request settings, load progress, per-reply speed and the device in use.
//
// Hooks for tests: body[data-state] = loading | ready | error, body[data-busy] = true while a request runs;
// ids (and data-testid) on the controls; each assistant message is `.message.assistant` with
// data-status = streaming | done | stopped | error; each token of the completions view is a
// `[data-testid=logprob-token]` element with data-logprob and data-alternatives. Images (a vision-language
// model): `attach-button` / `attach-input` (on only when `engine.vision` is set), `attachment-thumb` (each
// image waiting to be sent, with its `attachment-remove`), `message-image` (the images of a sent message),
// `composer-note` (why a file was refused). The load progress (`#load`): data-phase = download | parse |
// upload, then done; its `.phases span` badges are `current` or `done` (ticked), all done once the model is ready.
//
// The model field is read in source.js, the images waiting to be sent are kept in attach.js.
import { WorkerEngine } from '/pkg/index.js';
import { renderMarkdown } from './markdown.js';
import {
  $, el, mib, state, setState, setBusy, updateControls, readSettings, syncSettingsUi, describeError, errorBox, Timer, showStats, DEFAULTS,
} from './ui.js';
import { runCompletion, showTooltip, hideTooltip } from './completions.js';
import { openaiPanel } from './openai.js';
import { DEFAULT_MODEL, resolveSource } from './source.js';
import { wireAttachments, addAttachments, clearAttachments, pendingImages, readImages } from './attach.js';

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

const PHASES = { download: 'Downloading', parse: 'Reading the weights', upload: 'Uploading to the device' };
const ORDER = Object.keys(PHASES);

/** The phase badges: those before `current` (an index in ORDER) ticked, `current` itself ticked once `finished`. */
function markPhases(current, finished = false) {
  for (const span of $('load').querySelectorAll('.phases span')) {
    const i = ORDER.indexOf(span.dataset.phase);
    span.className = i < current || (i === current && finished) ? 'done' : i === current ? 'current' : '';
  }
}

let downloading = false;
/** The furthest phase shown in this load (an index in ORDER): the bar never steps back to an earlier one. */
let furthest = 0;
function showProgress({ phase, loaded, total }) {
  // A GGUF file streams: uploads trail the download. The bar follows the download until it is done; the
  // download's closing report, which comes after the uploads it let through, does not take it back.
  if (phase === 'download') downloading = total === 0 || loaded < total;
  else if (downloading) return;
  const at = ORDER.indexOf(phase);
  if (at >= 0 && at < furthest) return;
  if (at >= 0) furthest = at;
  const box = $('load');
  box.dataset.phase = phase;
  const fraction = total > 0 ? Math.min(loaded / total, 1) : 0;
  $('load-progress').value = fraction;
  markPhases(at, total > 0 && loaded >= total);
  $('load-text').textContent = `${PHASES[phase] ?? phase}… ${mib(loaded)} of ${mib(total)} (${(fraction * 100).toFixed(0)}%)`;
}

async function loadModel() {
  const seq = ++state.loadSeq;
  state.controller?.abort();
  setState('loading');
  $('load').hidden = false;
  $('load').classList.remove('failed');
  $('load-progress').value = 0;
  $('load').dataset.phase = '';
  furthest = 0;
  downloading = false;
  markPhases(-1);
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
    markPhases(ORDER.length);
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
  const attached = pendingImages();
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
    images = await readImages(attached);
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
      if (history === state.messages && !pendingImages().length) addAttachments(attached, { restore: true });
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
