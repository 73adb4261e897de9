// ocrforge demo page: upload an image or PDF, draw the recognised lines over it.
"use strict";
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const BROWSER_IMAGES = new Set(["png", "jpeg", "gif", "webp", "bmp"]);
let result = null, pageIndex = 0, imageURL = null;

function apiKey() { return $("apikey").value || sessionStorage.getItem("ocrforge-key") || ""; }
function headers() { const k = apiKey(); return k ? { "X-API-Key": k } : {}; }
function message(text, isError) { $("message").textContent = text; $("message").className = isError ? "error" : ""; }
function needKey() { $("keybox").hidden = false; $("apikey").focus(); }

async function checkStatus() {
  const pill = $("status");
  try {
    const r = await fetch("v1/info", { headers: headers() });
    if (r.status === 401) { pill.textContent = "API key needed"; pill.className = "pill bad"; needKey(); return; }
    const info = await r.json();
    if (info.ready) {
      const e = info.engine;
      pill.textContent = `ready · ${e.model_set} · ${e.runtime} on ${e.devices}`;
      pill.className = "pill ok";
      $("cls").disabled = !info.cls_available;
    } else {
      pill.textContent = "loading models…"; pill.className = "pill";
      setTimeout(checkStatus, 1000);
    }
  } catch (err) { pill.textContent = "server unreachable"; pill.className = "pill bad"; }
}

async function upload(file) {
  if (!file) return;
  const params = new URLSearchParams({ format: "json" });
  if ($("det_limit").value) params.set("det_limit", $("det_limit").value);
  if ($("cls").checked) params.set("cls", "true");
  const form = new FormData();
  form.append("file", file, file.name);
  message(`Reading ${file.name} (${(file.size / 1024).toFixed(0)} KiB)…`);
  $("result").dataset.state = "busy";
  const t0 = performance.now();
  let r, body;
  try {
    r = await fetch(`v1/ocr?${params}`, { method: "POST", body: form, headers: headers() });
    body = await r.json();
  } catch (err) { message(`Request failed: ${err}`, true); $("result").dataset.state = "error"; return; }
  if (!r.ok) {
    const e = body && body.error ? body.error : { status: r.status, message: r.statusText };
    if (r.status === 401) needKey();
    message(`Error ${e.status}: ${e.message}`, true);
    $("result").dataset.state = "error";
    return;
  }
  if ($("apikey").value) sessionStorage.setItem("ocrforge-key", $("apikey").value);
  if (imageURL) URL.revokeObjectURL(imageURL);
  imageURL = BROWSER_IMAGES.has(body.content_type) ? URL.createObjectURL(file) : null;
  result = body; pageIndex = 0;
  const n = body.pages.reduce((s, p) => s + p.lines.length, 0);
  message(`${file.name}: ${n} line${n === 1 ? "" : "s"} in ${Math.round(performance.now() - t0)} ms`);
  render();
}

function render() {
  const page = result.pages[pageIndex];
  $("result").hidden = false;
  $("pager").hidden = result.pages.length < 2;
  $("pageno").textContent = pageIndex + 1;
  $("pagecount").textContent = result.pages.length;
  const stage = $("stage"), img = $("preview"), svg = $("overlay");
  svg.setAttribute("viewBox", `0 0 ${page.width} ${page.height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.replaceChildren();
  const blank = !imageURL;
  stage.classList.toggle("blank", blank);
  img.hidden = blank;
  if (blank) { stage.style.aspectRatio = `${page.width} / ${page.height}`; img.removeAttribute("src"); }
  else { stage.style.aspectRatio = ""; img.src = imageURL; }
  const list = $("lines");
  list.replaceChildren();
  page.lines.forEach((line, i) => {
    const poly = document.createElementNS(SVG, "polygon");
    poly.setAttribute("points", line.poly.map((p) => p.join(",")).join(" "));
    poly.classList.add("line");
    poly.dataset.i = i;
    const title = document.createElementNS(SVG, "title");
    title.textContent = `${line.text} (${line.score.toFixed(3)})`;
    poly.append(title);
    svg.append(poly);
    if (blank) {  // no picture of the page (PDF, TIFF): write the text into its box
      const ys = line.poly.map((p) => p[1]), xs = line.poly.map((p) => p[0]);
      const h = Math.max(...ys) - Math.min(...ys);
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("x", Math.min(...xs));
      t.setAttribute("y", Math.max(...ys) - h * 0.2);
      t.setAttribute("font-size", Math.max(h * 0.75, 4));
      t.textContent = line.text;
      svg.append(t);
    }
    const li = document.createElement("li");
    li.dataset.i = i;
    li.textContent = line.text;
    const score = document.createElement("small");
    score.textContent = line.score.toFixed(2);
    li.append(score);
    list.append(li);
  });
  $("text").textContent = page.text;
  const t = result.timings_ms;
  $("summary").textContent = `page ${page.page + 1}: ${page.lines.length} lines, ${page.width}×${page.height} px · ` +
    `server ${t.total.toFixed(0)} ms (decode ${t.decode.toFixed(0)}, queue ${t.queue.toFixed(0)}, ` +
    `inference ${t.inference.toFixed(0)}) · batch of ${result.batch.pages} page(s) from ` +
    `${result.batch.requests} request(s) · id ${result.request_id}`;
  $("result").dataset.state = "done";
}

function highlight(i, on) {
  document.querySelectorAll(`[data-i="${i}"]`).forEach((el) => el.classList.toggle("hl", on));
}
for (const id of ["overlay", "lines"]) {
  $(id).addEventListener("mouseover", (e) => { const i = e.target.closest("[data-i]"); if (i) highlight(i.dataset.i, true); });
  $(id).addEventListener("mouseout", (e) => { const i = e.target.closest("[data-i]"); if (i) highlight(i.dataset.i, false); });
}

async function copy(text, what) {
  try { await navigator.clipboard.writeText(text); }
  catch (err) {  // plain-http pages on another host have no clipboard API
    const ta = document.createElement("textarea");
    ta.value = text; document.body.append(ta); ta.select(); document.execCommand("copy"); ta.remove();
  }
  message(`Copied ${what}.`);
}
$("copy-text").onclick = () => result && copy(result.text, "text");
$("copy-json").onclick = () => result && copy(JSON.stringify(result, null, 2), "JSON");
$("download-json").onclick = () => {
  if (!result) return;
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([JSON.stringify(result, null, 2)], { type: "application/json" }));
  a.download = `${(result.source || "ocr").replace(/\.[^.]+$/, "")}.ocr.json`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
};
$("prev").onclick = () => { if (result && pageIndex > 0) { pageIndex--; render(); } };
$("next").onclick = () => { if (result && pageIndex < result.pages.length - 1) { pageIndex++; render(); } };

$("file").addEventListener("change", (e) => { upload(e.target.files[0]); e.target.value = ""; });
const drop = $("drop");
["dragenter", "dragover"].forEach((ev) => drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.add("over"); }));
["dragleave", "drop"].forEach((ev) => drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.remove("over"); }));
drop.addEventListener("drop", (e) => upload(e.dataTransfer.files[0]));
drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); $("file").click(); } });
$("apikey").addEventListener("change", checkStatus);
checkStatus();
