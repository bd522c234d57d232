// The completions view: a raw prompt, echo, and each token's logprob as a heat view with the top
// alternatives on hover.
import { escapeHtml } from './markdown.js';
import { $, el, state, setBusy, readSettings, errorBox, describeError, Timer, showStats } from './ui.js';

// ---------------------------------------------------------------------------------------------------------
// Completions, with the logprob heat view
// ---------------------------------------------------------------------------------------------------------

/** How a token looks with its whitespace made visible. */
export const visible = (t) => t.replace(/ /g, '·').replace(/\n/g, '↵').replace(/\t/g, '⇥') || '∅';
export const percent = (lp) => `${(Math.exp(lp) * 100).toFixed(Math.exp(lp) < 0.001 ? 3 : 1)}%`;

export function heatColor(p) {
  // red (unlikely) → amber → green (likely)
  const hue = Math.round(120 * p);
  return `hsl(${hue} 75% 50% / ${0.18 + 0.32 * (1 - p * 0.4)})`;
}

/** One choice of a completion, as token spans (with logprobs) or plain text. */
export function renderCompletionChoice(container, { text, logprobs, promptLength, echo }) {
  container.replaceChildren();
  if (!logprobs || !logprobs.tokens?.length) {
    if (echo && promptLength) {
      container.append(el('span', { className: 'prompt-text', textContent: text.slice(0, promptLength) }), text.slice(promptLength));
    } else {
      container.append(text);
    }
    return;
  }
  const { tokens, token_logprobs: lps, top_logprobs: tops, text_offset: offsets } = logprobs;
  tokens.forEach((token, i) => {
    const span = el('span', { className: 'token', tabIndex: 0, textContent: token });
    span.dataset.testid = 'logprob-token';
    // A token of only line breaks (or nothing) would have no box to see or hover: CSS draws a ↵ / ∅ mark.
    if (token === '') span.classList.add('empty-token');
    else if (/^\n+$/.test(token)) span.classList.add('newline');
    const lp = lps?.[i];
    const top = tops?.[i];
    if (echo && offsets && offsets[i] < promptLength) span.classList.add('from-prompt');
    if (lp === null || lp === undefined) {
      span.classList.add('no-logprob');
    } else {
      span.dataset.logprob = String(lp);
      span.style.setProperty('--heat', heatColor(Math.exp(lp)));
    }
    const alternatives = top ? Object.entries(top).sort((a, b) => b[1] - a[1]) : [];
    span.dataset.alternatives = JSON.stringify(alternatives);
    const summary = `${JSON.stringify(token)}: ${lp === null || lp === undefined ? 'no logprob (first token)' : `p ${percent(lp)}, logprob ${lp.toFixed(3)}`}`;
    span.setAttribute('aria-label', alternatives.length
      ? `${summary}; alternatives: ${alternatives.map(([t, l]) => `${JSON.stringify(t)} ${percent(l)}`).join(', ')}`
      : summary);
    container.append(span);
  });
}

export function showTooltip(span) {
  const tip = $('token-tooltip');
  const lp = span.dataset.logprob === undefined ? null : Number(span.dataset.logprob);
  const alternatives = JSON.parse(span.dataset.alternatives || '[]');
  const token = span.textContent;
  let html = `<div class="tip-head"><code>${escapeHtml(visible(token))}</code> <span>${lp === null ? 'no logprob (nothing precedes it)' : `${percent(lp)} <span class="muted">logprob ${lp.toFixed(3)}</span>`}</span></div>`;
  if (alternatives.length) {
    html += '<table class="tip-alts"><tbody>';
    for (const [t, l] of alternatives) {
      const p = Math.exp(l);
      html += `<tr class="${t === token ? 'chosen' : ''}"><td><code>${escapeHtml(visible(t))}</code></td>`
        + `<td class="bar"><span style="width:${(p * 100).toFixed(1)}%"></span></td><td class="num">${percent(l)}</td></tr>`;
    }
    html += '</tbody></table>';
  } else if (lp !== null) {
    html += '<p class="muted">no alternatives requested</p>';
  }
  tip.innerHTML = html;
  tip.hidden = false;
  const r = span.getBoundingClientRect();
  const t = tip.getBoundingClientRect();
  let left = r.left + r.width / 2 - t.width / 2;
  left = Math.max(8, Math.min(left, window.innerWidth - t.width - 8));
  let top = r.bottom + 6;
  if (top + t.height > window.innerHeight - 8) top = r.top - t.height - 6;
  tip.style.left = `${left + window.scrollX}px`;
  tip.style.top = `${top + window.scrollY}px`;
}

export function hideTooltip() {
  $('token-tooltip').hidden = true;
}

export async function runCompletion() {
  if (!state.engine || state.busy) return;
  const out = $('completion-output');
  const prompt = $('prompt').value;
  let settings;
  try {
    settings = readSettings('completion');
  } catch (e) {
    out.replaceChildren(errorBox(e));
    return;
  }
  const echo = $('echo').checked;
  const logprobsText = $('logprobs').value.trim();
  const logprobs = logprobsText === '' ? undefined : (Number.isFinite(Number(logprobsText)) ? Number(logprobsText) : logprobsText);
  const request = { model: state.engine.model, prompt, echo, ...(logprobs !== undefined ? { logprobs } : {}), ...settings };
  const n = Number.isInteger(settings.n) && settings.n > 1 && settings.n <= 16 ? settings.n : 1;
  const choices = Array.from({ length: n }, () => ({ text: '', logprobs: null }));
  const boxes = choices.map((_, i) => {
    const body = el('div', { className: 'completion-text' });
    const box = el('div', { className: 'completion-choice' }, ...(n > 1 ? [el('div', { className: 'choice-label', textContent: `choice ${i + 1} of ${n}` })] : []), body, el('div', { className: 'finish muted' }));
    return { box, body };
  });
  const stats = el('div', { className: 'message-stats muted' });
  out.replaceChildren(...boxes.map((b) => b.box), stats);
  out.dataset.status = 'running';
  const controller = new AbortController();
  state.controller = controller;
  setBusy('completion');
  const timer = new Timer();
  let usage = null;
  const draw = (i) => renderCompletionChoice(boxes[i].body, { ...choices[i], promptLength: prompt.length, echo });
  const live = setInterval(() => showStats(timer.summary(usage, n, settings.stream), stats), 500);
  try {
    if (settings.stream) {
      const stream = await state.engine.completions.create(request, { signal: controller.signal });
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices ?? []) {
          const choice = choices[c.index];
          if (!choice) continue;
          if (c.text) {
            // With echo the prompt arrives first; it is not a generated token.
            if (!(echo && choice.text === '' && c.text === prompt)) timer.token();
            choice.text += c.text;
          }
          if (c.logprobs) {
            choice.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
            for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) choice.logprobs[k].push(...(c.logprobs[k] ?? []));
          }
          if (c.finish_reason) choice.finish = c.finish_reason;
          draw(c.index);
        }
      }
    } else {
      const reply = await state.engine.completions.create(request, { signal: controller.signal });
      usage = reply.usage;
      for (const c of reply.choices) {
        if (!choices[c.index]) continue;
        Object.assign(choices[c.index], { text: c.text, logprobs: c.logprobs, finish: c.finish_reason });
        draw(c.index);
      }
    }
    timer.end = performance.now();
    out.dataset.status = 'done';
  } catch (e) {
    timer.end = performance.now();
    if (e?.name === 'AbortError') {
      out.dataset.status = 'stopped';
      choices.forEach((c) => { c.finish = 'stopped'; });
    } else {
      console.warn('completion request failed:', describeError(e));
      out.dataset.status = 'error';
      out.insertBefore(errorBox(e), stats);
    }
  } finally {
    clearInterval(live);
    boxes.forEach((b, i) => {
      const f = choices[i].finish;
      b.box.querySelector('.finish').textContent = f && f !== 'stop' ? `[${f === 'length' ? 'reached max_tokens' : f}]` : '';
    });
    if (out.dataset.status !== 'error') showStats(timer.summary(usage, n, settings.stream), stats);
    if (state.controller === controller) state.controller = null;
    setBusy(null);
  }
}
