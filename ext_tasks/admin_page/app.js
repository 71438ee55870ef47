// The admin page: totals, a filterable table refreshed every second, and a task's detail. Read-only; it
// asks the admin API with the token given in the URL fragment (#token=..., never sent to a server) or
// typed in, kept for this tab only (sessionStorage).
"use strict";
const REFRESH_MS = 1000;
let token = sessionStorage.getItem("ext-tasks-admin-token") || "";
let selected = null;
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("token")) {
  token = fragment.get("token");
  sessionStorage.setItem("ext-tasks-admin-token", token);
  history.replaceState(null, "", location.pathname);
}

const $ = (id) => document.getElementById(id);

function text(tag, value, className) {
  const cell = document.createElement(tag);
  cell.textContent = value == null ? "" : String(value);
  if (className) cell.className = className;
  return cell;
}

function seconds(ms) {
  if (ms == null) return "";
  return ms < 60000 ? (ms / 1000).toFixed(1) + " s" : Math.round(ms / 60000) + " min";
}

async function api(path) {
  const reply = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (reply.status === 401) {
    $("token-box").hidden = false;
    throw new Error("the admin token was refused");
  }
  if (!reply.ok) throw new Error("HTTP " + reply.status);
  return reply.json();
}

function query() {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData($("filters"))) if (value) params.set(name, value);
  return params.toString();
}

function showTotals(totals) {
  const box = $("totals");
  box.replaceChildren();
  const add = (label, value) => {
    const item = text("span", label, "total");
    item.dataset.total = label;
    item.append(text("b", value));
    box.append(item);
  };
  add("all", totals.all);
  for (const [status, count] of Object.entries(totals.byStatus)) add(status, count);
  add("stuck", totals.stuck);
  for (const [tool, count] of Object.entries(totals.byTool)) add("tool " + tool, count);
  for (const [who, count] of Object.entries(totals.byPrincipal)) add("principal " + who, count);
}

function showTasks(tasks, now) {
  const body = $("tasks").tBodies[0];
  body.replaceChildren();
  for (const task of tasks) {
    const row = document.createElement("tr");
    row.dataset.taskId = task.taskId;
    row.append(
      text("td", task.taskId),
      text("td", task.status, "status status-" + task.status),
      text("td", task.statusMessage, "message"),
      text("td", task.tool),
      text("td", task.principal),
      text("td", seconds(task.ageMs)),
      text("td", task.attempts),
      text("td", task.lease ? task.lease.holder : ""),
      text("td", task.lease ? seconds(now - task.lease.lastHeartbeat) + " ago" : ""),
      text("td", task.stuck || "", task.stuck ? "stuck" : ""),
      text("td", task.lastError ? task.lastError.message : ""),
    );
    row.addEventListener("click", () => showDetail(task.taskId));
    body.append(row);
  }
}

async function showDetail(taskId) {
  selected = taskId;
  try {
    const task = await api("api/tasks/" + encodeURIComponent(taskId));
    $("detail-title").textContent = "Task " + taskId;
    $("detail-body").textContent = JSON.stringify(task, null, 2);
    $("detail").hidden = false;
  } catch (error) {
    $("error").textContent = String(error.message || error);
  }
}

async function refresh() {
  try {
    const listing = await api("api/tasks?" + query());
    showTotals(listing.totals);
    showTasks(listing.tasks, listing.now);
    $("updated").textContent = "updated " + new Date(listing.now).toLocaleTimeString();
    $("error").textContent = "";
    if (selected) await showDetail(selected);
  } catch (error) {
    $("error").textContent = String(error.message || error);
  }
}

$("token-save").addEventListener("click", () => {
  token = $("token").value;
  sessionStorage.setItem("ext-tasks-admin-token", token);
  $("token-box").hidden = true;
  refresh();
});
$("filters").addEventListener("input", refresh);
$("filters").addEventListener("submit", (event) => event.preventDefault());
refresh();
setInterval(refresh, REFRESH_MS);
