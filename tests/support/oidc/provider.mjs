// A real OAuth 2.1 / OpenID authorization server for the tests: panva's oidc-provider (pinned in
// package.json), configured from a JSON file written by tests/support/oidc_provider.py.
//
//   node provider.mjs CONFIG.json
//
// It listens on 127.0.0.1:<port> only, with the issuer http://127.0.0.1:<port> (plain http on loopback).
// What it adds to oidc-provider, all for tests:
// - interactions that need no human: GET /interaction/<uid> logs in a fixed account (the config's
//   defaultAccount, or the request's login_hint) and grants everything asked, then redirects on;
// - POST /__test__/reload: re-reads the config file and swaps in a new Provider on the same port, sharing
//   the token store, so a key rotation or a new resource keeps every client, grant and opaque token, as a
//   real authorization server would; it answers once the new configuration serves.
// Everything else (discovery, JWKS, token, registration, introspection, revocation) is oidc-provider's own.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider, { errors } from 'oidc-provider';

const configPath = process.argv[2];
if (!configPath) {
  console.error('usage: node provider.mjs CONFIG.json');
  process.exit(2);
}

const RELOAD_PATH = '/__test__/reload';
// OpenID scopes oidc-provider knows as such; the resources' scopes are added to them (see build()).
const OIDC_SCOPES = ['openid', 'offline_access', 'profile', 'email'];
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

// --- The token store --------------------------------------------------------------------------------
// oidc-provider's bundled memory adapter is an LRU of about a thousand entries; a long test session
// would see tokens and registered clients vanish. This one keeps everything until it expires, and it is
// shared by every Provider this process builds, which is what lets a reload keep the state.

const store = new Map(); // key -> { payload, expiresAt }
const grantMembers = new Map(); // grantId -> Set of keys

function stored(key) {
  const entry = store.get(key);
  if (entry === undefined) return undefined;
  if (entry.expiresAt !== undefined && entry.expiresAt <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry.payload;
}

class TestAdapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const key = this.key(id);
    const expiresAt = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : undefined;
    store.set(key, { payload, expiresAt });
    if (payload.grantId) {
      if (!grantMembers.has(payload.grantId)) grantMembers.set(payload.grantId, new Set());
      grantMembers.get(payload.grantId).add(key);
    }
    if (this.model === 'Session' && payload.uid) store.set(`sessionUid:${payload.uid}`, { payload: id, expiresAt });
    if (payload.userCode) store.set(`userCode:${payload.userCode}`, { payload: id, expiresAt });
  }

  async find(id) {
    return stored(this.key(id));
  }

  async findByUid(uid) {
    const id = stored(`sessionUid:${uid}`);
    return id === undefined ? undefined : this.find(id);
  }

  async findByUserCode(userCode) {
    const id = stored(`userCode:${userCode}`);
    return id === undefined ? undefined : this.find(id);
  }

  async consume(id) {
    const payload = stored(this.key(id));
    if (payload) payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId(grantId) {
    for (const key of grantMembers.get(grantId) ?? []) store.delete(key);
    grantMembers.delete(grantId);
  }
}

// --- The configuration ------------------------------------------------------------------------------

function readConfig() {
  return JSON.parse(readFileSync(configPath, 'utf8'));
}

// What getResourceServerInfo answers for a configured resource: its scopes, the resource itself as the
// audience (RFC 8707), and the token format (a JWT signed with the first key of the alg, or opaque).
function resourceServerInfo(spec, audience) {
  const info = {
    scope: spec.scopes.join(' '),
    audience,
    accessTokenTTL: spec.accessTokenTTL,
    accessTokenFormat: spec.accessTokenFormat,
  };
  if (spec.accessTokenFormat === 'jwt') info.jwt = { sign: { alg: spec.alg } };
  return info;
}

// A resource on loopback (http://127.0.0.1:<any port>/...): tests start their MCP servers on free ports,
// so one provider for the whole session cannot know the exact URIs in advance.
function isLoopbackResource(indicator) {
  const url = URL.parse(indicator);
  return url !== null && url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname) && url.hash === '';
}

// The spec of a resource: configured by its exact URI, or the loopback one; undefined if unknown.
function resourceSpec(config, indicator) {
  if (Object.hasOwn(config.resources ?? {}, indicator)) return config.resources[indicator];
  if (config.loopbackResource && isLoopbackResource(indicator)) return config.loopbackResource;
  return undefined;
}

function build(config, cookieKeys) {
  const issuer = `http://127.0.0.1:${config.port}`;
  const resources = config.resources ?? {};
  const resourceScopes = [
    ...Object.values(resources),
    ...(config.loopbackResource ? [config.loopbackResource] : []),
  ].flatMap((spec) => spec.scopes);
  const introspectors = new Set(config.introspectors ?? []);

  const privileged = (client, token) => token.clientId === client.clientId || introspectors.has(client.clientId);

  return new Provider(issuer, {
    adapter: TestAdapter,
    clients: config.clients,
    jwks: config.jwks,
    cookies: { keys: cookieKeys },
    // Resource scopes are listed too, so that Dynamic Client Registration accepts a client whose `scope`
    // metadata names them (the MCP SDKs register the scopes they will ask for) and discovery advertises them.
    scopes: [...new Set([...OIDC_SCOPES, ...resourceScopes])],
    claims: { openid: ['sub'], profile: ['name'], email: ['email', 'email_verified'] },
    async findAccount(_ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, name: sub, email: `${sub}@example.test`, email_verified: true };
        },
      };
    },
    // OAuth 2.1: PKCE for every client, confidential ones too (oidc-provider only requires it of public ones).
    pkce: { required: () => true },
    // A refresh token for every client allowed the refresh_token grant. oidc-provider's default wants the
    // offline_access scope, which it drops (OpenID Core §11) from any request without prompt=consent, so
    // an MCP client asking for offline_access the OAuth way would never get one.
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    // Tokens outlive the (played) browser's login session, as a native client's do.
    expiresWithSession: async () => false,
    features: {
      devInteractions: { enabled: false }, // the interaction routes below replace its login page
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        // A token's own client may introspect it, and so may the resource servers' clients (config
        // `introspectors`): the default lets any confidential client introspect any token.
        allowedPolicy: async (_ctx, client, token) => privileged(client, token),
      },
      revocation: {
        enabled: true,
        // Likewise: the token's client, or a resource server's client (so a test can revoke any token).
        allowedPolicy: async (_ctx, client, token) => privileged(client, token),
      },
      registration: { enabled: true }, // open Dynamic Client Registration: no initial access token
      resourceIndicators: {
        enabled: true,
        // A request without `resource` gets the configured default one (if any): a client credentials
        // token then still has an audience. With several, the one asked for.
        defaultResource: async (_ctx, _client, oneOf) => oneOf ?? config.defaultResource ?? undefined,
        // The token request may omit `resource`: the one granted at the authorization endpoint is used.
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, indicator) => {
          const spec = resourceSpec(config, indicator);
          if (spec === undefined) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
          return resourceServerInfo(spec, indicator);
        },
      },
    },
    // OAuth 2.1: the authorization code flow only (no implicit, no hybrid).
    responseTypes: ['code'],
    clientBasedCORS: () => true,
    // Errors as JSON rather than oidc-provider's HTML page: a test reads what went wrong.
    async renderError(ctx, out) {
      ctx.type = 'json';
      ctx.body = out;
    },
    ttl: {
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600,
      ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600,
      AuthorizationCode: 60,
      IdToken: 3600,
      RefreshToken: 24 * 3600,
      Interaction: 600,
      Session: 24 * 3600,
      Grant: 24 * 3600,
    },
    interactions: {
      async url(_ctx, interaction) {
        return `/interaction/${interaction.uid}`;
      },
    },
  });
}

// --- Interactions without a human -------------------------------------------------------------------

// GET /interaction/<uid>: the login prompt signs in the login_hint's account (or the default one); the
// consent prompt grants every scope, claim and resource asked for. Each answers with a redirect back to
// the authorization endpoint, which redirects to the client (or to the next prompt).
async function interaction(provider, defaultAccount, ctx) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: params.login_hint || defaultAccount } };
  } else if (prompt.name === 'consent') {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const missing = prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  } else {
    result = { error: 'access_denied', error_description: `unexpected prompt ${prompt.name}` };
  }
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
}

// GET /auth without `scope`: RFC 6749 §3.3 lets the server apply a default, and oidc-provider refuses a
// request that ends with no scope granted (access_denied). An MCP client omits `scope` when neither the
// challenge nor the resource metadata names any, so the default is every scope of the requested resource
// (or of the default resource). Requests with a `scope` are left alone.
function defaultScope(config, ctx) {
  if (ctx.method !== 'GET' || ctx.path !== '/auth' || ctx.query.scope !== undefined) return;
  const requested = ctx.query.resource ?? config.defaultResource;
  const spec = typeof requested === 'string' ? resourceSpec(config, requested) : undefined;
  if (spec !== undefined) ctx.query = { ...ctx.query, scope: spec.scopes.join(' ') };
}

// --- The server --------------------------------------------------------------------------------------

// Cookie keys live as long as the process: a reload keeps the browser sessions of running flows valid.
const cookieKeys = [randomBytes(32).toString('base64url')];
let current;
let generation = 0;

function load() {
  const config = readConfig();
  const provider = build(config, cookieKeys);
  const defaultAccount = config.defaultAccount ?? 'alice';
  provider.use(async (ctx, next) => {
    const match = /^\/interaction\/([^/]+)$/.exec(ctx.path);
    if (match && ctx.method === 'GET') {
      try {
        await interaction(provider, defaultAccount, ctx);
      } catch (error) {
        // E.g. no interaction cookie (not the browser that started the flow), or an expired interaction.
        ctx.status = error.statusCode ?? 500;
        ctx.body = {
          error: error.error ?? 'server_error',
          error_description: error.error_description ?? String(error),
        };
      }
      return;
    }
    defaultScope(config, ctx);
    await next();
  });
  provider.on('server_error', (_ctx, error) => console.error('server_error', error));
  generation += 1;
  current = { provider, handler: provider.callback(), config };
  return current;
}

function kids() {
  return current.config.jwks.keys.map((key) => key.kid);
}

const { port } = load().config;
const server = createServer((req, res) => {
  // One line a request, for the test's failure report (what did the client ask, what did it get).
  const { method, url } = req; // before a middleware rewrites it (defaultScope)
  res.on('finish', () => console.log(`${method} ${url} ${res.statusCode}`));
  if (req.method === 'POST' && req.url === RELOAD_PATH) {
    try {
      if (readConfig().port !== port) throw new Error('the port cannot change on reload');
      load();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ generation, kids: kids() }));
    } catch (error) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: String(error?.stack ?? error) }));
    }
    return;
  }
  current.handler(req, res);
});

server.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on http://127.0.0.1:${port} (kids ${kids().join(', ')})`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
}
