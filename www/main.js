// The device page: what WebGPU adapter the browser offers, then kiln's wasm running burn's self-check on it
// (a batched matmul, softmax and RMSNorm compared with a host reference). Later this becomes the chat demo.
import init, { deviceReport } from '/pkg/kiln.js';

const $ = (id) => document.getElementById(id);

function fillTable(table, rows) {
  table.replaceChildren(...rows.map(([key, value, cls]) => {
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    const td = document.createElement('td');
    th.textContent = key;
    td.textContent = value;
    if (cls) td.className = cls;
    tr.append(th, td);
    return tr;
  }));
}

const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

async function describeAdapter() {
  if (!navigator.gpu) {
    $('webgpu-status').textContent = 'This browser has no WebGPU (navigator.gpu is missing). kiln will use its CPU backend.';
    return false;
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) {
    $('webgpu-status').textContent = 'WebGPU is present but offered no adapter. kiln will use its CPU backend.';
    return false;
  }
  const info = adapter.info ?? {};
  const l = adapter.limits;
  $('webgpu-status').textContent = 'The browser offers this adapter:';
  fillTable($('adapter'), [
    ['vendor', info.vendor || '—'],
    ['architecture', info.architecture || '—'],
    ['device', info.device || '—'],
    ['description', info.description || '—'],
    ['fallback (software) adapter', String(info.isFallbackAdapter ?? false)],
    ['shader-f16', adapter.features.has('shader-f16') ? 'yes' : 'no'],
    ['maxBufferSize', mib(l.maxBufferSize)],
    ['maxStorageBufferBindingSize', mib(l.maxStorageBufferBindingSize)],
    ['maxComputeWorkgroupStorageSize', `${l.maxComputeWorkgroupStorageSize} B`],
    ['maxComputeInvocationsPerWorkgroup', String(l.maxComputeInvocationsPerWorkgroup)],
  ]);
  return true;
}

async function main() {
  const hasWebGpu = await describeAdapter();
  await init();
  const kind = hasWebGpu ? 'webgpu' : 'cpu';
  $('check-status').textContent = `Running the self-check on ${kind === 'webgpu' ? 'WebGPU' : 'the CPU backend'}…`;
  const started = performance.now();
  const report = await deviceReport(kind);
  const ms = performance.now() - started;
  const { device, check } = report;
  const [batch, rows, inner, cols] = check.shape;
  $('check-status').textContent = `burn ran on ${device.backend} (${device.deviceType}).`;
  fillTable($('check'), [
    ['result', check.passed ? 'passed' : 'FAILED', check.passed ? 'ok' : 'bad'],
    ['computation', `rms_norm(softmax([${batch}×${rows}×${inner}] · [${batch}×${inner}×${cols}] / √${inner}))`],
    ['max |device − host|', check.maxAbsDiff.toExponential(2)],
    ['tolerance', `${check.tolerance[0]} + ${check.tolerance[1]}·|host|`],
    ['mismatches', String(check.mismatches)],
    ['checksum', check.checksum.toFixed(6)],
    ['time (incl. shader compile)', `${ms.toFixed(0)} ms`],
    ['backend', device.backend],
    ['adapter', device.adapter || '—'],
    ['shader-f16', device.shaderF16 ? 'yes' : 'no'],
  ]);
  $('report').textContent = JSON.stringify(report, null, 2);
  document.body.dataset.state = 'done';
}

main().catch((error) => {
  console.error(error);
  $('check-status').textContent = `Error: ${error?.message ?? error}`;
  $('check-status').className = 'bad';
  document.body.dataset.state = 'error';
});
