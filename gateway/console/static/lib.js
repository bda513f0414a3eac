// The front-end libraries, named in one place: Preact with its hooks and htm (one ES module,
// no build step) and an SSE parser for streams that answer a POST (EventSource only GETs).
// Both come from npm at set-up (ops/package.json) and are served by the console itself.
export {
  html,
  render,
  useState,
  useEffect,
  useLayoutEffect,
  useRef,
  useMemo,
  useCallback,
} from "/console/vendor/preact-htm/standalone.module.js";
export { createParser } from "/console/vendor/eventsource-parser/index.js";
