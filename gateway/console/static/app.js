// The console: a header with the pages, and the page the location's hash names.
// #/ overview · #/vms · #/vms/new · #/vm/<id> · #/functions · #/function/<path> ·
// #/search · #/images/<folder> · #/events

import { html, render, useEffect, useRef, useState } from "./lib.js";
import { useFeedConnected } from "./feed.js";
import { identity, loadIdentity } from "./identity.js";
import { api } from "./api.js";
import { useLoad } from "./ui.js";
import { Overview } from "./pages/overview.js";
import { VmList } from "./pages/vms.js";
import { InstallVm } from "./pages/install.js";
import { VmDetail } from "./pages/vm.js";
import { FunctionList } from "./pages/functions.js";
import { FunctionPage } from "./pages/function.js";
import { SearchPage } from "./pages/search.js";
import { ImagesPage } from "./pages/images.js";
import { EventsPage } from "./pages/events.js";

const PAGES = [
  ["", "Overview"],
  ["vms", "VMs"],
  ["functions", "Functions"],
  ["search", "Search"],
  ["images", "Images"],
  ["events", "Events"],
];

function parseHash() {
  const hash = location.hash;
  if (hash && !hash.startsWith("#/")) return null; // an in-page anchor, not a page
  const [path, query] = (hash || "#/").slice(1).split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(query || "") };
}

function useRoute() {
  const [route, setRoute] = useState(parseHash() || { parts: [], query: new URLSearchParams() });
  useEffect(() => {
    const onChange = () => {
      const next = parseHash();
      if (next) setRoute(next);
    };
    addEventListener("hashchange", onChange);
    return () => removeEventListener("hashchange", onChange);
  }, []);
  return route;
}

function pageFor({ parts, query }) {
  const [head, ...rest] = parts;
  switch (head) {
    case undefined:
      return [Overview, {}, ""];
    case "vms":
      return rest[0] === "new" ? [InstallVm, {}, "vms"] : [VmList, {}, "vms"];
    case "vm":
      return [VmDetail, { id: rest[0] }, "vms"];
    case "functions":
      return [FunctionList, {}, "functions"];
    case "function":
      return [FunctionPage, { path: rest.join("/"), version: query.get("version") }, "functions"];
    case "search":
      return [SearchPage, {}, "search"];
    case "images":
      return [ImagesPage, { folder: rest.join("/") }, "images"];
    case "events":
      return [EventsPage, {}, "events"];
    default:
      return [NotFound, {}, null];
  }
}

function NotFound() {
  return html`<h1 tabindex="-1">Not found</h1><p>No such page. <a href="#/">Overview</a></p>`;
}

function Header({ current }) {
  const live = useFeedConnected();
  return html`
    <header class="site container">
      <nav aria-label="Pages">
        <ul>
          <li><a class="brand" href="#/"><img src="/console/static/favicon.svg" alt="" width="24" height="24" /> cairn</a></li>
        </ul>
        <ul class="pages">
          ${PAGES.map(([key, label]) => html`
            <li><a href=${`#/${key}`} aria-current=${current === key ? "page" : null}>${label}</a></li>`)}
        </ul>
      </nav>
      <p class=${`live ${live ? "on" : "off"}`} role="status">
        ${live ? "live" : "reconnecting…"}
      </p>
      ${identity.identities && identity.name ? html`
        <form class="who" method="post" action="/console/logout">
          <span>Signed in as <strong>${identity.name}</strong> (${identity.role})</span>
          <button type="submit" class="secondary outline">Sign out</button>
        </form>` : null}
    </header>`;
}

// Said on every page, in one line (two on a phone): nothing done here touches a real machine.
function SimulatedBanner() {
  return html`
    <p class="banner container" role="note" data-banner="simulated">
      <strong>Simulated cluster</strong>: no <code>MAIN_NODE</code> is set, so these VMs are not
      real machines.</p>`;
}

function App() {
  const route = useRoute();
  // Rendered at once; again when who is signed in is known (what a role may do shows then).
  const [, setKnown] = useState(identity.loaded);
  useEffect(() => {
    loadIdentity().then(() => setKnown(true));
  }, []);
  const status = useLoad(api.status);
  const simulated = status.data?.services?.vm?.cluster === "simulated";
  const [Page, props, current] = pageFor(route);
  const main = useRef(null);
  const first = useRef(true);
  useEffect(() => {
    const label = PAGES.find(([key]) => key === current);
    document.title = label && current !== "" ? `${label[1]} · cairn` : "cairn";
    // After a page change, keyboard and screen-reader users start at the new page's heading.
    if (!first.current) main.current?.querySelector("h1")?.focus();
    first.current = false;
  }, [route]);
  return html`
    <a class="skip" href="#main">Skip to the page</a>
    <${Header} current=${current} />
    ${simulated ? html`<${SimulatedBanner} />` : null}
    <main id="main" class="container" ref=${main}>
      <${Page} key=${route.parts.join("/")} ...${props} />
    </main>`;
}

render(html`<${App} />`, document.getElementById("app"));
