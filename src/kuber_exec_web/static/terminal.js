// The browser terminal's page: xterm.js on a WebSocket to kuber_exec_web (kuber-exec.terminal.v1).
//
// Output arrives as binary messages and goes to xterm.js as bytes (term.write(Uint8Array)),
// whose UTF-8 decoder keeps state across writes: a character split across messages stays whole.
// Once xterm.js has parsed output, the page acknowledges it; the app sends no more than its flow
// window ahead of that, so a flood (`yes`) is paced by the screen, not buffered in memory.
// Keystrokes go out as UTF-8 bytes; the terminal follows the window (fit addon -> "resize").
// Nothing animates while idle (a steady cursor), so an echo is drawn in the next frame.
// Both sides ping every data-ping-interval seconds (the app sets it, at most 30).
// The terminal is a shared session: after a drop the page reconnects by itself (backoff 250 ms
// to 5 s) with its viewer secret and the offset of the next byte it expects, and the app sends
// from there: nothing lost, nothing twice. The owner can share a link (peer or observer) and
// end the session; the others see who is watching and the owner's terminal size.
(() => {
  "use strict";

  const body = document.body;
  const statusLine = document.getElementById("status");
  const pingInterval = Number(body.dataset.pingInterval || "25") * 1000;
  const ACK_BATCH = 64 * 1024;

  // The token: from "#token=..." (a fragment never reaches the server or its logs), kept for
  // this tab only, and taken out of the address bar at once.
  const fragment = new URLSearchParams(location.hash.slice(1));
  let token = sessionStorage.getItem("kuber-exec-token");
  if (fragment.has("token")) {
    token = fragment.get("token");
    sessionStorage.setItem("kuber-exec-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }

  const term = new Terminal({
    // A steady cursor: xterm.js blinks it with an endless CSS animation that restarts each time
    // the cursor moves, and in Chromium that holds the next frame back a whole frame interval,
    // so every echoed keystroke reached the screen about 17 ms late (make bench-browser).
    cursorBlink: false,
    theme: { background: "#1e1e1e" },
    lineHeight: 1.15, // Room below the baseline: underscores are not clipped.
    fontFamily: '"DejaVu Sans Mono", "Liberation Mono", monospace',
    fontSize: 14,
    scrollback: 5000,
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  fit.fit();

  const state = {
    open: false,
    ended: false,
    openMs: null,
    pod: null,
    exitCode: null,
    error: null,
    lastHeard: performance.now(),
    bytesReceived: 0,
    terminal: null,
    session: null, // The shared session's id, its viewer secret, public id and role.
    key: null,
    viewerId: null,
    role: null,
    received: 0,
    parsed: 0,
    reconnecting: false,
    reconnects: 0,
    lastReattachMs: null,
    missed: 0,
    viewers: [],
    shareLinks: {},
    refusals: [],
    bytesSent: 0,
    crc: 0, // CRC-32 of the whole output stream received: compared with the recording's.
    transfers: [], // Each finished upload or download: { kind, name, ok, status, result }.
    screen() {
      const buffer = term.buffer.active;
      const lines = [];
      for (let row = 0; row < buffer.length; row += 1) {
        lines.push(buffer.getLine(row).translateToString(true));
      }
      return lines.join("\n").replace(/\n+$/, "");
    },
    size() {
      return { columns: term.cols, rows: term.rows };
    },
  };
  window.kuberExec = state; // For the tests, and the curious.

  const CRC_TABLE = new Int32Array(256).map((_, n) => {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c;
  });
  function crc32(bytes, previous) {
    let c = ~previous;
    for (let i = 0; i < bytes.length; i += 1) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return ~c >>> 0;
  }

  function setStatus(text, kind) {
    statusLine.textContent = text;
    statusLine.className = kind;
    body.dataset.state = kind; // "open", "reconnecting", "ended" or "failed"
  }
  function showSize() {
    body.dataset.size = `${term.cols}x${term.rows}`;
  }
  showSize();

  const params = new URLSearchParams(location.search);
  // A share link: "?session=ID#join=TOKEN" (the token in the fragment, like the bearer's).
  let joinToken = fragment.get("join");
  if (joinToken) history.replaceState(null, "", location.pathname + location.search);
  if (params.get("session")) state.session = params.get("session");
  const encoder = new TextEncoder();
  let socket = null;
  let started = performance.now();
  let attempt = 0;
  let heartbeat = null;

  function socketUrl() {
    const url = new URL("ws", document.baseURI);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    if (state.session) {
      url.searchParams.set("session", state.session);
      if (state.key) url.searchParams.set("resume", String(state.received));
    } else {
      const deployment = params.get("deployment") || body.dataset.deployment;
      if (deployment) url.searchParams.set("deployment", deployment);
      if (params.get("container")) url.searchParams.set("container", params.get("container"));
    }
    url.searchParams.set("cols", String(term.cols));
    url.searchParams.set("rows", String(term.rows));
    return url;
  }
  function socketProtocols() {
    const protocols = [body.dataset.protocol];
    if (token) protocols.push("bearer." + token);
    // Secrets go in subprotocols, never in the URL (access logs).
    if (state.key) protocols.push("viewer." + state.key);
    else if (joinToken) protocols.push("join." + joinToken);
    return protocols;
  }

  function sendJson(value) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(value));
  }
  function sendBytes(bytes) {
    if (state.role === "observer") return; // Read-only: the app would refuse it.
    if (socket && socket.readyState === WebSocket.OPEN && !state.ended) {
      socket.send(bytes);
      state.bytesSent += bytes.length;
    }
  }

  // Offsets in the session's output stream: received (the next byte to come, where a
  // reconnect resumes) and parsed (shown by xterm.js, acknowledged to the app).
  let unacknowledged = 0;
  let writing = 0;
  function written(size) {
    writing -= 1;
    unacknowledged += size;
    state.parsed += size;
    if (unacknowledged >= ACK_BATCH || writing === 0) {
      sendJson({ type: "ack", bytes: unacknowledged, offset: state.parsed });
      unacknowledged = 0;
    }
  }

  function end(text, kind, note) {
    if (state.ended) return;
    state.ended = true;
    setStatus(text, kind);
    showOwnerControls();
    term.write(note);
  }

  function showViewers() {
    const line = document.getElementById("viewers");
    if (!line) return;
    const others = state.viewers.filter((v) => v.id !== state.viewerId);
    const names = state.viewers.map((v) => {
      const who = v.name || v.id;
      const you = v.id === state.viewerId ? " (you)" : "";
      const away = v.attached ? "" : " (away)";
      return `${v.role} ${who}${you}${away}`;
    });
    line.textContent = names.length ? "watching: " + names.join(" · ") : "";
    body.dataset.viewers = String(state.viewers.filter((v) => v.attached).length);
    body.dataset.others = String(others.length);
  }
  function followSize(size) {
    // With several viewers the terminal follows the owner's window.
    if (!size || state.role === "owner") return;
    if (term.cols !== size.columns || term.rows !== size.rows) term.resize(size.columns, size.rows);
  }
  function showOwnerControls() {
    const controls = document.getElementById("owner");
    if (controls) controls.hidden = state.role !== "owner" || state.ended;
    body.dataset.role = state.role || "";
  }

  function reconnectLater() {
    attempt += 1;
    state.reconnecting = true;
    // Exponential backoff from 250 ms to 5 s, with jitter: a fleet of pages that lost the
    // same proxy does not come back in step.
    const delay = Math.min(5000, 250 * 2 ** (attempt - 1)) * (0.8 + 0.4 * Math.random());
    setStatus(`reconnecting… (attempt ${attempt})`, "reconnecting");
    setTimeout(connect, delay);
  }

  function onMessage(event) {
    state.lastHeard = performance.now();
    if (typeof event.data !== "string") {
      const bytes = new Uint8Array(event.data);
      state.bytesReceived += bytes.length;
      state.received += bytes.length;
      state.crc = crc32(bytes, state.crc);
      writing += 1;
      term.write(bytes, () => written(bytes.length));
      return;
    }
    const message = JSON.parse(event.data);
    switch (message.type) {
      case "open": {
        const resumed = state.key !== null;
        state.open = true;
        state.reconnecting = false;
        attempt = 0;
        if (resumed) {
          state.reconnects += 1;
          state.lastReattachMs = performance.now() - started;
        } else {
          state.openMs = performance.now() - started;
          state.received = state.parsed = message.offset;
        }
        state.pod = message.pod;
        state.terminal = message.terminal || null;
        state.session = message.session;
        state.key = message.key;
        state.viewerId = message.viewer;
        state.role = message.role;
        joinToken = null;
        followSize(message.size);
        showOwnerControls();
        const how = resumed ? "reconnected" : `connected in ${Math.round(state.openMs)} ms`;
        setStatus(`${message.pod} · ${message.container} · ${message.role} · ${how}`, "open");
        term.focus();
        break;
      }
      case "viewers":
        state.viewers = message.viewers;
        showViewers();
        followSize(message.size);
        break;
      case "missed":
        state.missed += message.bytes;
        term.write(`\r\n\x1b[33m[${message.bytes} bytes of output missed]\x1b[0m\r\n`);
        break;
      case "share": {
        const link = new URL(location.pathname, location.origin);
        link.searchParams.set("session", message.session);
        link.hash = "join=" + message.token;
        state.shareLinks[message.role] = link.toString();
        const field = document.getElementById("share-link");
        if (field) {
          field.value = link.toString();
          field.hidden = false;
          field.select();
        }
        break;
      }
      case "refused":
        state.refusals.push(message);
        break;
      case "exit":
        state.exitCode = message.code;
        // Say it was shown: until then the app keeps our place, and a page whose connection
        // broke just now is sent the end again when it comes back.
        sendJson({ type: "end-shown" });
        end(
          `process exited with code ${message.code}`,
          message.code === 0 ? "ended" : "failed",
          `\r\n\x1b[1m[process exited with code ${message.code}]\x1b[0m\r\n`,
        );
        break;
      case "error":
        state.error = { code: message.code, message: message.message };
        sendJson({ type: "end-shown" });
        end(
          `${message.code}: ${message.message}`,
          "failed",
          `\r\n\x1b[31m[${message.code}: ${message.message}]\x1b[0m\r\n`,
        );
        break;
      case "ping":
        sendJson({ type: "pong" });
        break;
      default:
        break;
    }
  }

  function connect() {
    if (state.ended) return;
    started = performance.now();
    const current = new WebSocket(socketUrl(), socketProtocols());
    current.binaryType = "arraybuffer";
    socket = current;
    current.addEventListener("message", (event) => {
      if (current === socket) onMessage(event);
    });
    current.addEventListener("close", (event) => {
      if (current !== socket || state.ended) return;
      state.open = false;
      // Refused (4403) or replaced by another tab of this viewer (4409): no coming back.
      // Anything else, once the session is known, is a drop: come back where we were.
      if (state.key && event.code !== 4403 && event.code !== 4409) {
        reconnectLater();
        return;
      }
      const reason = event.reason ? `: ${event.reason}` : "";
      end(
        `connection closed (${event.code}${reason})`,
        "failed",
        `\r\n\x1b[31m[connection closed (${event.code}${reason})]\x1b[0m\r\n`,
      );
    });
    state.lastHeard = performance.now();
    clearInterval(heartbeat);
    heartbeat = setInterval(() => {
      if (current !== socket || current.readyState !== WebSocket.OPEN) return;
      if (performance.now() - state.lastHeard > 3 * pingInterval) {
        current.close(4408, "no ping from the app");
        return;
      }
      sendJson({ type: "ping" });
    }, pingInterval);
  }
  connect();

  const ownerControls = document.getElementById("owner");
  if (ownerControls) {
    for (const button of ownerControls.querySelectorAll("button[data-share]")) {
      button.addEventListener("click", () => sendJson({ type: "share", role: button.dataset.share }));
    }
    document.getElementById("end-session").addEventListener("click", () => sendJson({ type: "end" }));
  }

  term.onData((data) => sendBytes(encoder.encode(data)));
  term.onBinary((data) => sendBytes(Uint8Array.from(data, (char) => char.charCodeAt(0) & 0xff)));
  term.onResize(({ cols, rows }) => {
    showSize();
    if (state.role === "owner" || state.role === null) sendJson({ type: "resize", columns: cols, rows });
  });
  // Only the owner's window sizes the terminal; the others show the owner's size.
  const refit = () => {
    if (state.role === "owner" || state.role === null) fit.fit();
  };
  new ResizeObserver(refit).observe(document.getElementById("terminal"));
  window.addEventListener("resize", refit);

  // File transfer (the app's /files route, when it serves one): drop files on the terminal to
  // upload them into the shell's working directory; the download field fetches a path. The
  // token goes in an Authorization header, as for the WebSocket it goes in a subprotocol.
  const transferLine = document.getElementById("transfer");
  function filesUrl(query) {
    const target = new URL("files", document.baseURI);
    target.searchParams.set("terminal", state.terminal);
    for (const [key, value] of Object.entries(query)) target.searchParams.set(key, value);
    return target;
  }
  function authHeaders() {
    return token ? { Authorization: "Bearer " + token } : {};
  }
  function report(text, kind) {
    if (transferLine) {
      transferLine.textContent = text;
      transferLine.className = kind;
    }
  }
  async function failure(response) {
    try {
      const answer = await response.json();
      return `${answer.code}: ${answer.message}`;
    } catch (error) {
      return `HTTP ${response.status}`;
    }
  }
  async function upload(file) {
    report(`uploading ${file.name}…`, "busy");
    let record;
    try {
      const response = await fetch(filesUrl({ name: file.name }), {
        method: "POST",
        headers: { ...authHeaders(), "Content-Type": "application/octet-stream" },
        body: file,
      });
      if (response.ok) {
        const result = await response.json();
        record = { kind: "upload", name: file.name, ok: true, status: response.status, result };
        report(`uploaded ${file.name} to ${result.path} (${result.size} bytes)`, "open");
      } else {
        const text = await failure(response);
        record = { kind: "upload", name: file.name, ok: false, status: response.status, result: text };
        report(`upload of ${file.name} failed: ${text}`, "failed");
      }
    } catch (error) {
      record = { kind: "upload", name: file.name, ok: false, status: 0, result: String(error) };
      report(`upload of ${file.name} failed: ${error}`, "failed");
    }
    state.transfers.push(record);
  }
  async function download(path) {
    const name = path.split("/").pop() || "download";
    if (!token) {
      location.assign(filesUrl({ path })); // Streamed to disk by the browser itself.
      return;
    }
    report(`downloading ${path}…`, "busy");
    const response = await fetch(filesUrl({ path }), { headers: authHeaders() });
    if (!response.ok) {
      const text = await failure(response);
      state.transfers.push({ kind: "download", name, ok: false, status: response.status, result: text });
      report(`download of ${path} failed: ${text}`, "failed");
      return;
    }
    const blob = await response.blob();
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    state.transfers.push({ kind: "download", name, ok: true, status: response.status, result: blob.size });
    report(`downloaded ${path} (${blob.size} bytes)`, "open");
  }
  if (transferLine) {
    const area = document.getElementById("terminal");
    area.addEventListener("dragover", (event) => {
      event.preventDefault();
      event.dataTransfer.dropEffect = state.terminal && !state.ended ? "copy" : "none";
    });
    area.addEventListener("drop", async (event) => {
      event.preventDefault();
      if (!state.terminal || state.ended) {
        report("no terminal to upload to", "failed");
        return;
      }
      for (const file of event.dataTransfer.files) await upload(file);
      term.focus();
    });
    document.getElementById("download").addEventListener("submit", (event) => {
      event.preventDefault();
      const path = document.getElementById("download-path").value.trim();
      if (path && state.terminal) download(path);
    });
  }

})();
