// The demo's "Use with openai-node" panel: the real `openai` client (bundled for the browser at
// /vendor/openai.js by `xtask/vendor.mjs`) talking to the loaded model through `engine.fetch`, the WHATWG
// `fetch` kiln answers OpenAI's endpoints with. The code the panel shows is `withOpenAI` itself, and Run runs it.

/** What the panel shows and runs: an app written against openai-node, on the demo's engine. */
export async function withOpenAI(engine, onText) {
  const { default: OpenAI } = await import('/vendor/openai.js');
  const openai = new OpenAI({
    baseURL: `${location.origin}/v1`,
    apiKey: 'unused',
    dangerouslyAllowBrowser: true,
    fetch: engine.fetch,
  });
  const stream = await openai.chat.completions.create({
    model: engine.model,
    messages: [{ role: 'user', content: 'Say hello in French.' }],
    max_tokens: 32,
    stream: true,
  });
  let text = '';
  for await (const chunk of stream) onText((text += chunk.choices[0]?.delta?.content ?? ''));
  return text;
}

/** Wires the panel: `engine()` gives the loaded engine (or null). */
export function openaiPanel(engine) {
  const code = document.getElementById('openai-code');
  const run = document.getElementById('openai-run');
  const out = document.getElementById('openai-output');
  code.textContent = withOpenAI.toString();
  run.addEventListener('click', async () => {
    const e = engine();
    if (!e) {
      out.textContent = 'Load a model first.';
      return;
    }
    run.disabled = true;
    out.dataset.state = 'running';
    out.textContent = '…';
    try {
      await withOpenAI(e, (text) => { out.textContent = text; });
      out.dataset.state = 'done';
    } catch (err) {
      out.textContent = `Failed: ${err?.message ?? err}`;
      out.dataset.state = 'failed';
    } finally {
      run.disabled = false;
    }
  });
}
