// The browser benchmark's probe (benchmarks/browser_keystroke.py): added to the terminal's page
// before its own scripts run (Playwright's add_init_script), so it sees every keydown, every
// WebSocket send and message, and every animation frame.
//
// "On screen" is the same rule for both rows: a DOM mutation that shows the expected text is on
// screen once the frame that includes it has been produced, i.e. at the first task after that
// frame's rendering steps. A mutation made outside a frame (the baseline's input handler) waits
// for the next frame (requestAnimationFrame, then a task); one made inside a frame (xterm.js's DOM
// renderer draws from requestAnimationFrame) is in that very frame (a task posted now runs after
// it). Times are performance.now() milliseconds; the keydown's is its event.timeStamp.
(() => {
  "use strict";

  const channel = new MessageChannel();
  const afterFrame = [];
  channel.port1.onmessage = () => {
    rendering = false;
    const now = performance.now();
    for (const resolve of afterFrame.splice(0)) resolve(now);
  };
  let rendering = false;
  function nextTask() {
    return new Promise((resolve) => {
      afterFrame.push(resolve);
      channel.port2.postMessage(null);
    });
  }
  // Every requestAnimationFrame callback (xterm.js's included) marks "inside a frame" until the
  // first task after it.
  const raf = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) =>
    raf((stamp) => {
      if (!rendering) {
        rendering = true;
        channel.port2.postMessage(null);
      }
      callback(stamp);
    });
  function onScreen() {
    if (rendering) return nextTask();
    return new Promise((resolve) => raf(() => nextTask().then(resolve)));
  }

  const probe = {
    armed: null,
    sends: [],
    messages: [],
    // Arm for one keystroke: `check()` says whether the screen shows it (run on every mutation
    // under `root`). Resolves with the keystroke's times.
    arm(root, check) {
      const armed = { keydown: null, send: null, message: null, mutation: null };
      probe.armed = armed;
      return new Promise((resolve) => {
        const done = () => {
          armed.mutation = performance.now();
          onScreen().then((painted) => {
            probe.armed = null;
            resolve({ ...armed, painted });
          });
        };
        if (check()) {
          done(); // Already shown (e.g. a prompt waited for after nothing was typed).
          return;
        }
        const observer = new MutationObserver(() => {
          if (armed.mutation !== null || !check()) return;
          observer.disconnect();
          done();
        });
        observer.observe(root, { childList: true, subtree: true, characterData: true });
      });
    },
  };
  window.addEventListener(
    "keydown",
    (event) => {
      if (probe.armed && probe.armed.keydown === null) probe.armed.keydown = event.timeStamp;
    },
    true,
  );

  const Native = window.WebSocket;
  const send = Native.prototype.send;
  Native.prototype.send = function (data) {
    if (probe.armed && probe.armed.send === null && typeof data !== "string") {
      probe.armed.send = performance.now();
    }
    return send.call(this, data);
  };
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      // Added before the page's own listener, so it runs first.
      this.addEventListener("message", (event) => {
        const armed = probe.armed;
        if (armed && armed.send !== null && armed.message === null) {
          if (typeof event.data !== "string") armed.message = performance.now();
        }
      });
    }
  };

  // The baseline: a plain input whose input event writes its value into a DOM node.
  function baseline() {
    const box = document.createElement("div");
    box.id = "bench-baseline";
    box.style.cssText = "position:fixed;right:0;bottom:0;width:320px;background:#fff;color:#000";
    const input = document.createElement("input");
    input.id = "bench-input";
    input.autocomplete = "off";
    const echo = document.createElement("div");
    echo.id = "bench-echo";
    input.addEventListener("input", () => {
      echo.textContent = input.value;
    });
    box.append(input, echo);
    document.body.append(box);
  }
  if (document.body) baseline();
  else document.addEventListener("DOMContentLoaded", baseline);

  // The terminal's cursor row as text (the DOM renderer marks the cursor's cell).
  probe.cursorRow = () => {
    const cursor = document.querySelector(".xterm-rows .xterm-cursor");
    let row = cursor;
    while (row && row.parentElement && !row.parentElement.classList.contains("xterm-rows")) {
      row = row.parentElement;
    }
    return row ? row.textContent.replace(/\u00a0/g, " ").trimEnd() : "";
  };
  probe.terminalKey = (expected) =>
    probe.arm(document.querySelector(".xterm-rows"), () => probe.cursorRow() === expected);
  probe.baselineKey = (expected) => {
    const echo = document.getElementById("bench-echo");
    return probe.arm(echo, () => echo.textContent === expected);
  };
  probe.screenShows = (text) => {
    const rows = document.querySelector(".xterm-rows");
    const shows = () => rows.textContent.replace(/\u00a0/g, " ").includes(text);
    return probe.arm(rows, shows);
  };
  window.kuberExecProbe = probe;
})();
