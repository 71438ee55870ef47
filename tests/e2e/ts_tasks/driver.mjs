// Drives the official TypeScript Tasks client (@modelcontextprotocol/ext-tasks with
// @modelcontextprotocol/client) against a running ext_tasks server, and prints what it observed as
// one JSON object on the last line of stdout. The pytest test tests/e2e/test_ts_tasks_client.py
// runs it and asserts on that JSON.
//
//   node driver.mjs --url http://127.0.0.1:PORT/mcp --mode modern|legacy [--scenarios a,b]
//                   [--scenario-timeout-ms 30000] [--input-grace-ms 5000]
//
// modern: the SDK client pins 2026-07-28 (server/discover); the task session gets the raw
//         dispatch and the request framing the package requires for the Tasks extension.
// legacy: the SDK client does the 2025-11-25 initialize; the package uses its experimental-tasks path.
//
// The scenarios run concurrently. Every scenario gets its own SDK client (so its own connection, and
// in legacy mode its own MCP session) and its own wire log. A scenario that fails or hangs is recorded as an error, with what
// was seen until then; the others still run. The exit code is 0 whenever the JSON was printed.

import { parseArgs } from "node:util";
import { Client, ProtocolError, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  DispatchError,
  createTaskSessionEndpointId,
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const MODERN_VERSION = "2026-07-28";
const CLIENT_INFO = { name: "ext-tasks-e2e-ts-driver", version: "0.0.1" };
const CLIENT_CAPABILITIES = { elicitation: {} };
const ALL_SCENARIOS = ["complete", "input", "cancel", "tool_error", "failed", "immediate", "handoff", "handoff_input"];
const WIRE_HEADERS = ["mcp-protocol-version", "mcp-method", "mcp-name"];
// Milliseconds since the driver started, on every recorded entry, to put them in one timeline.
const now = () => Math.round(performance.now() * 10) / 10;

const { values: options } = parseArgs({
  options: {
    url: { type: "string" },
    mode: { type: "string" },
    scenarios: { type: "string", default: ALL_SCENARIOS.join(",") },
    "scenario-timeout-ms": { type: "string", default: "30000" },
    "input-grace-ms": { type: "string", default: "5000" },
  },
});
if (options.url === undefined || !["modern", "legacy"].includes(options.mode)) {
  console.error("usage: node driver.mjs --url URL --mode modern|legacy [--scenarios a,b,...]");
  process.exit(2);
}
const URL_ = options.url;
const MODE = options.mode;
const SCENARIO_TIMEOUT_MS = Number(options["scenario-timeout-ms"]);
const INPUT_GRACE_MS = Number(options["input-grace-ms"]);
const selected = options.scenarios.split(",").filter((name) => name.length > 0);
for (const name of selected) {
  if (!ALL_SCENARIOS.includes(name)) {
    console.error(`unknown scenario ${name}; known: ${ALL_SCENARIOS.join(", ")}`);
    process.exit(2);
  }
}

// ---------------------------------------------------------------------------------------------
// Wire log: every HTTP request a client of one scenario makes (the SDK transport's and the raw
// dispatch's), with the JSON-RPC method and the routing headers, and the HTTP status.

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

function loggingFetch(wire) {
  return async (input, init = {}) => {
    const headers = new Headers(init.headers);
    const entry = { http: (init.method ?? "GET").toUpperCase(), t: now() };
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

function makeRawDispatch(url, wire, fetchImpl) {
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
// One SDK client and one task session, per scenario (and per side of the handoff).

async function openSession(label, sessionOptions = {}) {
  const wire = [];
  const fetchImpl = loggingFetch(wire);
  const clientOptions = { capabilities: CLIENT_CAPABILITIES };
  if (MODE === "modern") clientOptions.versionNegotiation = { mode: { pin: MODERN_VERSION } };
  const client = new Client(CLIENT_INFO, clientOptions);
  // Notifications the server pushes (the package chains this handler before its own).
  const notifications = [];
  client.fallbackNotificationHandler = async (notification) => {
    const params = notification.params ?? {};
    notifications.push({
      t: now(),
      method: notification.method,
      ...(typeof params.taskId === "string" ? { taskId: params.taskId } : {}),
      ...(typeof params.status === "string" ? { status: params.status } : {}),
    });
  };
  // Server→client requests the package could not route to a task or call of this session (it hands
  // those to the host's prior handler): recorded, and answered as the package itself would.
  const unroutedRequests = [];
  client.fallbackRequestHandler = async (request) => {
    const params = request.params ?? {};
    unroutedRequests.push({
      t: now(),
      method: request.method,
      ...(typeof params.message === "string" ? { message: params.message } : {}),
      relatedTask: params._meta?.["io.modelcontextprotocol/related-task"]?.taskId ?? null,
    });
    if (request.method === "elicitation/create") return { action: "cancel" };
    throw new ProtocolError(-32601, `Method not found: ${request.method}`);
  };
  const transport = new StreamableHTTPClientTransport(new URL(URL_), { fetch: fetchImpl });
  await client.connect(transport);
  const endpointId = await createTaskSessionEndpointId("ext-tasks-e2e", { url: URL_, mode: MODE });
  const backgroundErrors = [];
  const taskOptions = { endpointId, onError: (error) => backgroundErrors.push(describeError(error)), ...sessionOptions };
  if (MODE === "modern") {
    taskOptions.rawDispatch = makeRawDispatch(URL_, wire, fetchImpl);
    taskOptions.v2RequestFraming = {
      protocolVersion: MODERN_VERSION,
      clientInfo: CLIENT_INFO,
      clientCapabilities: CLIENT_CAPABILITIES,
    };
  }
  const session = createTaskSessionFromClient(client, taskOptions);
  const capabilities = client.getServerCapabilities() ?? {};
  const connection = {
    label,
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    serverTasks: capabilities.tasks ?? null,
    serverExtensions: capabilities.extensions ?? null,
    sessionCapabilities: session.capabilities,
  };
  const close = async () => {
    await session.close().catch(() => {});
    await client.close().catch(() => {});
  };
  return { client, session, wire, notifications, unroutedRequests, connection, backgroundErrors, close };
}

// ---------------------------------------------------------------------------------------------
// Projections of what the package reports.

function describeError(error) {
  if (!(error instanceof Error)) return { name: typeof error, message: String(error) };
  const described = { name: error.name, message: error.message };
  if (error.code !== undefined) described.code = error.code;
  if (error.data !== undefined) described.data = error.data;
  if (error.cause instanceof Error) described.cause = { name: error.cause.name, message: error.cause.message };
  return described;
}

function describeResult(result) {
  const texts = (result?.content ?? []).filter((block) => block.type === "text").map((block) => block.text);
  const described = { texts, isError: result?.isError ?? false };
  if (result?.resultType !== undefined) described.resultType = result.resultType;
  if (result?._meta !== undefined) described.metaKeys = Object.keys(result._meta).sort();
  return described;
}

function describeTask(view) {
  if (view === undefined) return null;
  const described = { taskId: view.taskId, status: view.status };
  if (view.statusMessage !== undefined) described.statusMessage = view.statusMessage;
  described.retentionMs = view.retentionMs;
  if (view.suggestedPollIntervalMs !== undefined) described.suggestedPollIntervalMs = view.suggestedPollIntervalMs;
  return described;
}

function describeOutcome(outcome) {
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

function eventRecorder(events) {
  return (event) => {
    if (event.type === "task") events.push({ type: "task", ...describeTask(event.task), t: now() });
    else events.push({ type: "outcome", status: event.outcome.status, t: now() });
  };
}

function answerFor(request) {
  // Answer the demo questions by what they ask for (the schema's properties).
  const properties = Object.keys(request.params?.requestedSchema?.properties ?? {});
  const content = {};
  for (const property of properties) {
    if (property === "approver") content.approver = "Ada";
    else if (property === "confirm") content.confirm = true;
    else if (property === "reviewer") content.reviewer = "Grace";
    else content[property] = "unknown";
  }
  return { action: "accept", content };
}

function describeQuestion(request, context, answer) {
  return {
    t: now(),
    kind: request.kind,
    message: request.params?.message,
    relatedTask: request.params?._meta?.["io.modelcontextprotocol/related-task"]?.taskId ?? null,
    scope: context.scope,
    delivery: context.delivery,
    taskId: context.taskId ?? null,
    inputId: context.inputId ?? null,
    answer: answer.content,
  };
}

// The input callback for a session whose task asks questions, recording them (and the task's events)
// in holder.questions and holder.events. Two watchdogs give a stuck exchange its symptom (instead of
// the scenario timeout): once the task shows input_required, the input callback must be called within
// INPUT_GRACE_MS; once it answered, the task must leave input_required within INPUT_GRACE_MS of the
// last answer. Settle with AbortSignal.any([signal, watch.signal]) and dispose() at the end.
function inputWatch(holder) {
  holder.questions = [];
  holder.events = [];
  const watchdog = new AbortController();
  const timers = new Set();
  const arm = (check) => timers.add(setTimeout(check, INPUT_GRACE_MS));
  const latestStatus = () => holder.events.findLast((event) => event.type === "task")?.status;
  let lastAnswerAt;
  const checkAsked = () => {
    if (holder.questions.length === 0)
      watchdog.abort(
        new Error(`the task showed input_required for ${INPUT_GRACE_MS}ms and the client's input callback was never called`),
      );
  };
  const checkAnswered = () => {
    if (now() - lastAnswerAt >= INPUT_GRACE_MS && latestStatus() === "input_required")
      watchdog.abort(
        new Error(
          `the client answered ${holder.questions.length} question(s), but ${INPUT_GRACE_MS}ms after the last ` +
            "answer the task still showed input_required",
        ),
      );
    else arm(checkAnswered);
  };
  const onInputRequest = async (request, context) => {
    const answer = answerFor(request);
    holder.questions.push(describeQuestion(request, context, answer));
    if (lastAnswerAt === undefined) arm(checkAnswered);
    lastAnswerAt = now();
    return answer;
  };
  let sawInputRequired = false;
  const recorder = eventRecorder(holder.events);
  const onEvent = (event) => {
    recorder(event);
    if (event.type === "task" && event.task.status === "input_required" && !sawInputRequired) {
      sawInputRequired = true;
      arm(checkAsked);
    }
  };
  const dispose = () => {
    for (const timer of timers) clearTimeout(timer);
  };
  return { onInputRequest, onEvent, signal: watchdog.signal, dispose };
}

// The handoff, in two halves. Session A (a new SDK client) starts the task, hands it off right after
// tools/call created it (persisting the reference as JSON text) and closes; it records into
// record.first (kept, if the scenario set it up before). Session B (another new SDK client and connection) resumes the persisted reference
// and drives it to the end; it records into record.second and record.outcome.

async function startAndHandOff(record, { tool, args, sessionOptions = {} }, signal) {
  const first = await openSession("handoff-first", sessionOptions);
  record.first = {
    ...record.first,
    connection: first.connection,
    wire: first.wire,
    notifications: first.notifications,
    unroutedRequests: first.unroutedRequests,
    backgroundErrors: first.backgroundErrors,
  };
  let persisted;
  try {
    const execution = await first.session.callTool(tool, args, { task: { preference: "require" }, signal });
    record.first.kind = execution.kind;
    record.taskId = execution.handle?.taskId ?? null;
    // The first update is the task as tools/call created it.
    const updates = execution.updates()[Symbol.asyncIterator]();
    const created = await updates.next();
    record.first.statusAtHandoff = created.value?.type === "task" ? created.value.task.status : null;
    await updates.return?.();
    await execution.handoff(async (reference) => {
      persisted = JSON.stringify(reference);
    });
    // Handing off ends the local execution (without cancelling the remote task). Wait for that to
    // settle before closing the session: session.close() right after handoff() still finds the
    // execution unsettled and sends tasks/cancel for the task just handed off (package 0.2.2).
    record.first.localOutcome = describeOutcome(await execution.result());
  } finally {
    // Closing the first session must not cancel the handed-off task.
    await first.close();
    record.first.closedAt = now();
  }
  record.reference = JSON.parse(persisted);
  return persisted;
}

async function resumeHandedOff(record, persisted, { sessionOptions = {}, onEvent, settleSignal }, signal) {
  const second = await openSession("handoff-second", sessionOptions);
  record.second = {
    ...record.second,
    connection: second.connection,
    wire: second.wire,
    notifications: second.notifications,
    unroutedRequests: second.unroutedRequests,
    backgroundErrors: second.backgroundErrors,
  };
  try {
    const execution = await second.session.resumeTask(JSON.parse(persisted), { signal });
    record.second.kind = execution.kind;
    record.second.taskId = execution.handle?.taskId ?? null;
    record.second.events ??= [];
    const { outcome } = await execution.settle({
      onEvent: onEvent ?? eventRecorder(record.second.events),
      signal: settleSignal ?? signal,
    });
    record.outcome = describeOutcome(outcome);
  } catch (error) {
    // Leave nothing waiting on the server: cancel the task this scenario resumed.
    if (record.taskId) await second.session.task(record.taskId).cancel().catch(() => {});
    throw error;
  } finally {
    await second.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios. Each fills in its record; if it throws, the error is recorded next to what it saw.
// Task scenarios pass task.preference "require": on the 2025-11-25 path the package sends params.task
// for an "optional" tool only when the caller prefers a task (and fails if none comes back).

async function taskScenario(record, { tool, sessionOptions = {} }) {
  const side = await openSession(tool, sessionOptions);
  record.connection = side.connection;
  record.wire = side.wire;
  record.notifications = side.notifications;
  record.backgroundErrors = side.backgroundErrors;
  return side;
}

const scenarios = {
  async complete(record, signal) {
    const side = await taskScenario(record, { tool: "quick_sum" });
    try {
      const execution = await side.session.callTool("quick_sum", { a: 2, b: 3 }, { task: { preference: "require" }, signal });
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      record.events = [];
      const { outcome, lastTask } = await execution.settle({ onEvent: eventRecorder(record.events), signal });
      record.outcome = describeOutcome(outcome);
      record.lastTask = describeTask(lastTask);
    } finally {
      await side.close();
    }
  },

  async input(record, signal) {
    const watch = inputWatch(record);
    const side = await taskScenario(record, {
      tool: "approve_release",
      sessionOptions: { onInputRequest: watch.onInputRequest },
    });
    try {
      const execution = await side.session.callTool(
        "approve_release",
        { version: "1.2.3" },
        { task: { preference: "require" }, signal },
      );
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      const { outcome, lastTask } = await execution.settle({
        onEvent: watch.onEvent,
        signal: AbortSignal.any([signal, watch.signal]),
      });
      record.outcome = describeOutcome(outcome);
      record.lastTask = describeTask(lastTask);
    } catch (error) {
      // Leave nothing waiting on the server: cancel the task this scenario created.
      if (record.taskId) await side.session.task(record.taskId).cancel().catch(() => {});
      throw error;
    } finally {
      watch.dispose();
      await side.close();
    }
  },

  async cancel(record, signal) {
    const side = await taskScenario(record, { tool: "long_export" });
    try {
      const execution = await side.session.callTool("long_export", { seconds: 60 }, { task: { preference: "require" }, signal });
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      record.events = [];
      let running;
      const isRunning = new Promise((resolve) => {
        running = resolve;
      });
      const recorder = eventRecorder(record.events);
      const settlement = execution.settle({
        onEvent: (event) => {
          recorder(event);
          // The tool publishes "exporting ..." once it runs: cancel a task that really runs.
          if (event.type === "task" && event.task.statusMessage?.startsWith("exporting")) running();
        },
        signal,
      });
      await Promise.race([isRunning, settlement]);
      record.statusBeforeCancel = record.events.at(-1)?.status ?? null;
      await execution.cancel(signal);
      const { outcome } = await settlement;
      record.outcome = describeOutcome(outcome);
      // What the server says now, through a fresh controller of the same session.
      record.afterCancel = describeTask(await side.session.task(record.taskId).snapshot(signal));
    } finally {
      await side.close();
    }
  },

  async tool_error(record, signal) {
    const side = await taskScenario(record, { tool: "failing_check" });
    try {
      const execution = await side.session.callTool("failing_check", { version: "1.2.3" }, { task: { preference: "require" }, signal });
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      record.events = [];
      const { outcome } = await execution.settle({ onEvent: eventRecorder(record.events), signal });
      record.outcome = describeOutcome(outcome);
    } finally {
      await side.close();
    }
  },

  async failed(record, signal) {
    const side = await taskScenario(record, { tool: "broken_job" });
    try {
      const execution = await side.session.callTool("broken_job", { job: "nightly" }, { task: { preference: "require" }, signal });
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      record.events = [];
      const { outcome } = await execution.settle({ onEvent: eventRecorder(record.events), signal });
      record.outcome = describeOutcome(outcome);
    } finally {
      await side.close();
    }
  },

  async immediate(record, signal) {
    const side = await taskScenario(record, { tool: "echo_inline" });
    try {
      const execution = await side.session.callTool("echo_inline", { text: "hello" }, { signal });
      record.kind = execution.kind;
      record.taskId = execution.handle?.taskId ?? null;
      record.events = [];
      const { outcome } = await execution.settle({ onEvent: eventRecorder(record.events), signal });
      record.outcome = describeOutcome(outcome);
    } finally {
      await side.close();
    }
  },

  async handoff(record, signal) {
    const persisted = await startAndHandOff(
      record,
      { tool: "handoff_job", args: { label: "nightly-report", seconds: 1.5 } },
      signal,
    );
    await resumeHandedOff(record, persisted, {}, signal);
  },

  async handoff_input(record, signal) {
    // As handoff, for a task that asks a question a second after it started: by then session A has
    // handed it off and closed, so session B, which resumed it, must get the question through its
    // input callback. Session A has an input callback too (recording what it gets, answering with a
    // name the result would show), and any request the package cannot route lands in unroutedRequests.
    record.first = { questions: [] };
    const persisted = await startAndHandOff(
      record,
      {
        tool: "handoff_approval",
        args: { label: "quarterly-report" },
        sessionOptions: {
          onInputRequest: async (request, context) => {
            const answer = { action: "accept", content: { reviewer: "session A" } };
            record.first.questions.push(describeQuestion(request, context, answer));
            return answer;
          },
        },
      },
      signal,
    );
    record.second = {};
    const watch = inputWatch(record.second);
    try {
      await resumeHandedOff(
        record,
        persisted,
        {
          sessionOptions: { onInputRequest: watch.onInputRequest },
          onEvent: watch.onEvent,
          settleSignal: AbortSignal.any([signal, watch.signal]),
        },
        signal,
      );
    } finally {
      watch.dispose();
    }
  },
};

const report = { mode: MODE, url: URL_, node: process.version, scenarios: {} };

async function runScenario(name) {
  const record = {};
  report.scenarios[name] = record;
  const started = Date.now();
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new Error(`scenario did not finish within ${SCENARIO_TIMEOUT_MS}ms`)),
    SCENARIO_TIMEOUT_MS,
  );
  try {
    await Promise.race([
      scenarios[name](record, controller.signal),
      new Promise((_, reject) => {
        controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true });
      }),
    ]);
    record.ok = true;
  } catch (error) {
    record.ok = false;
    record.error = describeError(error);
  } finally {
    clearTimeout(timer);
    record.elapsedMs = Date.now() - started;
  }
}

const hardStop = setTimeout(() => {
  report.hardStop = `driver stopped after ${SCENARIO_TIMEOUT_MS + 15000}ms`;
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exit(0);
}, SCENARIO_TIMEOUT_MS + 15000);
await Promise.all(selected.map((name) => runScenario(name)));
clearTimeout(hardStop);
process.stdout.write(`${JSON.stringify(report)}\n`);
// Open SSE streams (the legacy GET stream) must not keep the process alive.
process.exit(0);
