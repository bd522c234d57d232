// Headless Debian Chromium for the e2e tests: WebGPU on SwiftShader, never a downloaded browser; and the
// OpenAI client packages bundled for the page.
import { build } from 'esbuild';
import { chromium } from 'playwright-core';

export function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: [
      '--enable-unsafe-webgpu', '--no-sandbox', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run',
    ],
  });
}

/** The three clients as one script that sets `globalThis.kilnClients`. */
export async function clientsBundle() {
  const entry = `
    export { default as OpenAI } from 'openai';
    export { generateText, streamText } from 'ai';
    export { createOpenAICompatible } from '@ai-sdk/openai-compatible';
    export { ChatOpenAI } from '@langchain/openai';`;
  const out = await build({
    stdin: { contents: entry, resolveDir: process.cwd(), loader: 'js' },
    bundle: true, format: 'iife', globalName: 'kilnClients', platform: 'browser', target: 'chrome120',
    write: false, logLevel: 'warning',
  });
  return out.outputFiles[0].text;
}
