// api.js — talking to gpt2d: authorised fetches, OpenAI error objects, and
// the server-sent events of a streamed completion.
//
// EventSource cannot POST, so a stream is read with fetch + ReadableStream and
// parsed here.  Aborting the fetch closes the connection, which is how the
// server learns to cancel the request and free its KV slot.

/** An error the server (or the network) reported, ready to show a person. */
export class ApiError extends Error {
  constructor(message, { status = 0, type = "", param = null, code = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = type;
    this.param = param;
    this.code = code;
  }
}

function headers(apiKey, json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

// The body of a failed response as an ApiError: the OpenAI error object when
// the server sent one, otherwise whatever text came back.
async function errorFrom(resp) {
  const text = await resp.text().catch(() => "");
  const retry = resp.headers.get("Retry-After");
  try {
    const e = JSON.parse(text).error;
    if (e && typeof e.message === "string") {
      const message = retry ? `${e.message} (try again in ${retry} s)` : e.message;
      return new ApiError(message, { status: resp.status, type: e.type, param: e.param, code: e.code });
    }
  } catch {
    /* not JSON: fall through */
  }
  const detail = text.trim().slice(0, 300) || resp.statusText || "no details";
  return new ApiError(detail, { status: resp.status, type: "http_error" });
}

async function send(url, init) {
  try {
    return await fetch(url, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError("Could not reach the gpt2d server. Is it running?", { type: "network_error" });
  }
}

/** GET a text endpoint (/metrics). */
export async function getText(url, apiKey) {
  const resp = await send(url, { headers: headers(apiKey, false), cache: "no-store" });
  if (!resp.ok) throw await errorFrom(resp);
  return resp.text();
}

/** GET a JSON endpoint. */
export async function getJSON(url, apiKey) {
  const resp = await send(url, { headers: headers(apiKey, false), cache: "no-store" });
  if (!resp.ok) throw await errorFrom(resp);
  return resp.json();
}

/** POST a JSON body to a JSON endpoint; `signal` may abort it. */
export async function postJSON(url, body, { apiKey, signal } = {}) {
  const resp = await send(url, {
    method: "POST",
    headers: headers(apiKey, true),
    body: JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!resp.ok) throw await errorFrom(resp);
  return resp.json();
}

/** The daemon's readiness: "ready", "loading" (503) or "down". */
export async function health() {
  try {
    const resp = await fetch("health", { cache: "no-store" });
    return resp.ok ? "ready" : resp.status === 503 ? "loading" : "down";
  } catch {
    return "down";
  }
}

// Splits a byte stream into SSE events and yields each event's data field.
async function* sseData(body, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  const onAbort = () => reader.cancel().catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch {
        if (signal?.aborted) break;
        // fetch reports a dropped connection as a bare TypeError
        throw new ApiError("Lost the connection to the server before the completion finished: it may have stopped.", { type: "network_error" });
      }
      const { value, done } = chunk;
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
        const data = event
          .split(/\r?\n/)
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        if (data) yield data;
      }
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.releaseLock();
  }
  if (signal?.aborted) throw new DOMException("stopped", "AbortError");
}

/**
 * POSTs a streamed completion and yields every parsed chunk (including the
 * usage chunk, whose choices are empty).  Ends after `data: [DONE]`.  Throws
 * ApiError for an HTTP error or an error event inside the stream, and
 * AbortError when `signal` aborts.
 */
export async function* streamCompletion(body, { apiKey, signal }) {
  const resp = await send("v1/completions", {
    method: "POST",
    headers: headers(apiKey, true),
    body: JSON.stringify({ ...body, stream: true }),
    signal,
    cache: "no-store",
  });
  if (!resp.ok) throw await errorFrom(resp);
  if (!resp.body) throw new ApiError("This browser cannot read streamed responses.", { type: "client_error" });
  for await (const data of sseData(resp.body, signal)) {
    if (data === "[DONE]") return;
    let chunk;
    try {
      chunk = JSON.parse(data);
    } catch {
      throw new ApiError(`The server sent an event that is not JSON: ${data.slice(0, 120)}`, { type: "protocol_error" });
    }
    if (chunk.error) {
      const e = chunk.error;
      throw new ApiError(e.message || "the server reported an error", { type: e.type, param: e.param, code: e.code });
    }
    yield chunk;
  }
  throw new ApiError("The stream ended before [DONE]: the server may have stopped.", { type: "protocol_error" });
}
