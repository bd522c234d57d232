// A small, safe Markdown renderer for model output. Every piece of the source text is HTML-escaped before it
// is wrapped in markup, so nothing the model writes can become a tag or an attribute; links keep only http(s),
// mailto and same-site URLs. Covers what chat models write: fenced code (also unclosed, while it streams),
// inline code, headings, bold/italic/strikethrough, ordered and bulleted lists (nested by indentation),
// block quotes, horizontal rules, links, bare URLs and paragraphs with line breaks.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESCAPES[c]);

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const BLANK = /^\s*$/;

/** Markdown `source` → an HTML string that is safe to assign to `innerHTML`. */
export function renderMarkdown(source) {
  return blocks(String(source).replace(/\r\n?/g, '\n').split('\n'));
}

function blocks(lines) {
  let html = '';
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    const fence = line.match(FENCE);
    if (fence) {
      const [, marks, lang] = fence;
      const body = [];
      i += 1;
      let closed = false;
      while (i < lines.length) {
        const close = lines[i].match(/^ {0,3}(`{3,}|~{3,})\s*$/);
        if (close && close[1][0] === marks[0] && close[1].length >= marks.length) {
          closed = true;
          i += 1;
          break;
        }
        body.push(lines[i]);
        i += 1;
      }
      html += codeBlock(body.join('\n'), lang, closed);
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      const level = Math.min(heading[1].length + 2, 6); // h3..h6 inside a message
      html += `<h${level}>${inline(heading[2])}</h${level}>`;
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      html += '<hr>';
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        inner.push(lines[i].match(QUOTE)[1]);
        i += 1;
      }
      html += `<blockquote>${blocks(inner)}</blockquote>`;
      continue;
    }
    if (ITEM.test(line)) {
      const start = i;
      while (i < lines.length) {
        const l = lines[i];
        if (ITEM.test(l)) {
          i += 1;
        } else if (!BLANK.test(l) && /^\s+/.test(l) && !FENCE.test(l)) {
          i += 1; // a continuation line of the item above
        } else if (BLANK.test(l) && i + 1 < lines.length && ITEM.test(lines[i + 1])) {
          i += 1; // a loose list: blank line between items
        } else {
          break;
        }
      }
      html += list(lines.slice(start, i).filter((l) => !BLANK.test(l)));
      continue;
    }
    const para = [];
    while (i < lines.length && !BLANK.test(lines[i]) && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
      && !RULE.test(lines[i]) && !QUOTE.test(lines[i]) && !(para.length && ITEM.test(lines[i]) && !/^\s*\d/.test(lines[i]))) {
      para.push(lines[i].trim());
      i += 1;
    }
    if (para.length === 0) { // a line none of the above took (cannot happen, but never loop forever)
      para.push(lines[i].trim());
      i += 1;
    }
    html += `<p>${para.map(inline).join('<br>')}</p>`;
  }
  return html;
}

function codeBlock(code, lang, closed) {
  const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
  const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : '<span class="code-lang">code</span>';
  return `<div class="code${closed ? '' : ' open'}"><div class="code-bar">${label}`
    + '<button type="button" class="copy" data-copy>Copy</button></div>'
    + `<pre><code${cls}>${escapeHtml(code)}</code></pre></div>`;
}

/** Items → nested <ul>/<ol> by indentation. */
function list(lines) {
  // Each item: { indent, ordered, start, text }; continuation lines join the item above.
  const items = [];
  for (const l of lines) {
    const m = l.match(ITEM);
    if (m) {
      const ordered = /\d/.test(m[2]);
      items.push({ indent: m[1].replace(/\t/g, '    ').length, ordered, start: ordered ? parseInt(m[2], 10) : 1, text: m[3] });
    } else if (items.length) {
      items[items.length - 1].text += `\n${l.trim()}`;
    }
  }
  let html = '';
  const stack = []; // open lists: { indent, tag }
  for (const item of items) {
    while (stack.length && item.indent < stack[stack.length - 1].indent) {
      html += `</li></${stack.pop().tag}>`;
    }
    const top = stack[stack.length - 1];
    const tag = item.ordered ? 'ol' : 'ul';
    if (!top || item.indent > top.indent) {
      const start = item.ordered && item.start !== 1 ? ` start="${item.start}"` : '';
      html += `<${tag}${start}>`;
      stack.push({ indent: item.indent, tag });
    } else if (top.tag !== tag) {
      html += `</li></${stack.pop().tag}><${tag}>`;
      stack.push({ indent: item.indent, tag });
    } else {
      html += '</li>';
    }
    html += `<li>${item.text.split('\n').map(inline).join('<br>')}`;
  }
  while (stack.length) html += `</li></${stack.pop().tag}>`;
  return html;
}

const SAFE_URL = /^(https?:\/\/|mailto:|\/(?!\/)|#|\.\.?\/)/i;

/** Inline markup of one line. Finished pieces of HTML are parked as \u0000n\u0000 so later rules skip them. */
function inline(text) {
  const parked = [];
  const park = (html) => `\u0000${parked.push(html) - 1}\u0000`;
  let s = String(text).replace(/\u0000/g, '');
  // Code spans first: their content is literal.
  s = s.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => park(`<code>${escapeHtml(code.trim() || code)}</code>`));
  // Links [text](url "title").
  s = s.replace(/\[([^\]\n]+)\]\(\s*<?([^\s)>]+)>?(?:\s+"[^"]*")?\s*\)/g, (whole, label, url) => {
    if (!SAFE_URL.test(url)) return park(escapeHtml(label));
    return park(`<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer">${emphasis(escapeHtml(label))}</a>`);
  });
  // Bare URLs.
  s = s.replace(/\bhttps?:\/\/[^\s<>"'\u0000]+[^\s<>"'.,;:!?)\]\u0000]/g, (url) => park(`<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer">${escapeHtml(url)}</a>`));
  s = emphasis(escapeHtml(s));
  return s.replace(/\u0000(\d+)\u0000/g, (_, n) => parked[Number(n)]);
}

/** Bold, italic and strikethrough over already escaped text. */
function emphasis(s) {
  return s
    .replace(/\*\*\*(?=\S)([\s\S]*?\S)\*\*\*/g, '<strong><em>$1</em></strong>')
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>')
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
}
