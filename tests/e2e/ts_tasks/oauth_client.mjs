// The official TypeScript client (@modelcontextprotocol/client with @modelcontextprotocol/ext-tasks)
// against an OAuth-protected ext_tasks server; prints what it observed as one JSON object on the last
// line of stdout. The pytest test tests/e2e/test_oauth_clients.py runs it and asserts on that JSON.
//
//   node oauth_client.mjs --url http://127.0.0.1:PORT/mcp --issuer ISSUER --client-id ID --client-secret S
//                         [--timeout-ms 20000]
//
// The client knows the server's URL and its own registration at the authorization server, nothing
// else: its SDK transport gets a 401 on server/discover, follows resource_metadata to the Protected
// Resource Metadata, then the issuer's metadata, gets a token with the SDK's ClientCredentialsProvider
// (the io.modelcontextprotocol/oauth-client-credentials extension, client_secret_basic), and retries.
// The task traffic (tools/call answered with a task, tasks/get) goes through the raw dispatch the
// ext-tasks package requires, whose fetch is wrapped in the SDK's withOAuth middleware (the same
// provider, so the same token, and the same 401 handling). It lists the tools and runs the task tool
// "whoami" to its end. Every HTTP request (the server's and the authorization server's) is logged with
// its URL, status and challenge; no token and no body is printed. The exit code is 0 whenever the
// JSON was printed; "ok" says whether the run succeeded.

import { parseArgs } from "node:util";
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport, withOAuth } from "@modelcontextprotocol/client";
import { createTaskSessionEndpointId, createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";
import { MODERN_VERSION, describeError, describeOutcome, describeTask, loggingFetch, makeRawDispatch, now } from "./common.mjs";

const CLIENT_INFO = { name: "ext-tasks-e2e-ts-oauth", version: "0.0.1" };
const CLIENT_CAPABILITIES = {};

const { values: options } = parseArgs({
  options: {
    url: { type: "string" },
    issuer: { type: "string" },
    "client-id": { type: "string" },
    "client-secret": { type: "string" },
    "timeout-ms": { type: "string", default: "20000" },
  },
});
for (const required of ["url", "issuer", "client-id", "client-secret"]) {
  if (options[required] === undefined) {
    console.error("usage: node oauth_client.mjs --url URL --issuer ISSUER --client-id ID --client-secret SECRET");
    process.exit(2);
  }
}
const URL_ = options.url;
const TIMEOUT_MS = Number(options["timeout-ms"]);

const wire = [];
const report = { url: URL_, node: process.version, wire };

async function run(signal) {
  const baseFetch = loggingFetch(wire, { auth: true });
  const provider = new ClientCredentialsProvider({
    clientId: options["client-id"],
    clientSecret: options["client-secret"],
    clientName: CLIENT_INFO.name,
    expectedIssuer: options.issuer,
  });
  const client = new Client(CLIENT_INFO, {
    capabilities: CLIENT_CAPABILITIES,
    versionNegotiation: { mode: { pin: MODERN_VERSION } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(URL_), { fetch: baseFetch, authProvider: provider });
  await client.connect(transport);
  try {
    report.connection = {
      era: client.getProtocolEra(),
      protocolVersion: client.getNegotiatedProtocolVersion(),
      serverExtensions: client.getServerCapabilities()?.extensions ?? null,
    };
    report.tokenScope = (await provider.tokens())?.scope ?? null;
    report.tools = (await client.listTools()).tools.map((tool) => tool.name).sort();

    const session = createTaskSessionFromClient(client, {
      endpointId: await createTaskSessionEndpointId("ext-tasks-e2e-oauth", { url: URL_ }),
      rawDispatch: makeRawDispatch(URL_, wire, withOAuth(provider, URL_)(baseFetch)),
      v2RequestFraming: { protocolVersion: MODERN_VERSION, clientInfo: CLIENT_INFO, clientCapabilities: CLIENT_CAPABILITIES },
      onError: (error) => (report.backgroundErrors ??= []).push(describeError(error)),
    });
    try {
      const execution = await session.callTool("whoami", {}, { task: { preference: "require" }, signal });
      const record = { kind: execution.kind, taskId: execution.handle?.taskId ?? null, events: [] };
      report.whoami = record;
      const { outcome } = await execution.settle({
        onEvent: (event) => {
          if (event.type === "task") record.events.push({ status: event.task.status, t: now() });
        },
        signal,
      });
      record.outcome = describeOutcome(outcome);
      record.lastTask = describeTask(outcome.task);
    } finally {
      await session.close().catch(() => {});
    }
  } finally {
    await client.close().catch(() => {});
  }
}

const controller = new AbortController();
const timer = setTimeout(() => controller.abort(new Error(`not done within ${TIMEOUT_MS}ms`)), TIMEOUT_MS);
try {
  await Promise.race([
    run(controller.signal),
    new Promise((_, reject) => controller.signal.addEventListener("abort", () => reject(controller.signal.reason))),
  ]);
  report.ok = true;
} catch (error) {
  report.ok = false;
  report.error = describeError(error);
} finally {
  clearTimeout(timer);
}
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
