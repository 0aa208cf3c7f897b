// fasttts review page. Hand-written vanilla JS, no dependencies: the page opens from file:// offline.
// Its data (one JSON block in the page) is report.json's lines plus what the page needs: each line's
// status, the relative paths of its audio, the envelope of the original audio and the dub's command.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("review-data").textContent);
  const $ = (id) => document.getElementById(id);
  // The lines come packed (one key list, value lists; page.py's `pack`); null means "not in the report".
  const lines = D.lines.rows.map((row) => {
    const l = {};
    D.lines.keys.forEach((k, i) => { if (row[i] !== null) l[k] = row[i]; });
    return l;
  });
  const byIndex = new Map(lines.map((l) => [l.index, l]));
  const label = new Map(D.statuses.map((s) => [s[0], s[1]]));
  const EPS = 1e-3;

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmtTime(t) {
    if (t === undefined || t === null) return "";
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = t % 60;
    const ss = s.toFixed(2).padStart(5, "0");
    return (h ? h + ":" + String(m).padStart(2, "0") : String(m)) + ":" + ss;
  }
  function num(v, d) { return v === undefined || v === null ? "" : Number(v).toFixed(d); }
  // "--retake" syntax, as dub parses it: sorted, runs of consecutive lines as a-b, comma-separated.
  function ranges(ids) {
    const s = Array.from(new Set(ids)).sort((a, b) => a - b);
    const runs = [];
    for (const i of s) {
      if (runs.length && i === runs[runs.length - 1][1] + 1) runs[runs.length - 1][1] = i;
      else runs.push([i, i]);
    }
    return runs.map((r) => (r[0] === r[1] ? String(r[0]) : r[0] + "-" + r[1])).join(",");
  }

  // ---- header ---------------------------------------------------------------------------------
  $("title").textContent = D.title;
  const counts = {};
  for (const l of lines) counts[l.status] = (counts[l.status] || 0) + 1;
  const sm = D.summary || {};
  $("summary").textContent =
    lines.length + " lines · engine " + (D.engine || "?") + " · " + fmtTime(D.duration) +
    (sm.loudness_lufs !== undefined ? " · " + sm.loudness_lufs + " LUFS" : "") +
    (sm.max_factor !== undefined ? " · max speed " + sm.max_factor + "x" : "") +
    " · fasttts " + D.fasttts;
  for (const s of D.statuses) {
    const sp = el("span", { title: s[2] });
    sp.appendChild(el("i", { class: "sw st-" + s[0] }));
    sp.appendChild(document.createTextNode(s[1] + " " + (counts[s[0]] || 0)));
    $("legend").appendChild(sp);
  }

  // ---- video ----------------------------------------------------------------------------------
  // The source's frames; the dubbed file's (the same picture) when the source is no longer where it was.
  const video = $("video");
  const picture = D.media.video || D.media.dubbed;
  if (picture) video.src = picture;
  else { video.style.display = "none"; $("nopicture").style.display = "flex"; }

  // ---- timeline -------------------------------------------------------------------------------
  const scroller = $("tl-scroll"), track = $("tl-track"), canvas = $("tl-env"), playhead = $("playhead");
  const env = D.envelope ? Uint8Array.from(atob(D.envelope.peaks), (c) => c.charCodeAt(0)) : null;
  let pps = 1; // pixels per second
  let head = 0; // playhead, seconds
  let selected = null;
  const chosen = new Set();
  const blocks = new Map(); // line index -> its block
  const slots = [];

  for (const l of lines) {
    if (l.slot) {
      const s = el("div", { class: "slot", title: "#" + l.index + " slot " + fmtTime(l.slot[0]) + "–" + fmtTime(l.slot[1]) });
      s._t = l.slot;
      slots.push(s);
      track.appendChild(s);
    }
  }
  // Lanes: a line that starts before the previous one in its lane ends goes to the second lane.
  const laneEnd = [-1, -1];
  const placedOrder = lines.filter((l) => l.start !== undefined).sort((a, b) => a.start - b.start);
  const lanes = new Map();
  for (const l of placedOrder) {
    const lane = l.start >= laneEnd[0] - EPS ? 0 : 1;
    laneEnd[lane] = Math.max(laneEnd[lane], l.end);
    lanes.set(l.index, lane);
  }
  for (const l of lines) {
    const placed = l.start !== undefined;
    const b = el("div", {
      class: "blk st-" + l.status + " lane" + ((lanes.get(l.index) || 0) + 1) + (placed ? "" : " unplaced"),
      "data-index": l.index,
      "data-status": l.status,
      title: "#" + l.index + " " + (l.speaker || "") + ": " + l.text + " (" + label.get(l.status) + ")",
    }, l.index + " " + (l.speaker || ""));
    if (placed) b.setAttribute("data-placed", "1");
    b._t = placed ? [l.start, l.end] : l.slot || [0, 0];
    b.addEventListener("click", (ev) => { ev.stopPropagation(); select(l.index, true); });
    blocks.set(l.index, b);
    track.appendChild(b);
  }

  function fitPps() { return Math.max(1e-3, (scroller.clientWidth - 2) / Math.max(D.duration, 1)); }
  function layout() {
    track.style.width = Math.ceil(D.duration * pps) + "px";
    for (const s of slots) { s.style.left = s._t[0] * pps + "px"; s.style.width = Math.max(1, (s._t[1] - s._t[0]) * pps) + "px"; }
    for (const b of blocks.values()) { b.style.left = b._t[0] * pps + "px"; b.style.width = Math.max(2, (b._t[1] - b._t[0]) * pps) + "px"; }
    playhead.style.left = head * pps + "px";
    $("zoom-label").textContent = "zoom " + (pps >= 10 ? pps.toFixed(0) : pps.toFixed(2)) + " px/s";
    draw();
  }
  function zoomTo(next, anchorX) {
    const min = fitPps(), max = 400;
    next = Math.min(max, Math.max(min, next));
    const ax = anchorX === undefined ? scroller.clientWidth / 2 : anchorX;
    const t = (scroller.scrollLeft + ax) / pps;
    pps = next;
    layout();
    scroller.scrollLeft = t * pps - ax;
    draw();
  }
  $("zoom-in").onclick = () => zoomTo(pps * 2);
  $("zoom-out").onclick = () => zoomTo(pps / 2);
  $("zoom-fit").onclick = () => { pps = fitPps(); layout(); scroller.scrollLeft = 0; };
  scroller.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey) return;
    ev.preventDefault();
    const r = scroller.getBoundingClientRect();
    zoomTo(pps * (ev.deltaY < 0 ? 1.25 : 0.8), ev.clientX - r.left);
  }, { passive: false });
  let pending = false;
  scroller.addEventListener("scroll", () => {
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); }
  });
  track.addEventListener("click", (ev) => {
    const r = track.getBoundingClientRect();
    seek((ev.clientX - r.left) / pps);
  });

  // The envelope and the time ruler are drawn for the visible part only: a film at a high zoom would be
  // wider than any canvas can be.
  function draw() {
    const w = scroller.clientWidth, h = 72, dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr); }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const x0 = scroller.scrollLeft;
    const mid = 40, amp = 30;
    if (env) {
      const hop = D.envelope.hop;
      g.fillStyle = "#5c6b80";
      for (let x = 0; x < w; x++) {
        const a = Math.floor((x0 + x) / pps / hop), b = Math.max(a + 1, Math.floor((x0 + x + 1) / pps / hop));
        let m = 0;
        for (let k = a; k < b && k < env.length; k++) if (env[k] > m) m = env[k];
        if (m) { const v = (m / 255) * amp; g.fillRect(x, mid - v, 1, 2 * v); }
      }
    } else {
      g.fillStyle = "#9aa3b2";
      g.fillText(D.media.source ? "" : "no original audio (no --video): slots and dub only", 8, mid);
    }
    // ruler: a tick every 1, 2, 5, 10, 30 s ... whichever leaves ~80 px between labels
    const steps = [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800];
    const step = steps.find((s) => s * pps >= 80) || 3600;
    g.fillStyle = "#9aa3b2"; g.font = "10px system-ui, sans-serif";
    for (let t = Math.floor(x0 / pps / step) * step; t * pps < x0 + w; t += step) {
      const x = t * pps - x0;
      g.fillRect(x, 0, 1, 6);
      g.fillText(fmtTime(t).replace(/\.00$/, ""), x + 3, 9);
    }
  }

  function seek(t) {
    head = Math.max(0, Math.min(D.duration, t));
    playhead.style.left = head * pps + "px";
    $("playhead-label").textContent = "playhead " + fmtTime(head);
    if (picture && video.readyState >= 1) video.currentTime = head;
    else if (picture) video.addEventListener("loadedmetadata", () => { video.currentTime = head; }, { once: true });
  }
  function reveal(t) {
    const x = t * pps;
    if (x < scroller.scrollLeft || x > scroller.scrollLeft + scroller.clientWidth - 40) {
      scroller.scrollLeft = Math.max(0, x - scroller.clientWidth / 3);
    }
  }

  // ---- the clicked line -----------------------------------------------------------------------
  function player(id, caption, src) {
    const wrap = el("label", {}, caption);
    const a = el("audio", { id: id, controls: "", preload: "metadata" });
    if (src) a.setAttribute("src", src); else { a.setAttribute("data-none", "1"); wrap.appendChild(el("span", { class: "hint" }, "(none)")); }
    wrap.appendChild(a);
    return [wrap, a];
  }
  function mediaFragment(url, a, b) { return url + "#t=" + Math.max(0, a).toFixed(3) + "," + b.toFixed(3); }

  function select(index, fromTimeline) {
    const l = byIndex.get(index);
    if (!l) return;
    if (selected !== null && blocks.get(selected)) blocks.get(selected).classList.remove("sel");
    selected = index;
    blocks.get(index).classList.add("sel");
    for (const tr of rowsEl.querySelectorAll("tr.sel")) tr.classList.remove("sel");
    const row = rowOf.get(index);
    if (row) {
      row.classList.add("sel");
      // Scroll the table's own box only: the timeline the click came from stays in view.
      const wrap = $("table-wrap");
      if (fromTimeline && (row.offsetTop < wrap.scrollTop + 24 || row.offsetTop > wrap.scrollTop + wrap.clientHeight - 24)) {
        wrap.scrollTop = row.offsetTop - wrap.clientHeight / 3;
      }
    }
    const t0 = l.start !== undefined ? l.start : l.slot ? l.slot[0] : 0;
    const t1 = l.end !== undefined ? l.end : l.slot ? l.slot[1] : t0;
    if (!fromTimeline) reveal(t0);
    seek(t0);

    const det = $("detail");
    det.textContent = "";
    const h = el("h2", {}, "#" + l.index + " · " + (l.speaker || "(no speaker)") + " · ");
    const sw = el("span", {}); sw.appendChild(el("i", { class: "sw st-" + l.status }));
    sw.appendChild(document.createTextNode(label.get(l.status))); h.appendChild(sw);
    det.appendChild(h);
    det.appendChild(el("div", { class: "text" }, l.text));
    const ps = el("div", { class: "players" });
    const [w1] = player("play-line", "dubbed line (take " + l.take + ")", l.clip ? D.media.clips + l.clip + ".wav" : null);
    const [w2] = player("play-original", "original cue", D.media.source && l.slot ? mediaFragment(D.media.source, l.slot[0], l.slot[1]) : null);
    const [w3] = player("play-mix", "mix at this point", D.media.mix ? mediaFragment(D.media.mix, t0, t1) : null);
    ps.append(w1, w2, w3);
    det.appendChild(ps);
    const tgt = D.loudness_target;
    const loud = l.lufs === undefined ? "" : l.lufs + " LUFS as rendered" +
      (tgt !== undefined && tgt !== null ? ", levelled by " + (tgt - l.lufs >= 0 ? "+" : "") + (tgt - l.lufs).toFixed(1) + " dB to " + tgt : "");
    const facts = [
      ["slot", l.slot ? fmtTime(l.slot[0]) + " – " + fmtTime(l.slot[1]) + " (" + num(l.slot[1] - l.slot[0], 2) + " s)" : ""],
      ["placed", l.start !== undefined ? fmtTime(l.start) + " – " + fmtTime(l.end) : "not placed"],
      ["natural", num(l.natural, 3) + " s"], ["target", num(l.target, 3) + " s"],
      ["final", num(l.duration, 3) + " s"], ["speed", num(l.factor, 3) + "x (" + (l.action || "") + ")"],
      ["render factor", num(l.render_factor, 3)], ["DSP tempo", num(l.stretch_factor, 3)],
      ["shift", num(l.shift, 3) + " s"], ["overflow", num(l.overflow, 3) + " s"],
      ["loudness", loud], ["retries", l.retries],
      ["take", l.take + " of " + l.takes.join(", ")], ["seed", l.seed],
      ["reference", l.reference || ""], ["emotion", l.emotion || D.emotion_default],
      ["source", l.source || ""], ["cached", l.cached ? "yes" : "no"],
    ];
    const dl = el("dl");
    for (const [k, v] of facts) { dl.appendChild(el("dt", {}, k)); dl.appendChild(el("dd", {}, v)); }
    det.appendChild(dl);
    for (const w of [l.note, l.error ? "error: " + l.error : "", ...(l.warnings || [])]) {
      if (w) det.appendChild(el("div", { class: "warn" }, w));
    }
  }

  // ---- the table ------------------------------------------------------------------------------
  const FILTERS = [
    ["all", "all lines", () => true],
    ["sped-up", "sped up (action sped-up)", (l) => l.action === "sped-up"],
    ["faster-1.15", "sped up more than 1.15x", (l) => (l.factor || 0) > 1.15],
    ["rendered", "rendered to fit (model)", (l) => Math.abs((l.render_factor || 1) - 1) > EPS],
    ["dsp", "DSP tempo changed", (l) => Math.abs((l.stretch_factor || 1) - 1) > EPS],
    ["shifted", "shifted", (l) => (l.shift || 0) > EPS],
    ["overflowing", "overflowing", (l) => (l.overflow || 0) > EPS],
    ["truncated", "truncated", (l) => !!l.truncated],
    ["emotion-fallback", "emotion fell back", (l) => !!l.emotion_fallback],
    ["retried", "retried", (l) => (l.retries || 0) > 0],
    ["failed", "failed or silent", (l) => !!l.error || l.start === undefined],
    ["warned", "with warnings", (l) => !!(l.warnings && l.warnings.length) || !!l.note],
    ["retaken", "retaken (take > 1)", (l) => l.take > 1],
  ];
  const COLS = [
    ["sel", "", null], ["index", "#", (l) => l.index], ["speaker", "speaker", (l) => l.speaker || ""],
    ["status", "status", (l) => label.get(l.status)], ["start", "start", (l) => (l.start !== undefined ? l.start : l.slot ? l.slot[0] : 0)],
    ["slotlen", "slot s", (l) => (l.slot ? l.slot[1] - l.slot[0] : 0)], ["natural", "natural", (l) => l.natural || 0],
    ["duration", "final", (l) => l.duration || 0], ["factor", "speed", (l) => l.factor || 0],
    ["render_factor", "render", (l) => l.render_factor || 0], ["stretch_factor", "tempo", (l) => l.stretch_factor || 0],
    ["shift", "shift", (l) => l.shift || 0], ["retries", "retries", (l) => l.retries || 0],
    ["take", "take", (l) => l.take], ["text", "text", (l) => l.text],
  ];
  const filterEl = $("filter");
  for (const [k, name] of FILTERS) filterEl.appendChild(el("option", { value: k }, name));
  const rowsEl = $("rows");
  const rowOf = new Map();
  let sortKey = "index", sortDir = 1;
  for (const [k, name] of COLS) {
    const th = el("th", { "data-key": k }, name);
    if (k !== "sel") th.addEventListener("click", () => { sortDir = sortKey === k ? -sortDir : 1; sortKey = k; render(); });
    $("head").appendChild(th);
  }
  const built = new Map(); // line index -> its row, made once: filtering and sorting only reorder
  function rowFor(l) {
    let tr = built.get(l.index);
    if (!tr) { tr = cells(l); built.set(l.index, tr); }
    tr.classList.toggle("sel", l.index === selected);
    return tr;
  }
  function cells(l) {
    const tr = el("tr", { "data-index": l.index });
    const td0 = el("td");
    const box = el("input", { type: "checkbox", "data-index": l.index });
    box.checked = chosen.has(l.index);
    box.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(l.index, box.checked); });
    td0.appendChild(box); tr.appendChild(td0);
    const st = el("td", { class: "status" }); st.appendChild(el("i", { class: "sw st-" + l.status })); st.appendChild(document.createTextNode(label.get(l.status)));
    const vals = [
      [l.index, "num"], [l.speaker || "", ""], null, [fmtTime(l.start !== undefined ? l.start : l.slot ? l.slot[0] : null), "num"],
      [l.slot ? num(l.slot[1] - l.slot[0], 2) : "", "num"], [num(l.natural, 2), "num"], [num(l.duration, 2), "num"],
      [num(l.factor, 3), "num"], [num(l.render_factor, 3), "num"], [num(l.stretch_factor, 3), "num"],
      [num(l.shift, 2), "num"], [l.retries || 0, "num"], [l.take + (l.takes.length > 1 ? "/" + l.takes.length : ""), "num"], [l.text, ""],
    ];
    for (const v of vals) tr.appendChild(v === null ? st : el("td", v[1] ? { class: v[1] } : {}, v[0]));
    tr.addEventListener("click", () => select(l.index, false));
    return tr;
  }
  function shown() {
    const f = FILTERS.find((x) => x[0] === filterEl.value)[2];
    const q = $("search").value.trim().toLowerCase();
    return lines.filter((l) => f(l) && (!q || (l.text + " " + (l.speaker || "")).toLowerCase().includes(q)));
  }
  function render() {
    const get = COLS.find((c) => c[0] === sortKey)[2];
    const rows = shown().sort((a, b) => {
      const x = get(a), y = get(b);
      return (x < y ? -1 : x > y ? 1 : a.index - b.index) * sortDir;
    });
    rowOf.clear();
    const trs = rows.map((l) => { const tr = rowFor(l); rowOf.set(l.index, tr); return tr; });
    rowsEl.replaceChildren(...trs);
    for (const th of $("head").children) {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir > 0);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir < 0);
    }
    $("count").textContent = rows.length + " of " + lines.length + " shown";
  }
  filterEl.addEventListener("change", render);
  $("search").addEventListener("input", render);

  // ---- the retake command ---------------------------------------------------------------------
  function toggle(index, on) {
    if (on) chosen.add(index); else chosen.delete(index);
    blocks.get(index).classList.toggle("chosen", on);
    const tr = built.get(index); // its row, shown or filtered out
    if (tr) tr.querySelector("input").checked = on;
    compose();
  }
  function compose() {
    $("chosen-count").textContent = chosen.size;
    const out = $("command");
    if (!D.command) out.textContent = "(this work folder does not record the dub's command line: it was made by `fasttts batch` or an older fasttts; add --retake " + (chosen.size ? ranges([...chosen]) : "N") + " to the dub command you ran)";
    else if (!chosen.size) out.textContent = "(tick lines in the table to compose the command)";
    else out.textContent = D.command + " --retake " + ranges([...chosen]);
  }
  $("select-shown").onclick = () => { for (const l of shown()) toggle(l.index, true); };
  $("select-none").onclick = () => { for (const i of [...chosen]) toggle(i, false); };
  $("copy").onclick = () => {
    const text = $("command").textContent;
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text);
    else {
      const r = document.createRange(); r.selectNodeContents($("command"));
      const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); document.execCommand("copy");
    }
  };

  render();
  compose();
  pps = fitPps();
  layout();
  seek(0);
  window.addEventListener("resize", () => zoomTo(Math.max(pps, fitPps())));
  document.body.setAttribute("data-ready", "1"); // for tests: the timeline is drawn
})();
