// Preloaded into the conformance referee (NODE_OPTIONS="--require .../bearer.cjs"), which has no option to
// send a header: every HTTP request to the origin in BEARER_ORIGIN carries "Authorization: Bearer
// $BEARER_TOKEN". Requests to any other origin (the referee's own mock servers) are left alone, and a
// request that already names its credentials keeps them.
//
// The referee sends in three ways: the global fetch (its raw 2026-07-28 requests, and its SDK client's
// 2025-11-25 ones), its own copy of undici's request() (the scenarios that set a Host header, which fetch
// forbids), and node:http's request() (the scenarios that send malformed headers). The first two take
// undici's global dispatcher, shared between every copy of undici in the process through a well-known
// symbol: this wraps that dispatcher once, before the referee runs; and it wraps http.request.
'use strict';
const token = process.env.BEARER_TOKEN;
const origin = process.env.BEARER_ORIGIN;
if (!token || !origin) {
  throw new Error('bearer.cjs: set BEARER_TOKEN and BEARER_ORIGIN');
}
const SYMBOLS = [Symbol.for('undici.globalDispatcher.1'), Symbol.for('undici.globalDispatcher.2')];

// Node's own undici is loaded, and installs the global dispatcher, on the first call of fetch (synchronously;
// a data: URL goes nowhere).
globalThis.fetch?.('data:,').catch(() => {});
const inner = globalThis[SYMBOLS[0]];

function hasAuthorization(headers) {
  if (Array.isArray(headers)) {
    // Flat [name, value, name, value, ...] (undici's own form), or [[name, value], ...].
    const names = Array.isArray(headers[0]) ? headers.map((pair) => pair[0]) : headers.filter((_, i) => i % 2 === 0);
    return names.some((name) => String(name).toLowerCase() === 'authorization');
  }
  return Object.keys(headers ?? {}).some((name) => name.toLowerCase() === 'authorization');
}

function withBearer(headers) {
  const value = `Bearer ${token}`;
  if (hasAuthorization(headers)) return headers;
  if (Array.isArray(headers)) {
    return Array.isArray(headers[0]) ? [...headers, ['authorization', value]] : [...headers, 'authorization', value];
  }
  return { ...(headers ?? {}), authorization: value };
}

function dispatch(opts, handler) {
  const target = opts.origin === undefined ? undefined : new URL(String(opts.origin)).origin;
  const changed = target === origin ? { ...opts, headers: withBearer(opts.headers) } : opts;
  return inner.dispatch(changed, handler);
}

const wrapped = inner && new Proxy(inner, {
  get(target, property) {
    if (property === 'dispatch') return dispatch;
    const value = target[property];
    return typeof value === 'function' ? value.bind(target) : value;
  },
});
// NODE_OPTIONS reaches npx's own Node too (an older one, whose fetch installs no dispatcher up front): there
// this does nothing. Should the referee's Node do the same, its requests go without the token, and the
// server's 401s fail the run.
if (inner && typeof inner.dispatch === 'function') {
  for (const symbol of SYMBOLS) {
    globalThis[symbol] = wrapped;
  }
}

const http = require('http');
const request = http.request;

function originOf(options) {
  const protocol = options.protocol ?? 'http:';
  const host = options.hostname ?? options.host ?? 'localhost';
  const port = options.port ?? (protocol === 'https:' ? 443 : 80);
  return new URL(`${protocol}//${host.includes(':') ? `[${host}]` : host}:${port}`).origin;
}

http.request = function requestWithBearer(...args) {
  const [first, second] = args;
  if (typeof first === 'string' || first instanceof URL) {
    if (new URL(String(first)).origin === origin) {
      const options = second !== null && typeof second === 'object' ? second : {};
      const rest = options === second ? args.slice(2) : args.slice(1);
      return request.call(this, first, { ...options, headers: withBearer(options.headers) }, ...rest);
    }
  } else if (first !== null && typeof first === 'object' && originOf(first) === origin) {
    return request.call(this, { ...first, headers: withBearer(first.headers) }, ...args.slice(1));
  }
  return request.apply(this, args);
};
