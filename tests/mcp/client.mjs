// A driver for the official TypeScript MCP client, for tests/mcp_test.go.
// It reads one JSON command per line on stdin, runs it with the client and
// writes one JSON answer per line on stdout, so the Go test decides each
// step and checks the server (and /proc) between steps.
//
// Commands:
//   {"op":"connect","session":"a","url":"…","headers":{…},"roots":["file:///…"]}
//       (roots: offered to the server, which may ask for them)
//       → {"sessionId","agentId","serverName","instructions","protocolVersion"}
//   {"op":"listTools","session":"a"} → {"tools":[{name,description,inputSchema,annotations}]}
//   {"op":"call","session":"a","name":"bash","arguments":{…},
//    "progress":true,"cancelOn":"text"}
//       → {"result":{content,isError},"progress":[{progress,total,message}]}
//         or, when cancelled once a progress message contained cancelOn,
//         {"cancelled":true,"reason":"…","progress":[…]}
//   {"op":"errors"} → {"errors":["…"]}: what the clients reported through
//       onerror (an answer to a request they cancelled, for one)
//   {"op":"close","session":"a"} → {}
// A failed command answers {"error":"…"}.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const sessions = new Map();
const reported = [];

async function connect(cmd) {
  let agentId = '';
  // Remember the agent the server bound the session to (sent with the
  // initialize response).
  const recordingFetch = async (url, init) => {
    const res = await fetch(url, init);
    const id = res.headers.get('dsh-agent-id');
    if (id) agentId = id;
    return res;
  };
  const transport = new StreamableHTTPClientTransport(new URL(cmd.url), {
    requestInit: { headers: cmd.headers ?? {} },
    fetch: recordingFetch,
  });
  const roots = cmd.roots ?? null;
  const client = new Client(
    { name: 'dshd-mcp-test', version: '1.0.0' },
    roots ? { capabilities: { roots: { listChanged: false } } } : undefined,
  );
  if (roots) {
    client.setRequestHandler(ListRootsRequestSchema, async () => ({
      roots: roots.map((uri) => ({ uri, name: uri })),
    }));
  }
  await client.connect(transport);
  client.onerror = (err) => reported.push(String(err?.message ?? err));
  sessions.set(cmd.session, { client, transport });
  const info = client.getServerVersion();
  return {
    sessionId: transport.sessionId,
    agentId,
    serverName: info?.name,
    instructions: client.getInstructions() ?? '',
    protocolVersion: transport.protocolVersion,
  };
}

function session(cmd) {
  const s = sessions.get(cmd.session);
  if (!s) throw new Error(`no session ${cmd.session}`);
  return s;
}

async function call(cmd) {
  const { client } = session(cmd);
  const progress = [];
  const abort = new AbortController();
  const options = { signal: abort.signal, timeout: 120000 };
  if (cmd.progress) {
    options.onprogress = (p) => {
      progress.push(p);
      if (cmd.cancelOn && progress.map((q) => q.message ?? '').join('').includes(cmd.cancelOn)) {
        abort.abort('cancelled by the test');
      }
    };
  }
  try {
    const result = await client.callTool({ name: cmd.name, arguments: cmd.arguments ?? {} }, undefined, options);
    return { result, progress };
  } catch (err) {
    if (abort.signal.aborted) return { cancelled: true, reason: String(err), progress };
    throw err;
  }
}

async function run(cmd) {
  switch (cmd.op) {
    case 'connect':
      return connect(cmd);
    case 'listTools':
      return session(cmd).client.listTools();
    case 'call':
      return call(cmd);
    case 'errors':
      return { errors: reported };
    case 'close': {
      const s = session(cmd);
      await s.transport.terminateSession();
      await s.client.close();
      sessions.delete(cmd.session);
      return {};
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await run(JSON.parse(line));
  } catch (err) {
    answer = { error: String(err?.stack ?? err) };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
for (const { client } of sessions.values()) await client.close();
