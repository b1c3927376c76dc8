// The replay page: the caller's recordings (GET api/recordings) and asciinema-player on one.
//
// The token comes as on the terminal page ("#token=...", kept for this tab only) and goes out as
// "Authorization: Bearer" on every API request, never in a URL. asciinema-player (from npm)
// fetches the recording itself with that header and brings its own controls: play/pause (the
// button, or space), seek (the progress bar, or the arrow keys). window.kuberReplay is for the
// tests: the player, and the text its terminal shows.
(() => {
  "use strict";

  const statusLine = document.getElementById("status");
  const list = document.getElementById("recordings");
  const fragment = new URLSearchParams(location.hash.slice(1));
  let token = sessionStorage.getItem("kuber-exec-token");
  if (fragment.has("token")) {
    token = fragment.get("token");
    sessionStorage.setItem("kuber-exec-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const params = new URLSearchParams(location.search);
  const chosen = params.get("id");

  const state = {
    player: null,
    loaded: false,
    ended: false,
    error: null,
    screen() {
      // The player's terminal: one .ap-line per row, spaces as they are drawn.
      const lines = Array.from(document.querySelectorAll("#player .ap-line"), (line) =>
        line.textContent.replace(/\u00a0/g, " ").replace(/\s+$/, ""),
      );
      return lines.join("\n").replace(/\n+$/, "");
    },
  };
  window.kuberReplay = state;

  function setStatus(text, kind) {
    statusLine.textContent = text;
    statusLine.className = kind || "";
    document.body.dataset.state = kind || "";
  }

  function describe(entry) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = "replay?id=" + encodeURIComponent(entry.id);
    link.dataset.id = entry.id;
    if (entry.id === chosen) link.setAttribute("aria-current", "true");
    link.textContent = `${entry.deployment}: ${entry.command.join(" ")}`;
    const note = document.createElement("small");
    note.textContent = `${entry.started_at} · ${entry.size} bytes`;
    link.append(note);
    item.append(link);
    return item;
  }

  async function load() {
    const response = await fetch("api/recordings", { headers });
    const answer = await response.json();
    if (!response.ok) {
      setStatus(`${answer.code}: ${answer.message}`, "failed");
      return;
    }
    list.replaceChildren(...answer.recordings.map(describe));
    if (!chosen) {
      setStatus(`${answer.recordings.length} recordings: choose one`, "listed");
      return;
    }
    const player = AsciinemaPlayer.create(
      { url: "api/recordings/" + encodeURIComponent(chosen), fetchOpts: { headers } },
      document.getElementById("player"),
      // Pauses longer than 2 s (someone thinking) play as 2 s.
      { controls: true, preload: true, fit: false, terminalFontSize: "14px", idleTimeLimit: 2 },
    );
    state.player = player;
    player.addEventListener("metadata", () => {
      state.loaded = true;
      setStatus(`${chosen}: ${player.getDuration().toFixed(1)} s`, "ready");
    });
    player.addEventListener("play", () => setStatus(`${chosen}: playing`, "playing"));
    player.addEventListener("pause", () => setStatus(`${chosen}: paused`, "paused"));
    player.addEventListener("ended", () => {
      state.ended = true;
      setStatus(`${chosen}: ended`, "ended");
    });
  }

  load().catch((error) => {
    state.error = String(error);
    setStatus(String(error), "failed");
  });
})();
