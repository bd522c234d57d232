// The demo's images: attached (the button), pasted or dropped, shown as removable thumbnails under the
// composer until sent, and read as data: URLs for the message's `image_url` parts. A file that is no image,
// or any image while the loaded model takes none, is refused with a note under the composer.
import { $, el, mib, visionReady, visionTitle } from './ui.js';

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
export function addAttachments(files, { restore = false } = {}) {
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

export function clearAttachments() {
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

/** The image files waiting to go with the next message (a copy). */
export const pendingImages = () => attachments.map((a) => a.file);

/** `files` read for a message: `[{ url, name }]` (`url`: a data: URL); rejects when one cannot be read. */
export const readImages = (files) => Promise.all(files.map(async (file) => ({ url: await dataUrl(file), name: file.name })));

/** The attach button, its file input, pasting into the message field and dropping on the chat view. */
export function wireAttachments() {
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
