// What the TypeScript drivers share (driver.mjs, oauth_client.mjs): the wire log of every HTTP request
// an SDK client and the raw dispatch make, the raw dispatch itself, and the projections of what the
// ext-tasks package reports.

import { DispatchError, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";

export const MODERN_VERSION = "2026-07-28";
const WIRE_HEADERS = ["mcp-protocol-version", "mcp-method", "mcp-name"];
// Milliseconds since the driver started, on every recorded entry, to put them in one timeline.
export const now = () => Math.round(performance.now() * 10) / 10;

// ---------------------------------------------------------------------------------------------
// Wire log: every HTTP request a client of one scenario makes (the SDK transport's and the raw
// dispatch's), with the JSON-RPC method and the routing headers, and the HTTP status. With
// { auth: true }, also the URL (without its query), whether a bearer token went along, and the
// WWW-Authenticate challenge of the answer (never a token or a body).

function describeBody(body) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return { rpc: "batch-or-invalid" };
  if (typeof body.method === "string") {
    const params = body.params ?? {};
    const entry = { rpc: body.method };
    if (body.id !== undefined) entry.id = body.id;
    if (typeof params.name === "string") entry.name = params.name;
    if (typeof params.taskId === "string") entry.taskId = params.taskId;
    if (params.task !== undefined) entry.task = params.task;
    if (params.inputResponses !== undefined) entry.inputResponseKeys = Object.keys(params.inputResponses).sort();
    const meta = params._meta ?? {};
    const version = meta["io.modelcontextprotocol/protocolVersion"];
    if (version !== undefined) entry.metaProtocolVersion = version;
    const capabilities = meta["io.modelcontextprotocol/clientCapabilities"];
    if (capabilities !== undefined) entry.metaExtensions = Object.keys(capabilities.extensions ?? {});
    if (body.method === "initialize") entry.protocolVersion = params.protocolVersion;
    return entry;
  }
  return { rpc: "response", id: body.id, ...(body.error === undefined ? {} : { errorCode: body.error.code }) };
}

export function loggingFetch(wire, { auth = false } = {}) {
  return async (input, init = {}) => {
    const headers = new Headers(init.headers);
    const entry = { http: (init.method ?? "GET").toUpperCase(), t: now() };
    if (auth) {
      const url = new URL(input instanceof Request ? input.url : String(input));
      entry.url = `${url.origin}${url.pathname}`;
      entry.bearer = (headers.get("authorization") ?? "").startsWith("Bearer ");
    }
    if (typeof init.body === "string") {
      try {
        Object.assign(entry, describeBody(JSON.parse(init.body)));
      } catch {
        entry.rpc = "unparsable";
      }
    }
    entry.headers = {};
    for (const name of WIRE_HEADERS) {
      const value = headers.get(name);
      if (value !== null) entry.headers[name] = value;
    }
    entry.session = headers.has("mcp-session-id");
    wire.push(entry);
    try {
      const response = await fetch(input, init);
      entry.status = response.status;
      const challenge = response.headers.get("www-authenticate");
      if (auth && challenge !== null) entry.wwwAuthenticate = challenge;
      return response;
    } catch (error) {
      // The package aborts an in-flight poll when a notification settles the observation first.
      if (init.signal?.aborted) entry.aborted = true;
      else entry.fetchError = String(error);
      throw error;
    }
  };
}

// ---------------------------------------------------------------------------------------------
// The raw dispatch the package requires for 2026-07-28 task traffic (tools/call and tasks/*): the
// SDK client cannot carry resultType "task" or the tasks/* methods, so the host posts them itself.
// The package frames _meta (protocol version, client info, capabilities with the extension) and
// passes Mcp-Name for tasks/*; the host owns ids, the HTTP headers and the response matching.

async function* sseMessages(response) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let boundary;
    while ((boundary = buffer.search(/\r?\n\r?\n/)) !== -1) {
      const block = buffer.slice(0, boundary);
      buffer = buffer.slice(boundary).replace(/^\r?\n\r?\n/, "");
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data.length > 0) yield JSON.parse(data);
    }
  }
}

async function readJsonRpcResponse(response, id, wire) {
  const type = response.headers.get("content-type") ?? "";
  if (type.includes("text/event-stream")) {
    for await (const message of sseMessages(response)) {
      if (message.id === id && (message.result !== undefined || message.error !== undefined)) return message;
      wire.push({ t: now(), sse: message.method ?? "other", ...(message.id === undefined ? {} : { id: message.id }) });
    }
    return undefined;
  }
  const text = await response.text();
  if (text.length === 0) return undefined;
  try {
    const message = JSON.parse(text);
    return message !== null && typeof message === "object" && message.id === id ? message : undefined;
  } catch {
    return undefined;
  }
}

export function makeRawDispatch(url, wire, fetchImpl) {
  let counter = 0;
  return async (request, dispatchOptions = {}) => {
    const id = `raw-${++counter}`;
    const method = request.method;
    const params = request.params ?? {};
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": MODERN_VERSION,
      "mcp-method": method,
    };
    if (method === "tools/call" && typeof params.name === "string") headers["mcp-name"] = params.name;
    const supplied = dispatchOptions.context?.headers ?? {};
    for (const [name, value] of Object.entries(supplied)) headers[name.toLowerCase()] = value;
    wire.push({ t: now(), rawDispatch: method, packageHeaders: Object.keys(supplied).map((name) => name.toLowerCase()) });
    const signals = [dispatchOptions.signal];
    if (dispatchOptions.context?.requestTimeoutMs !== undefined)
      signals.push(AbortSignal.timeout(dispatchOptions.context.requestTimeoutMs));
    const live = signals.filter((signal) => signal !== undefined);
    const signal = live.length === 0 ? undefined : AbortSignal.any(live);
    let response;
    try {
      response = await fetchImpl(url, {
        method: "POST",
        headers,
        body: JSON.stringify({ jsonrpc: "2.0", id, ...request }),
        signal,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new DispatchError(`POST ${method} failed: ${String(error)}`, true, { cause: error });
    }
    const message = await readJsonRpcResponse(response, id, wire);
    if (message === undefined)
      throw new DispatchError(`HTTP ${response.status} for ${method} carried no JSON-RPC response`, response.status >= 500);
    if (message.error !== undefined) return { kind: "error", error: message.error };
    return { kind: "result", result: message.result };
  };
}

// ---------------------------------------------------------------------------------------------
// Projections of what the package reports.

export function describeError(error) {
  if (!(error instanceof Error)) return { name: typeof error, message: String(error) };
  const described = { name: error.name, message: error.message };
  if (error.code !== undefined) described.code = error.code;
  if (error.data !== undefined) described.data = error.data;
  if (error.cause instanceof Error) described.cause = { name: error.cause.name, message: error.cause.message };
  return described;
}

export function describeResult(result) {
  const texts = (result?.content ?? []).filter((block) => block.type === "text").map((block) => block.text);
  const described = { texts, isError: result?.isError ?? false };
  if (result?.resultType !== undefined) described.resultType = result.resultType;
  if (result?._meta !== undefined) described.metaKeys = Object.keys(result._meta).sort();
  return described;
}

export function describeTask(view) {
  if (view === undefined) return null;
  const described = { taskId: view.taskId, status: view.status };
  if (view.statusMessage !== undefined) described.statusMessage = view.statusMessage;
  described.retentionMs = view.retentionMs;
  if (view.suggestedPollIntervalMs !== undefined) described.suggestedPollIntervalMs = view.suggestedPollIntervalMs;
  return described;
}

export function describeOutcome(outcome) {
  const described = { status: outcome.status, task: describeTask(outcome.task) };
  if (outcome.status === "completed") described.result = describeResult(outcome.result);
  if (outcome.status === "failed") described.error = describeError(outcome.error);
  // resultFromTaskOutcome is the package's own unwrapping: it returns the result or throws.
  try {
    described.unwrapped = describeResult(resultFromTaskOutcome(outcome));
  } catch (error) {
    described.unwrapThrew = describeError(error);
  }
  return described;
}
