// The search databases with their indexing progress, and searching one: by default the best
// match (words and meaning fused into one list, the query's words highlighted), or by keyword, by
// meaning, or both side by side (docs/search.md). A result's source links to that file's row in
// the database's documents below: what was indexed from it, and when.

import { html, useState } from "../lib.js";
import { api, ApiError } from "../api.js";
import { useEvents } from "../feed.js";
import { count } from "../format.js";
import { ErrorNote, TimeAgo, useLoad, useThrottled } from "../ui.js";

function Progress({ status }) {
  if (!status) return html`<span class="muted">—</span>`;
  const { chunks, embedded, pending, failed } = status;
  return html`
    <label class="progress">
      <span>${embedded} of ${chunks} chunks embedded${pending ? `, ${pending} pending` : ""}${failed ? `, ${failed} failed` : ""}</span>
      <progress value=${embedded} max=${chunks || 1}></progress>
    </label>`;
}

function Documents({ db, documents }) {
  if (!documents) return null;
  const indexed = documents.filter((d) => d.status === "indexed");
  return html`
    <details data-documents=${db}>
      <summary>${db}: ${count(indexed.length, "document")}${indexed.length < documents.length
        ? `, ${documents.length - indexed.length} dismissed` : ""}</summary>
      <div class="table" tabindex="0" role="region" aria-label=${`Documents of ${db}`}><table>
        <thead><tr><th scope="col">File</th><th scope="col" class="num">Chunks</th>
          <th scope="col">Indexed</th></tr></thead>
        <tbody>${documents.map((d) => html`
          <tr key=${d.source} data-source=${d.source} tabindex="-1">
            <td><code>${d.source}</code></td>
            <td class="num">${d.status === "indexed" ? d.chunks : "—"}</td>
            <td>${d.status === "indexed" ? html`<${TimeAgo} when=${d.at} />`
              : html`<span class="error">not indexed: ${d.reason}</span>`}</td>
          </tr>`)}
        </tbody>
      </table></div>
    </details>`;
}

function Databases({ list, statuses, documents }) {
  const byDb = new Map((statuses || []).map((s) => [s.db, s]));
  if (list.registered.length === 0) {
    return html`<p class="muted">No databases. Add one with <code>cairn search add NAME</code>, then drop files into <code>inbox/NAME/</code>.</p>`;
  }
  const counted = (db) => {
    const status = byDb.get(db);
    if (status) return status.documents;
    const docs = documents[db];
    return docs ? docs.filter((d) => d.status === "indexed").length : "—";
  };
  return html`
    <div class="table" tabindex="0" role="region" aria-label="Databases"><table>
      <thead><tr><th scope="col">Database</th><th scope="col">Registered</th><th scope="col">State</th>
        <th scope="col" class="num">Documents</th><th scope="col">Semantic index</th></tr></thead>
      <tbody>${list.registered.map((entry) => {
        const status = byDb.get(entry.db);
        const loaded = list.loaded.includes(entry.db);
        return html`
          <tr key=${entry.db} data-db=${entry.db}>
            <td>${entry.db}</td>
            <td><${TimeAgo} when=${entry.createAt} /></td>
            <td>${loaded ? status?.state || "loaded" : html`<span title="loaded at the next start">registered</span>`}</td>
            <td class="num">${counted(entry.db)}</td>
            <td><${Progress} status=${status} /></td>
          </tr>`;
      })}</tbody>
    </table></div>
    ${list.registered.map((entry) => html`<${Documents} key=${entry.db} db=${entry.db} documents=${documents[entry.db]} />`)}`;
}

// Every search asks for scores (`scores=1`: each match's, and how near meaning came) and
// highlights; `api.search` sends the plain parameters only. `more` adds others (`rank`).
async function searchScored({ db, q, limit, target }, more = {}) {
  const query = new URLSearchParams({
    db, q, limit: String(limit || 10), target, highlight: "1", scores: "1", ...more,
  });
  const response = await fetch(`/console/svc/search/api/search?${query}`);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, body?.error || `${response.status} ${response.statusText}`);
  }
  return body;
}

// A snippet with its highlights as <mark>s. Offsets count code points (docs/search.md), so the
// text is cut as an array of code points, not of UTF-16 units.
function Snippet({ text, highlights }) {
  const points = Array.from(text);
  const parts = [];
  let at = 0;
  for (const [start, end] of highlights) {
    if (start > at) parts.push(points.slice(at, start).join(""));
    parts.push(html`<mark>${points.slice(start, end).join("")}</mark>`);
    at = end;
  }
  if (at < points.length) parts.push(points.slice(at).join(""));
  return parts;
}

// Opens the database's documents and brings the file's row into view, focused and marked. The
// link stays on the page: its hash is an in-page anchor, which the router leaves alone.
function showDocument(event, db, source) {
  event.preventDefault();
  const details = [...document.querySelectorAll("details[data-documents]")]
    .find((d) => d.dataset.documents === db);
  const row = details && [...details.querySelectorAll("tr[data-source]")]
    .find((r) => r.dataset.source === source);
  if (!row) return;
  details.open = true;
  for (const other of details.querySelectorAll("tr[aria-current]")) other.removeAttribute("aria-current");
  row.setAttribute("aria-current", "true");
  row.scrollIntoView({ block: "center" });
  row.focus({ preventScroll: true });
}

// The source's name, a link to its row in the documents when that file is listed there.
function Source({ db, source, listed }) {
  if (!listed) return html`<code>${source}</code>`;
  return html`<a href=${`#doc-${encodeURIComponent(db)}-${encodeURIComponent(source)}`}
    title=${`${source} in the documents of ${db}`}
    onClick=${(e) => showDocument(e, db, source)}><code>${source}</code></a>`;
}

// A score as the branch gives it: a count of words (the spec's keyword ranking) as it is, a
// cosine, a BM25 or a fused score with two decimals.
function scoreText(score) {
  return Number.isInteger(score) ? String(score) : score.toFixed(2);
}

function Groups({ db, groups, listed }) {
  if (groups.length === 0) return html`<p class="muted">No match.</p>`;
  return html`${groups.map((group) => html`
    <article class="hit" data-source=${group.source}>
      <header><${Source} db=${db} source=${group.source} listed=${listed.has(group.source)} /></header>
      ${group.matches.map((m) => html`<p class="chunk"><small class="muted">chunk ${m.chunk}${
        typeof m.score === "number" ? html` · <span class="score" title="this match's score">score ${scoreText(m.score)}</span>` : null}</small> ${
        "snippet" in m ? html`<${Snippet} text=${m.snippet} highlights=${m.highlights} />` : m.content}</p>`)}
    </article>`)}`;
}

// Why the search by meaning added nothing, when it did not (null when it did): no chunk
// reached the similarity cut-off, or nothing is embedded yet.
function byMeaningNote(results) {
  if (!("semantic_cutoff" in results)) return null;
  const cutoff = results.semantic_cutoff;
  const closest = results.semantic_closest;
  if (closest === null || closest === undefined) {
    return "Nothing is embedded yet, so nothing is found by meaning.";
  }
  if (closest >= cutoff) return null;
  return `Nothing by meaning passed the ${cutoff} similarity cut-off (the nearest passage scored ${closest.toFixed(2)}).`;
}

const TITLES = { hybrid: "Best match", keyword: "By keyword", semantic: "By meaning" };

// What the note adds about the list it stands above: the best match is then the words alone.
function noteFor(branch, results, note) {
  if (!note || !(branch === "semantic" || branch === "hybrid")) return null;
  if (branch === "semantic") return note;
  return results.hybrid.length ? `${note} These are keyword matches.` : `${note} No keyword match either.`;
}

function Results({ db, results, documents, onKeywords, keywords }) {
  const listed = new Set((documents || []).map((d) => d.source));
  const branches = ["hybrid", "keyword", "semantic"].filter((b) => b in results);
  const note = byMeaningNote(results);
  // Offered when nothing was shown at all: the query's words, ranked by BM25, one typo forgiven.
  const offer = note && branches.every((b) => results[b].length === 0) && onKeywords;
  return html`
    <div class=${branches.length > 1 ? "grid-2" : ""}>
      ${branches.map((branch) => html`
        <section aria-labelledby=${`${branch}-h`} data-branch=${branch}>
          <h3 id=${`${branch}-h`}>${TITLES[branch]}</h3>
          ${noteFor(branch, results, note) ? html`<p class="note" role="status" data-cutoff>${noteFor(branch, results, note)}</p>` : null}
          <${Groups} db=${db} groups=${results[branch]} listed=${listed} />
        </section>`)}
    </div>
    ${offer && !keywords ? html`<button type="button" class="secondary" onClick=${onKeywords}>Show keyword matches</button>` : null}
    ${keywords ? html`
      <section aria-labelledby="offered-h" data-branch="offered">
        <h3 id="offered-h">Keyword matches</h3>
        <${Groups} db=${db} groups=${keywords.keyword} listed=${listed} />
      </section>` : null}`;
}

export function SearchPage() {
  const list = useLoad(api.databases);
  const status = useLoad(api.searchStatus);
  const registered = (list.data?.registered || []).map((e) => e.db);
  const documents = useLoad(async () => {
    const found = {};
    for (const db of registered) found[db] = await api.documents(db);
    return found;
  }, [registered.join("\n")]);
  const [statuses, setStatuses] = useState(null);
  const refresh = useThrottled(() => { list.reload(); status.reload(); documents.reload(); }, 2000);
  useEvents((event) => {
    if (event.type === "search.progress") {
      setStatuses((current) => {
        const base = current || status.data?.databases || [];
        return [...base.filter((s) => s.db !== event.data.db), event.data];
      });
    } else {
      refresh();
    }
  }, ["search."]);
  const shownStatuses = statuses || status.data?.databases || null;

  const [results, setResults] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    setBusy(true);
    setError(null);
    try {
      const asked = {
        db: form.get("db"), q: form.get("q"), target: form.get("target"), limit: form.get("limit"),
      };
      const found = await searchScored(asked);
      setResults({ db: asked.db, asked, found, keywords: null });
    } catch (err) {
      setResults(null);
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const showKeywords = async () => {
    if (!results) return;
    setError(null);
    try {
      const keywords = await searchScored(
        { ...results.asked, target: "keyword" }, { rank: "bm25", typo: "1" },
      );
      setResults({ ...results, keywords });
    } catch (err) {
      setError(err);
    }
  };
  const loaded = list.data?.loaded || [];

  return html`
    <h1 tabindex="-1">Search</h1>
    <section aria-labelledby="dbs-h">
      <h2 id="dbs-h">Databases</h2>
      <${ErrorNote} error=${list.error} />
      <${ErrorNote} error=${documents.error} />
      ${list.data ? html`<${Databases} list=${list.data} statuses=${shownStatuses}
                                       documents=${documents.data || {}} />` : null}
    </section>
    <section aria-labelledby="query-h">
      <h2 id="query-h">Search a database</h2>
      <form onSubmit=${submit}>
        <div class="grid-form">
          <label>Database
            <select name="db" required>
              ${loaded.map((db) => html`<option value=${db}>${db}</option>`)}
            </select></label>
          <label>Results <input name="limit" type="number" min="1" max="100" value="10" /></label>
        </div>
        <label>Query <input name="q" type="search" required placeholder="words or a question" /></label>
        <fieldset class="row">
          <legend>Match by</legend>
          <label title="words and meaning fused into one list, the words highlighted"><input type="radio" name="target" value="hybrid" checked /> best match</label>
          <label title="by keyword and by meaning, side by side"><input type="radio" name="target" value="both" /> both</label>
          <label><input type="radio" name="target" value="keyword" /> keyword</label>
          <label><input type="radio" name="target" value="semantic" /> meaning</label>
        </fieldset>
        <button type="submit" disabled=${busy || loaded.length === 0} aria-busy=${busy}>Search</button>
      </form>
      <${ErrorNote} error=${error} />
      ${results ? html`<${Results} db=${results.db} results=${results.found}
                                   documents=${documents.data?.[results.db]}
                                   onKeywords=${showKeywords} keywords=${results.keywords} />` : null}
    </section>`;
}
