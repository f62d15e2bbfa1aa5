// Talking to the Lestrade API as the signed-in user: the bearer token (a Kubernetes token or
// an API key) lives in sessionStorage, so it is gone when the tab closes.

const KEY = "lestrade.token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value.trim()),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function headers(extra = {}) {
  const t = token.get();
  return t ? { ...extra, Authorization: `Bearer ${t}` } : extra;
}

export async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!response.ok) {
    const detail = typeof data?.detail === "string" ? data.detail
      : Array.isArray(data?.detail) ? data.detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ")
      : `HTTP ${response.status}`;
    throw new ApiError(response.status, detail);
  }
  return data;
}

// Server-sent events over fetch (EventSource cannot send an Authorization header). Calls
// onEvent(name, data) per event; reconnects after a drop, calling onOpen each time so the
// caller can re-read what it may have missed. Returns a function that stops it.
export function subscribe(path, onEvent, onOpen, onState) {
  let stopped = false;
  let controller = null;
  (async () => {
    let delay = 500;
    while (!stopped) {
      controller = new AbortController();
      try {
        const response = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal: controller.signal });
        if (!response.ok) throw new ApiError(response.status, `HTTP ${response.status}`);
        onState?.(true);
        delay = 500;
        onOpen?.();
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let event = { name: "message", data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let newline;
          while ((newline = buffer.indexOf("\n")) >= 0) {
            const line = buffer.slice(0, newline);
            buffer = buffer.slice(newline + 1);
            if (line === "") {
              if (event.data.length) {
                try {
                  onEvent(event.name, JSON.parse(event.data.join("\n")));
                } catch (error) {
                  console.error(`a live update failed: ${error}`);  // the next one may do
                }
              }
              event = { name: "message", data: [] };
            } else if (line.startsWith("event:")) event.name = line.slice(6).trim();
            else if (line.startsWith("data:")) event.data.push(line.slice(5).replace(/^ /, ""));
          }
        }
      } catch (error) {
        if (stopped) return;
        console.warn(`live updates interrupted: ${error}`);
      }
      onState?.(false);
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  })();
  return () => { stopped = true; controller?.abort(); };
}
