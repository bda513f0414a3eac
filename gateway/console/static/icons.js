// Icons drawn inline as SVG (Debian's Chromium has no colour emoji font: an emoji renders as an
// empty box). Decorative: hidden from screen readers, the text beside them says what they are.

import { html } from "./lib.js";

const svg = (body, label) => html`
  <svg class="icon" viewBox="0 0 24 24" width="48" height="48" aria-hidden="true" focusable="false"
       fill="none" stroke="currentColor" stroke-width="1.5" stroke-linecap="round" stroke-linejoin="round"
       data-icon=${label}>${body}</svg>`;

export const FolderIcon = () =>
  svg(html`<path d="M3 6.5A1.5 1.5 0 0 1 4.5 5h4.2l2 2.2h8.8A1.5 1.5 0 0 1 21 8.7v9.8a1.5 1.5 0 0 1-1.5 1.5h-15A1.5 1.5 0 0 1 3 18.5z" />`, "folder");

export const FileIcon = ({ label = "" }) =>
  svg(html`
    <path d="M6 3h8l4 4v13a1 1 0 0 1-1 1H6a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1z" />
    <path d="M14 3v4h4" />
    ${label ? html`<text x="11.5" y="17" text-anchor="middle" font-size="5" font-family="sans-serif"
                         fill="currentColor" stroke="none">${label}</text>` : null}`, "file");
