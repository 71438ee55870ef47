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
import { createTaskSessionEndpointId, createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";
import {
  MODERN_VERSION,
  describeError,
  describeOutcome,
  describeTask,
  loggingFetch,
  makeRawDispatch,
  now,
} from "./common.mjs";

const CLIENT_INFO = { name: "ext-tasks-e2e-ts-driver", version: "0.0.1" };
const CLIENT_CAPABILITIES = { elicitation: {} };
const ALL_SCENARIOS = ["complete", "input", "cancel", "tool_error", "failed", "immediate", "handoff", "handoff_input"];

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
