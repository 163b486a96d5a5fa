// The playground: streams speech from POST /v1/audio/speech and plays it as it arrives.
// State for people and for the browser test lives in `window.playground`.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const apiKey = params.get("api_key");
const SAMPLE_RATE = 24000;

const playground = (window.playground = {
  state: "idle", // idle | requesting | playing | done | stopped | error
  firstAudioMs: null, // request sent -> first audio scheduled for playback
  rtf: null,
  audioSeconds: 0,
  chunks: 0,
  requestId: null,
  error: null,
});

let controller = null;
let audioCtx = null;
let sources = [];

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}

function setState(s, text) {
  playground.state = s;
  $("status").textContent = text || s;
  const busy = s === "requesting" || s === "playing";
  $("play").disabled = busy;
  $("stop").disabled = !busy;
}

async function loadCatalog() {
  try {
    const [voices, models] = await Promise.all([
      fetch("/v1/audio/voices", { headers: headers() }).then((r) => r.json()),
      fetch("/v1/models", { headers: headers() }).then((r) => r.json()),
    ]);
    const m = (models.data || [])[0] || {};
    const base = m.kind === "Base"; // voice cloning: the voice comes from a recording
    $("clone").hidden = !base;
    $("instructions-row").hidden = base;
    const vsel = $("voice");
    for (const v of voices.voices || []) vsel.add(new Option(v, v));
    if (!vsel.options.length)
      vsel.add(new Option(base ? "(cloned from the recording)" : "(set by instructions)", ""));
    const lsel = $("language");
    for (const l of voices.languages || ["auto"]) lsel.add(new Option(l, l));
    $("model-line").textContent = "Model: " + (voices.model || m.root || "?");
    $("noise-warning").hidden = !m.random_weights;
  } catch (e) {
    $("model-line").textContent = "Cannot reach the server: " + e;
  }
}

function stopAudio() {
  for (const s of sources) {
    try { s.stop(); } catch (_) { /* already ended */ }
  }
  sources = [];
  const p = $("player");
  p.pause();
  p.removeAttribute("src");
  p.hidden = true;
}

function stop() {
  if (controller) controller.abort();
  controller = null;
  stopAudio();
  if (playground.state === "requesting" || playground.state === "playing") setState("stopped");
}

function showTtfa(t0) {
  if (playground.firstAudioMs !== null) return;
  playground.firstAudioMs = performance.now() - t0;
  $("ttfa").textContent = playground.firstAudioMs.toFixed(0) + " ms";
  setState("playing");
}

function showProgress(t0, seconds) {
  playground.audioSeconds = seconds;
  $("audio-seconds").textContent = seconds.toFixed(2) + " s";
  if (seconds > 0) {
    playground.rtf = (performance.now() - t0) / 1000 / seconds;
    $("rtf").textContent = playground.rtf.toFixed(3);
  }
}

// pcm: s16le mono 24 kHz, scheduled chunk by chunk through Web Audio.
async function playPcm(body, t0) {
  let next = 0;
  let carry = null; // an odd trailing byte
  let samples = 0;
  const reader = body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let bytes = value;
    if (carry !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = carry;
      joined.set(bytes, 1);
      bytes = joined;
      carry = null;
    }
    if (bytes.length % 2) {
      carry = bytes[bytes.length - 1];
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    const n = bytes.length / 2;
    if (!n) continue;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    const buf = audioCtx.createBuffer(1, n, SAMPLE_RATE);
    const ch = buf.getChannelData(0);
    for (let i = 0; i < n; i++) ch[i] = view.getInt16(2 * i, true) / 32768;
    const src = audioCtx.createBufferSource();
    src.buffer = buf;
    src.connect(audioCtx.destination);
    next = Math.max(next, audioCtx.currentTime + 0.03);
    src.start(next);
    next += buf.duration;
    sources.push(src);
    src.onended = () => { sources = sources.filter((s) => s !== src); };
    samples += n;
    playground.chunks++;
    showTtfa(t0);
    showProgress(t0, samples / SAMPLE_RATE);
  }
}

// mp3 through Media Source (plays while streaming), where supported.
async function playMp3Streaming(body, t0) {
  const ms = new MediaSource();
  const p = $("player");
  p.src = URL.createObjectURL(ms);
  p.hidden = false;
  await new Promise((ok) => ms.addEventListener("sourceopen", ok, { once: true }));
  const sb = ms.addSourceBuffer("audio/mpeg");
  const reader = body.getReader();
  let bytes = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (sb.updating) await new Promise((ok) => sb.addEventListener("updateend", ok, { once: true }));
    sb.appendBuffer(value);
    bytes += value.length;
    playground.chunks++;
    if (playground.firstAudioMs === null) {
      p.play().catch(() => {});
      showTtfa(t0);
    }
    showProgress(t0, (bytes * 8) / 64000); // 64 kb/s CBR
  }
  if (sb.updating) await new Promise((ok) => sb.addEventListener("updateend", ok, { once: true }));
  if (ms.readyState === "open") ms.endOfStream();
}

// Other formats: collect, then play the whole file.
async function playWhole(resp, t0, type) {
  const reader = resp.body.getReader();
  const parts = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
    playground.chunks++;
  }
  const blob = new Blob(parts, { type });
  const p = $("player");
  p.src = URL.createObjectURL(blob);
  p.hidden = false;
  await p.play().catch(() => {});
  showTtfa(t0);
  await new Promise((ok) => (p.readyState >= 1 ? ok() : p.addEventListener("loadedmetadata", ok, { once: true })));
  if (isFinite(p.duration)) showProgress(t0, p.duration);
}

async function play(ev) {
  ev.preventDefault();
  stop();
  Object.assign(playground, { firstAudioMs: null, rtf: null, audioSeconds: 0, chunks: 0, requestId: null, error: null });
  for (const id of ["ttfa", "rtf", "audio-seconds", "request-id"]) $(id).textContent = "–";
  const format = $("format").value;
  if (!audioCtx) audioCtx = new (window.AudioContext || window.webkitAudioContext)();
  if (audioCtx.state === "suspended") await audioCtx.resume().catch(() => {});
  controller = new AbortController();
  const body = {
    model: "tts-1",
    input: $("text").value,
    response_format: format,
    language: $("language").value || "auto",
  };
  if ($("voice").value) body.voice = $("voice").value;
  if (!$("instructions-row").hidden && $("instructions").value.trim())
    body.instructions = $("instructions").value;
  if (!$("clone").hidden) {
    const file = $("ref-audio").files[0];
    if (!file) {
      playground.error = "choose a recording of the voice to clone";
      setState("error", "error: " + playground.error);
      return;
    }
    body.ref_audio = await dataUrl(file);
    if ($("xvec-only").checked) body.x_vector_only_mode = true;
    else body.ref_text = $("ref-text").value;
  }
  if ($("seed").value.trim() !== "") body.seed = Number($("seed").value);
  if ($("speed").value !== "1") body.speed = Number($("speed").value);
  setState("requesting");
  const t0 = performance.now();
  try {
    const resp = await fetch("/v1/audio/speech", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    playground.requestId = resp.headers.get("x-request-id");
    $("request-id").textContent = playground.requestId || "–";
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || resp.statusText);
    }
    if (format === "pcm") await playPcm(resp.body, t0);
    else if (format === "mp3" && window.MediaSource && MediaSource.isTypeSupported("audio/mpeg"))
      await playMp3Streaming(resp.body, t0);
    else await playWhole(resp, t0, resp.headers.get("content-type") || "audio/" + format);
    if (playground.state === "playing" || playground.state === "requesting") setState("done", "done (audio may still be playing)");
  } catch (e) {
    if (e.name === "AbortError") return; // stopped by the user
    playground.error = String(e.message || e);
    setState("error", "error: " + playground.error);
  } finally {
    controller = null;
  }
}

// A file as a `data:` URI (base64), as `ref_audio` takes it.
function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

$("form").addEventListener("submit", play);
$("stop").addEventListener("click", stop);
loadCatalog();
