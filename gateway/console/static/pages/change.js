// A safe change of a running VM (docs/vm.md, "Changing a VM safely"): its body as JSON, asked
// for after a confirmation; the VM page follows its stream like any task's.

import { html, useState } from "../lib.js";

export const EXAMPLE = JSON.stringify(
  {
    steps: [{ run: "apt-get -y upgrade" }, { reboot: true }],
    verify: [{ ssh: true }, { run: "systemctl is-system-running --wait", timeout: 120 }],
    keep_snapshot: false,
  },
  null,
  2,
);

// `onRun(body)`: start the change; `confirm(title, text, onYes)`: the page's dialog.
export function ChangeForm({ id, disabled, confirm, onRun }) {
  const [text, setText] = useState(EXAMPLE);
  const [error, setError] = useState(null);
  const submit = (e) => {
    e.preventDefault();
    let body;
    try {
      body = JSON.parse(text);
    } catch (err) {
      setError(`The change is not JSON: ${err.message}`);
      return;
    }
    setError(null);
    confirm(
      `Change VM ${id}?`,
      "A snapshot is taken first. If a step or a check fails, the VM is rolled back to it.",
      () => onRun(body),
    );
  };
  return html`
    <h3>Safe change</h3>
    <p class="muted">Steps run as root on the guest; the VM must be running.</p>
    <form onSubmit=${submit}>
      <label>Change (JSON)
        <textarea name="change" class="code" rows="8" spellcheck="false" value=${text}
                  disabled=${disabled} onInput=${(e) => setText(e.target.value)}></textarea></label>
      <button type="submit" class="secondary" disabled=${disabled}>Run change</button>
      ${error ? html`<p class="error" role="alert">${error}</p>` : null}
    </form>`;
}
