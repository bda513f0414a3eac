// Image folders as thumbnails; upload by drag and drop or the file chooser; delete.

import { html, useState } from "../lib.js";
import { api, encodePath } from "../api.js";
import { useEvents } from "../feed.js";
import { bytes } from "../format.js";
import { Confirm, ErrorNote, TimeAgo, useLoad, useThrottled } from "../ui.js";
import { may } from "../identity.js";
import { FileIcon, FolderIcon } from "../icons.js";

const THUMB = 160;
const join = (folder, name) => (folder ? `${folder}/${name}` : name);

function Crumbs({ folder }) {
  const parts = folder ? folder.split("/") : [];
  return html`
    <nav aria-label="Folder" class="crumbs">
      <ol>
        <li><a href="#/images">images</a></li>
        ${parts.map((part, i) => {
          const path = parts.slice(0, i + 1).join("/");
          return html`<li><a href=${`#/images/${encodePath(path)}`}
            aria-current=${i === parts.length - 1 ? "page" : null}>${part}</a></li>`;
        })}
      </ol>
    </nav>`;
}

function Tile({ folder, entry, onDelete }) {
  const path = join(folder, entry.name);
  if (entry.is_dir) {
    return html`
      <li class="tile folder">
        <a href=${`#/images/${encodePath(path)}`}>
          <span class="thumb" aria-hidden="true"><${FolderIcon} /></span>
          <span class="name">${entry.name}</span>
        </a>
      </li>`;
  }
  const picture = entry.type && entry.type.startsWith("image/");
  return html`
    <li class="tile" data-name=${entry.name}>
      <a href=${api.imageUrl(path, "o")} target="_blank" rel="noopener">
        ${picture
          ? html`<img class="thumb" src=${api.imageUrl(path, `s=${THUMB * 2}`)} alt=${entry.name}
                     width=${THUMB} height=${THUMB} loading="lazy" decoding="async" />`
          : html`<span class="thumb" aria-hidden="true"><${FileIcon} label=${entry.type === "application/pdf" ? "PDF" : ""} /></span>`}
        <span class="name">${entry.name}</span>
      </a>
      <small class="muted">${bytes(entry.size)} · <${TimeAgo} when=${entry.modified} /></small>
      ${may("admin") ? html`<button type="button" class="secondary small" aria-label=${`Delete ${entry.name}`}
              onClick=${() => onDelete(path)}>Delete</button>` : null}
    </li>`;
}

function Upload({ folder, onUploaded }) {
  const [target, setTarget] = useState(folder || "uploads");
  const [items, setItems] = useState([]);
  const [over, setOver] = useState(false);
  const send = async (files) => {
    const list = [...files];
    if (list.length === 0) return;
    const into = target.trim().replace(/^\/+|\/+$/g, "");
    setItems(list.map((f) => ({ name: f.name, state: "uploading…" })));
    let stored = 0;
    for (const [i, file] of list.entries()) {
      let state;
      try {
        const reply = await api.uploadImage(into, file);
        state = `stored (${bytes(reply.size)})`;
        stored += 1;
      } catch (err) {
        state = { error: err };
      }
      setItems((current) => current.map((item, j) => (j === i ? { ...item, state } : item)));
    }
    // To the folder that got them; a failure stays in view, beside its file's name.
    if (stored === list.length) onUploaded(into);
  };
  return html`
    <section aria-labelledby="upload-h" class="upload">
      <h2 id="upload-h">Upload</h2>
      <label>Into folder
        <input value=${target} onInput=${(e) => setTarget(e.target.value)} required
               aria-describedby="folder-help" autocomplete="off" />
        <small id="folder-help">Images and PDFs; the type is read from the bytes.</small></label>
      <label class=${`drop ${over ? "over" : ""}`}
             onDragOver=${(e) => { e.preventDefault(); setOver(true); }}
             onDragLeave=${() => setOver(false)}
             onDrop=${(e) => { e.preventDefault(); setOver(false); send(e.dataTransfer.files); }}>
        <span>Drop files here, or choose them</span>
        <input type="file" name="files" multiple accept="image/*,application/pdf"
               onChange=${(e) => { send(e.target.files); e.target.value = ""; }} />
      </label>
      <ul class="uploads">
        ${items.map((item) => html`<li>${item.name}: ${item.state.error
          ? html`<${ErrorNote} error=${item.state.error} />` : item.state}</li>`)}
      </ul>
    </section>`;
}

export function ImagesPage({ folder }) {
  const listing = useLoad(() => api.folder(folder), [folder]);
  const refresh = useThrottled(listing.reload, 1000);
  useEvents(refresh, ["images."]);
  const [doomed, setDoomed] = useState(null);
  const [error, setError] = useState(null);
  const remove = async () => {
    const path = doomed;
    setDoomed(null);
    setError(null);
    try {
      await api.deleteImage(path);
      listing.reload();
    } catch (err) {
      setError(err);
    }
  };
  const entries = listing.data?.entries || [];
  return html`
    <h1 tabindex="-1">Images</h1>
    <${Crumbs} folder=${folder} />
    <${ErrorNote} error=${listing.error || error} />
    ${listing.data ? entries.length === 0 ? html`<p class="muted">This folder is empty.</p>` : html`
      <ul class="tiles">
        ${entries.map((entry) => html`<${Tile} key=${entry.name} folder=${folder} entry=${entry} onDelete=${setDoomed} />`)}
      </ul>` : null}
    ${listing.data?.truncated ? html`<p class="muted">Only the first ${entries.length} entries are shown.</p>` : null}
    ${may("admin") ? html`<${Upload} folder=${folder} onUploaded=${(into) => {
      if (into !== folder) location.hash = `#/images/${encodePath(into)}`;
      else listing.reload();
    }} />` : null}
    <${Confirm} open=${!!doomed} title=${`Delete ${doomed}?`} action="Delete" danger
                onCancel=${() => setDoomed(null)} onConfirm=${remove}>
      <p>The file moves to the trash and is no longer served; its resized copies are purged.</p>
    </${Confirm}>`;
}
