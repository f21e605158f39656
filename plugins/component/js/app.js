// A wasi:http/proxy component in JavaScript (ComponentizeJS), exporting
// wasi:http/incoming-handler by hand. Its paths are those of
// plugins/component/rust/http_handler, so one set of tests drives both.
import { handle as send } from 'wasi:http/outgoing-handler@0.2.12';
import {
  Fields,
  IncomingBody,
  OutgoingBody,
  OutgoingRequest,
  OutgoingResponse,
  ResponseOutparam,
} from 'wasi:http/types@0.2.12';
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

// OutputStream.blockingWriteAndFlush takes at most 4096 bytes per call.
const WRITE_CHUNK = 4096;
const READ_CHUNK = 64n * 1024n;
const encoder = new TextEncoder();

// Counts GET /state calls; a fresh instance per request keeps it at 1.
let state = 0;

// A failed result throws; its error value is the payload.
function errorValue(e) {
  return e && typeof e === 'object' && 'payload' in e ? e.payload : e;
}

function start(responseOut, status) {
  const response = new OutgoingResponse(
    Fields.fromList([['content-type', encoder.encode('text/plain')]]),
  );
  response.setStatusCode(status);
  const body = response.body();
  ResponseOutparam.set(responseOut, { tag: 'ok', val: response });
  return body;
}

function write(stream, bytes) {
  for (let i = 0; i < bytes.length; i += WRITE_CHUNK) {
    stream.blockingWriteAndFlush(bytes.subarray(i, i + WRITE_CHUNK));
  }
}

function respond(responseOut, status, data) {
  const body = start(responseOut, status);
  const stream = body.write();
  write(stream, typeof data === 'string' ? encoder.encode(data) : data);
  stream[Symbol.dispose]();
  OutgoingBody.finish(body, undefined);
}

// Copies an incoming body into stream chunk by chunk, then finishes it.
function copy(incoming, stream) {
  const source = incoming.stream();
  for (;;) {
    let chunk;
    try {
      chunk = source.blockingRead(READ_CHUNK);
    } catch (e) {
      if (errorValue(e)?.tag === 'closed') break;
      throw e;
    }
    write(stream, chunk);
  }
  source[Symbol.dispose]();
  IncomingBody.finish(incoming);
}

function echo(request, responseOut) {
  const incoming = request.consume();
  const body = start(responseOut, 200);
  const stream = body.write();
  copy(incoming, stream);
  stream[Symbol.dispose]();
  OutgoingBody.finish(body, undefined);
}

function fetchUrl(url, responseOut) {
  const m = /^(https?):\/\/([^/?#]+)([^#]*)/.exec(url ?? '');
  if (!m) return respond(responseOut, 400, 'bad url');
  const request = new OutgoingRequest(new Fields());
  request.setMethod({ tag: 'get' });
  request.setScheme({ tag: m[1] === 'http' ? 'HTTP' : 'HTTPS' });
  request.setAuthority(m[2]);
  request.setPathWithQuery(m[3].startsWith('/') ? m[3] : '/' + m[3]);
  let future;
  try {
    future = send(request, undefined);
  } catch (e) {
    return respond(responseOut, 502, `outgoing error: ${JSON.stringify(errorValue(e))}`);
  }
  future.subscribe().block();
  // option<result<result<incoming-response, error-code>>>: ready, got once.
  const result = future.get();
  if (result.tag !== 'ok') throw new Error('response taken twice');
  if (result.val.tag === 'err') {
    return respond(responseOut, 502, `outgoing error: ${JSON.stringify(result.val.val)}`);
  }
  const upstream = result.val.val;
  const incoming = upstream.consume();
  const body = start(responseOut, 200);
  const stream = body.write();
  write(stream, encoder.encode(`upstream ${upstream.status()}\n`));
  copy(incoming, stream);
  stream[Symbol.dispose]();
  OutgoingBody.finish(body, undefined);
}

// Reads a file through the preopen whose path holds it.
function readFile(path) {
  for (const [dir, name] of getDirectories()) {
    const prefix = name.endsWith('/') ? name : name + '/';
    let rel;
    if (path === name) rel = '.';
    else if (path.startsWith(prefix)) rel = path.slice(prefix.length);
    else if (!path.startsWith('/') && (name === '.' || name === './')) rel = path;
    else continue;
    const file = dir.openAt({}, rel, {}, { read: true });
    const chunks = [];
    let offset = 0n;
    for (;;) {
      const [chunk, end] = file.read(READ_CHUNK, offset);
      chunks.push(chunk);
      offset += BigInt(chunk.length);
      if (end || chunk.length === 0) break;
    }
    const out = new Uint8Array(Number(offset));
    let at = 0;
    for (const c of chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
  throw { payload: 'no-entry' };
}

export const incomingHandler = {
  handle(request, responseOut) {
    const method = request.method().tag;
    const url = new URL(request.pathWithQuery() ?? '/', 'http://localhost');
    const get = method === 'get';
    const path = url.pathname;
    if (get && path === '/') {
      respond(responseOut, 200, 'hello from js component');
    } else if (method === 'post' && path === '/echo') {
      echo(request, responseOut);
    } else if (get && path === '/fetch') {
      fetchUrl(url.searchParams.get('url'), responseOut);
    } else if (get && path === '/trap') {
      throw new Error('trap requested');
    } else if (get && path === '/loop') {
      let n = 0;
      for (;;) n++;
    } else if (get && path === '/grow') {
      const keep = [];
      for (;;) keep.push(new Uint8Array(1 << 20).fill(1));
    } else if (get && path === '/state') {
      state += 1;
      respond(responseOut, 200, String(state));
    } else if (get && path === '/env') {
      const name = url.searchParams.get('name');
      const entry = getEnvironment().find(([k]) => k === name);
      if (entry) respond(responseOut, 200, entry[1]);
      else respond(responseOut, 404, 'not set');
    } else if (get && path === '/file') {
      let data;
      try {
        data = readFile(url.searchParams.get('path') ?? '');
      } catch (e) {
        const code = errorValue(e);
        return respond(responseOut, code === 'no-entry' ? 404 : 500, `${code}`);
      }
      respond(responseOut, 200, data);
    } else {
      respond(responseOut, 404, 'not found');
    }
  },
};
