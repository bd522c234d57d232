// Headless Debian Chromium for the e2e tests: WebGPU on SwiftShader, never a downloaded browser.
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
